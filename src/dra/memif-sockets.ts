/**
 * The socket of a memif device a claim holds: made at Prepare as the device plugin's Allocate makes it (the device's
 * directory afresh, a new secret), kept in the claim's record, removed when the claim is freed. The memif driver
 * serves it at the pod's ADD. A record's socket is a path read from disk: it is used (served, or removed with its
 * directory) only where Prepare makes it, `<socketDir>/<device>/memif.sock`, and never through a symlink.
 */
import { lstatSync, mkdirSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { memifSecret, MEMIF_SOCKET_FILE } from '../common/memif';

export interface ClaimedMemifSocket {
  readonly socket: string;
  readonly secret: string;
}

/** The device's socket directory made afresh under `dir`, with a new secret; throws what the filesystem says. */
export function makeMemifSocket(dir: string): ClaimedMemifSocket {
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true, mode: 0o755 });
  return { socket: join(dir, MEMIF_SOCKET_FILE), secret: memifSecret() };
}

/**
 * Why a recorded socket may not be used, given the device's directory `dir` under its resource's socketDir: it is
 * not where Prepare makes it (another device's, outside socketDir, a path with `..`), or the directory is a symlink.
 */
export function memifSocketProblem(socket: string, dir: string): string | undefined {
  const expected = join(dir, MEMIF_SOCKET_FILE);
  if (socket !== expected) return `socket ${socket} is not ${expected}, where Prepare makes this device's socket`;
  try {
    const st = lstatSync(dir);
    if (st.isSymbolicLink()) return `${dir} is a symbolic link: plexusd follows none out of the resource's socketDir`;
    if (!st.isDirectory()) return `${dir} is not a directory`;
  } catch {
    // Gone (or unreadable): nothing of it is there to remove, and the driver makes what it serves.
  }
  return undefined;
}

/** The directory of a socket made by makeMemifSocket, gone (idempotent); checked by memifSocketProblem first. */
export const removeMemifSocket = (socket: string): void => rmSync(dirname(socket), { recursive: true, force: true });
