/**
 * A pod's netns held open for its teardown. A runtime removes the netns right after DEL answers, and the kernel then
 * dismantles it at its own pace: until it has, a link in it (a macvlan on the uplink) still answers for its address.
 * Held open, the netns stays reachable (through /proc/self/fd/N) until the background has deleted its links, and only
 * then are the leases released and the netns let go.
 */
import { closeSync, constants, fstatSync, openSync, statSync } from 'node:fs';

export interface PinnedNetns {
  /** A path to the same netns while it is held. */
  readonly path: string;
  release(): void;
}

/** Every namespace file lives on nsfs: the device of the daemon's own netns file. */
export const nsfsDevice = (): number => statSync('/proc/self/ns/net').dev;

/** Holds the netns at `path` open; undefined when nothing is there or it is not a namespace (nothing to hold). */
export function pinNetns(path: string, nsfsDev: number): PinnedNetns | undefined {
  let fd: number;
  try {
    // Non-blocking: a FIFO put at the path must not stall a DEL.
    fd = openSync(path, constants.O_RDONLY | constants.O_NONBLOCK);
  } catch {
    return undefined;
  }
  if (fstatSync(fd).dev !== nsfsDev) {
    closeSync(fd);
    return undefined;
  }
  let held = true;
  return {
    path: `/proc/self/fd/${fd}`,
    release: () => {
      if (held) closeSync(fd);
      held = false;
    },
  };
}
