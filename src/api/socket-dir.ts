/**
 * The socket's directory and the DEL spool in it, made if missing and refused when another user could change them:
 * plexusd replays what is spooled there as DELs, so whoever can write there can unplug any pod, and a spool that is
 * a symlink would have plexusd rename files of other programs. The socket path itself is cleared of what a previous
 * run left (a stale socket, a symlink) and a directory there is reported, not met with "address in use".
 */
import { lstatSync, mkdirSync, readlinkSync, unlinkSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { err, ok, type Result } from '../common/result';
import { untrustedAncestor, untrustedDirProblem } from '../common/trusted-dir';

export const SPOOL_DIR_NAME = 'pending-del';

const WHY =
  'plexusd replays the DELs spooled in this directory, so whoever can change it could unplug any pod; ' +
  'put the socket (--socket) in a directory owned by root, mode 0755 or 0700, such as /run/plexus';

const code = (thrown: unknown): string => (thrown as NodeJS.ErrnoException | null)?.code ?? 'EIO';

function mkdirIfMissing(path: string, mode: number, recursive: boolean): Result<void, string> {
  try {
    mkdirSync(path, { mode, recursive });
    return ok(undefined);
  } catch (thrown) {
    return code(thrown) === 'EEXIST' ? ok(undefined) : err(`cannot create ${path} (${code(thrown)})`);
  }
}

/** Makes and checks the socket directory and the spool; the spool's path, or what is wrong and how to fix it. */
export function prepareSocketDir(socketPath: string, uid: number): Result<{ readonly spoolDir: string }, string> {
  const dir = dirname(socketPath);
  const made = mkdirIfMissing(dir, 0o755, true);
  if (!made.ok) return made;
  const above = untrustedAncestor(dir, uid);
  if (above) return err(`${above.path}, above the socket directory ${dir}, ${above.problem}: ${WHY}`);
  const dirProblem = untrustedDirProblem(dir, uid);
  if (dirProblem) return err(`socket directory ${dir} ${dirProblem}: ${WHY}`);
  const spoolDir = join(dir, SPOOL_DIR_NAME);
  const spoolMade = mkdirIfMissing(spoolDir, 0o700, false);
  if (!spoolMade.ok) return spoolMade;
  const spoolProblem = untrustedDirProblem(spoolDir, uid);
  if (spoolProblem) return err(`DEL spool ${spoolDir} ${spoolProblem}: ${WHY}`);
  return ok({ spoolDir });
}

/** What stands at the socket path, to clear before listening. */
export type SocketPathState =
  | { readonly kind: 'free' }
  | { readonly kind: 'socket' }
  | { readonly kind: 'symlink'; readonly target: string }
  | { readonly kind: 'other'; readonly problem: string };

const notASocket = (path: string, what: string): string =>
  `socket path ${path} is ${what}, not a socket: remove it or choose another --socket`;

export function socketPathState(path: string): SocketPathState {
  try {
    const st = lstatSync(path);
    if (st.isSocket()) return { kind: 'socket' };
    if (st.isSymbolicLink()) return { kind: 'symlink', target: readlinkSync(path) };
    const what = st.isDirectory() ? 'a directory' : st.isFile() ? 'a regular file' : 'not a socket';
    return { kind: 'other', problem: notASocket(path, what) };
  } catch (thrown) {
    if (code(thrown) === 'ENOENT') return { kind: 'free' };
    return { kind: 'other', problem: `socket path ${path} cannot be checked (${code(thrown)})` };
  }
}

/** Removes a stale socket or a symlink; the directory is trusted by now, so only its owner put them there. */
export const removeStale = (path: string): void => unlinkSync(path);
