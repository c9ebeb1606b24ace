/**
 * The file operations of the lease store: synced (async, with fsync) or inline (microsecond syscalls run on the spot),
 * and the one-syscall claim of an address without fsync.
 */
import { constants as fsConstants, promises as fs, rmSync, writeFileSync } from 'node:fs';
import { type FileReadProblem, readBoundedFile, readBoundedFileSync } from '../common/bounded-file';
import type { Result } from '../common/result';
import { leaseFileContent } from './lease-file';
import type { Lease } from './lease';

/** A lease is four short lines and an owner; anything far bigger is not one. Symlinks are never followed. */
export const LEASE_READ = { maxBytes: 64 * 1024 } as const;

export const isErrno = (thrown: unknown, code: string): boolean =>
  (thrown as NodeJS.ErrnoException | null)?.code === code;

export async function fsyncDir(path: string): Promise<void> {
  const handle = await fs.open(path, fsConstants.O_RDONLY | fsConstants.O_DIRECTORY);
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

/**
 * Without fsync the lease is created in place with O_EXCL: one syscall, and still never two owners. A crash
 * in the middle of the write leaves a short file, which reads as an unknown owner and is released by recovery.
 */
export function claimInline(file: string, lease: Lease): boolean {
  try {
    writeFileSync(file, leaseFileContent(lease), { flag: 'wx', mode: 0o600 });
    return true;
  } catch (thrown) {
    if (isErrno(thrown, 'EEXIST')) return false;
    throw thrown;
  }
}

/**
 * The file operations of the store, in two flavours. Synced: async calls with fsync, for stores that must
 * survive a power loss. Inline: without fsync every call is a microsecond syscall, so it runs on the spot
 * instead of paying a thread-pool round trip for each of them on the ADD path.
 */
export interface LeaseFileIo {
  readText(path: string): Promise<string | undefined>; // undefined when the file does not exist
  remove(path: string): Promise<void>;
  syncDir(path: string): Promise<void>;
}

/** Creates a file that must not exist yet, with its content on disk before it returns. */
export async function writeNewSynced(path: string, content: string): Promise<void> {
  const handle = await fs.open(path, 'wx', 0o600);
  try {
    await handle.writeFile(content);
    await handle.sync();
  } finally {
    await handle.close();
  }
}

/** The text of a lease file, undefined when it is gone; anything else that is not a small regular file throws. */
function leaseText(read: Result<Buffer, FileReadProblem>): string | undefined {
  if (read.ok) return read.value.toString('utf8');
  if (read.error.kind === 'missing') return undefined;
  throw new Error(`${read.error.path} ${read.error.reason}`);
}

export const syncedIo: LeaseFileIo = {
  readText: async (path) => leaseText(await readBoundedFile(path, LEASE_READ)),
  remove: (path) => fs.rm(path, { force: true }),
  syncDir: fsyncDir,
};

/** The outcome of `run` as a promise: what it throws is a rejection, as from the synced flavour. */
const settle = <T>(run: () => T): Promise<T> => new Promise((resolve) => resolve(run()));

export const inlineIo: LeaseFileIo = {
  readText: (path) => settle(() => leaseText(readBoundedFileSync(path, LEASE_READ))),
  remove: (path) => settle(() => rmSync(path, { force: true })),
  syncDir: () => Promise.resolve(),
};
