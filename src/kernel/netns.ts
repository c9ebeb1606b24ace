/**
 * Network namespace switching for the kernel worker thread. setns() changes only the calling thread,
 * and every switch is undone before control returns to the event loop: nothing ever awaits while switched.
 */
import { CLONE_NEWNET, O_CLOEXEC, O_RDONLY } from './constants';
import { callFailed } from './failure';
import { sys } from './syscalls';

/**
 * The worker thread's own netns, to return to after each switch. Module state on purpose: a netns belongs to the
 * calling thread, this module is loaded once per worker thread (each has its own module instance), and the descriptor
 * stays open for the thread's life, so it is the thread's, not shared by anything that could be passed it instead.
 */
let homeFd = -1;

/** Remembers the thread's own netns; call once when the worker starts. */
export function rememberHomeNetns(): void {
  if (homeFd >= 0) return;
  homeFd = sys.open('/proc/thread-self/ns/net', O_RDONLY | O_CLOEXEC);
  if (homeFd < 0) throw callFailed('open', '/proc/thread-self/ns/net', sys.errno());
}

export function openNetns(path: string): number {
  const fd = sys.open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw callFailed('open netns', path, sys.errno());
  return fd;
}

/** Runs a synchronous function inside the netns at `path` and always switches back. */
export function inNetns<T>(path: string, fn: () => T): T {
  const fd = openNetns(path);
  try {
    if (sys.setns(fd, CLONE_NEWNET) < 0) throw callFailed('setns', path, sys.errno());
  } finally {
    sys.close(fd); // the thread stays in the netns without it
  }
  try {
    return fn();
  } finally {
    // When this throws, its FATAL error replaces whatever fn threw: the thread must stop either way.
    returnHome();
  }
}

function returnHome(): void {
  if (sys.setns(homeFd, CLONE_NEWNET) < 0) {
    // Staying in a pod's netns would send every later operation to the wrong place: stop the thread.
    throw new Error(`FATAL: cannot return to the daemon's netns (errno ${sys.errno()})`);
  }
}
