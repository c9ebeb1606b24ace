/**
 * Is a directory one that only this process's user can change? What plexusd reads from such a directory it acts on
 * (a spooled DEL unplugs a pod), so the directory must be real (not a symlink someone could point elsewhere), owned
 * by the daemon's uid, and writable by nobody else; and no directory above it may let another user swap it.
 */
import { lstatSync, readlinkSync, realpathSync, statSync, type Stats } from 'node:fs';
import { dirname } from 'node:path';

const S_ISVTX = 0o1000;
const mode = (st: Stats): string => `0${(st.mode & 0o7777).toString(8)}`;
const code = (thrown: unknown): string => (thrown as NodeJS.ErrnoException | null)?.code ?? 'EIO';

const linkTarget = (path: string): string => {
  try {
    return readlinkSync(path);
  } catch {
    return '?';
  }
};

const ownedByOther = (uid: number): string => `is owned by uid ${uid}, who could replace what is in it`;
const writableWithoutSticky = (st: Stats, dir: string): string =>
  `is writable by group or others without the sticky bit (mode ${mode(st)}; chmod go-w ${dir})`;

/** What is wrong with `path` as a directory only `uid` may change, or undefined. */
export function untrustedDirProblem(path: string, uid: number): string | undefined {
  let st: Stats;
  try {
    st = lstatSync(path);
  } catch (thrown) {
    return `cannot be checked (${code(thrown)})`;
  }
  if (st.isSymbolicLink()) return `is a symbolic link (to ${linkTarget(path)}); use a real directory`;
  if (!st.isDirectory()) return 'is not a directory';
  if (st.uid !== uid) return `is owned by uid ${st.uid}, not by plexusd's uid ${uid} (chown ${uid} ${path})`;
  if (st.mode & 0o022) return `is writable by group or others (mode ${mode(st)}; chmod go-w ${path})`;
  return undefined;
}

/**
 * The first directory above `path` that another user could use to swap `path` for their own: one owned by someone
 * other than root or `uid`, or writable by group or others without the sticky bit (as /tmp has). Symlinks above
 * `path` are resolved first: /var/run -> /run is fine when /run is.
 */
export interface UntrustedAncestor {
  readonly path: string;
  readonly problem: string;
}

export function untrustedAncestor(path: string, uid: number): UntrustedAncestor | undefined {
  let dir: string;
  try {
    dir = realpathSync(dirname(path));
  } catch (thrown) {
    return { path: dirname(path), problem: `cannot be resolved (${code(thrown)})` };
  }
  for (;;) {
    const st = statSync(dir);
    if (st.uid !== 0 && st.uid !== uid) return { path: dir, problem: ownedByOther(st.uid) };
    if (st.mode & 0o022 && !(st.mode & S_ISVTX)) return { path: dir, problem: writableWithoutSticky(st, dir) };
    const up = dirname(dir);
    if (up === dir) return undefined;
    dir = up;
  }
}
