/**
 * What a runtime hears when the journal cannot be written or read: CNI code 5 (I/O failure), the file, and what an
 * operator does about it, instead of a bare errno. Nothing was changed for a call that fails this way before its
 * first step, and what was changed is undone from the record (or by recovery once the journal can be written again).
 */
import { CniCode, CniError } from '../../cni/errors';

const remedies: Readonly<Record<string, string>> = {
  ENOSPC: 'the filesystem is full: free space on it',
  EDQUOT: 'the disk quota is exhausted: raise it or free space',
  EROFS: 'the filesystem is read-only: remount it read-write',
  EACCES: 'permission denied: plexusd must own its state directory (it runs as root)',
  EPERM: "not permitted: check the state directory's attributes (chattr) and mount options",
  EIO: 'the disk reported an I/O error: check the kernel log',
  ENOENT: 'the journal directory was removed: plexusd makes it again on the next call; a retry should succeed',
  EMFILE: 'plexusd has too many open files: raise its limit (LimitNOFILE)',
  ENFILE: 'the node has too many open files',
};

const NOTHING_HALF_DONE = 'nothing was left half done that the journal does not hold, and the call can be retried';

const codeOf = (e: unknown): string => (e as NodeJS.ErrnoException | undefined)?.code ?? 'EIO';

/** The errno name of something thrown by node:fs, if it is one. */
export const errnoOf = (e: unknown): string | undefined => (e as NodeJS.ErrnoException | undefined)?.code;

/** "cannot <action> <path>: <errno>", with the remedy for that errno, as code 5. */
export function journalIoError(action: string, path: string, e: unknown): CniError {
  if (e instanceof CniError) return e;
  const code = codeOf(e);
  const remedy = remedies[code] ?? `${(e as Error | undefined)?.message ?? String(e)}`;
  const message = `plexusd cannot ${action} its journal record ${path}: ${code}`;
  return new CniError(CniCode.IoFailure, message, `${remedy}; ${NOTHING_HALF_DONE}`);
}
