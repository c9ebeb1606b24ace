/**
 * The socket of a memif device a claim holds: made at Prepare as the device plugin's Allocate makes it (the device's
 * directory afresh, a new secret), kept in the claim's record, removed when the claim is freed. The memif driver
 * serves it at the pod's ADD.
 */
import { mkdirSync, rmSync } from 'node:fs';
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

/** The directory of a socket made by makeMemifSocket, gone (idempotent). */
export const removeMemifSocket = (socket: string): void => rmSync(dirname(socket), { recursive: true, force: true });
