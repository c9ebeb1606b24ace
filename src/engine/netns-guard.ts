/**
 * Is CNI_NETNS a pod's network namespace? It must exist, be a namespace (not a regular file), be a *network*
 * namespace, and be neither the daemon's own nor the host's (PID 1's): interfaces made there would land on the node
 * itself. Checked once per ADD, before anything is made; a few microseconds of stat and one ioctl.
 */
import { statSync, type Stats } from 'node:fs';
import { CniCode, CniError } from '../cni/errors';
import { CLONE_NEWNET, O_CLOEXEC, O_RDONLY } from '../kernel/constants';
import { errnoName, sys } from '../kernel/syscalls';
import { errorMessage } from '../common/error-message';

/** ioctl(NS_GET_NSTYPE): the CLONE_NEW* type of the namespace an nsfs file refers to. */
const NS_GET_NSTYPE = 0xb703;

export class NetnsGuard {
  private readonly own: Stats;
  private readonly host: Stats | undefined;
  /**
   * Why the host's namespace could not be identified, e.g. "/proc/1/ns/net: EACCES" (PID 1 in another user
   * namespace): then only plexusd's own namespace is refused, and the caller says so in its log.
   */
  readonly hostUnknown: string | undefined;

  constructor(ownPath = '/proc/self/ns/net', hostPath = '/proc/1/ns/net') {
    this.own = statSync(ownPath);
    try {
      this.host = statSync(hostPath);
    } catch (e) {
      this.hostUnknown = `${hostPath}: ${(e as NodeJS.ErrnoException).code ?? 'EIO'}`;
    }
  }

  /** Undefined when `path` is a pod's network namespace; else the error that says what it is instead. */
  problem(path: string): CniError | undefined {
    const bad = (msg: string, details = ''): CniError =>
      new CniError(CniCode.InvalidEnvironment, `CNI_NETNS ${path} ${msg}`, details);
    let st: Stats;
    try {
      st = statSync(path);
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code ?? 'EIO';
      return code === 'ENOENT'
        ? bad('does not exist', 'the sandbox may have been deleted: the runtime retries or removes it')
        : bad(`cannot be read (${code})`, errorMessage(e));
    }
    // Every namespace file, whether /proc/<pid>/ns/net or a bind mount under /var/run/netns, lives on nsfs.
    if (st.dev !== this.own.dev)
      return bad(
        `is not a network namespace: it is ${st.isDirectory() ? 'a directory' : st.isFile() ? 'a regular file' : 'not a namespace file'}`,
        'CNI_NETNS must be a netns path such as /var/run/netns/<name> or /proc/<pid>/ns/net',
      );
    const fd = sys.open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return bad(`cannot be opened (${errnoName(sys.errno())})`);
    const type = sys.ioctlInt(fd, NS_GET_NSTYPE, 0);
    sys.close(fd);
    if (type !== CLONE_NEWNET)
      return bad('is a namespace, but not a network namespace', `namespace type 0x${(type >>> 0).toString(16)}`);
    const same = (other: Stats | undefined): boolean =>
      other !== undefined && other.dev === st.dev && other.ino === st.ino;
    if (same(this.own))
      return bad(
        "is plexusd's own network namespace, not a pod's",
        'interfaces made there would land on the node itself',
      );
    if (same(this.host))
      return bad(
        "is the host's network namespace (PID 1's), not a pod's",
        'interfaces made there would land on the node itself',
      );
    return undefined;
  }
}
