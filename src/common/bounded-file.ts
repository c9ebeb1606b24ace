/**
 * Reading a file that someone else may have put there: only a regular file, never more than a cap, and never a call
 * that can block (a FIFO) or grow without end (/dev/zero). Every file plexusd reads from a directory it does not
 * fully control goes through here; a problem comes back as a value for the caller to report as a broken definition.
 */
import { closeSync, constants, fstatSync, openSync, readSync, statSync, type Stats } from 'node:fs';
import { open as openAsync } from 'node:fs/promises';
import { err, ok, type Result } from './result';

export interface BoundedReadOptions {
  /** Largest size accepted, in bytes; the file is read up to one byte more, never further. */
  readonly maxBytes: number;
  /** Whether a symlink is followed (its target must still be a regular file); otherwise a symlink is refused. */
  readonly followSymlinks?: boolean;
}

/** Why a file could not be used: `missing` lets callers treat a file removed meanwhile as absent. */
export interface FileReadProblem {
  readonly path: string;
  readonly kind: 'missing' | 'not-regular' | 'too-large' | 'io';
  /** Says what is wrong, for a human: "is a FIFO, not a regular file". */
  readonly reason: string;
}

const KIND_NAMES: readonly [(s: Stats) => boolean, string][] = [
  [(s) => s.isDirectory(), 'a directory'],
  [(s) => s.isFIFO(), 'a FIFO'],
  [(s) => s.isCharacterDevice(), 'a character device'],
  [(s) => s.isBlockDevice(), 'a block device'],
  [(s) => s.isSocket(), 'a socket'],
  [(s) => s.isSymbolicLink(), 'a symbolic link'],
];

const kindOf = (st: Stats): string => KIND_NAMES.find(([is]) => is(st))?.[1] ?? 'not a regular file';

/** Opened non-blocking (a FIFO must not wait for a writer) and without becoming a controlling terminal. */
const openFlags = (followSymlinks: boolean): number =>
  constants.O_RDONLY | constants.O_NONBLOCK | constants.O_NOCTTY | (followSymlinks ? 0 : constants.O_NOFOLLOW);

const problem = (path: string, kind: FileReadProblem['kind'], reason: string): Result<never, FileReadProblem> =>
  err({ path, kind, reason });

export const formatBytes = (n: number): string => {
  if (n >= 1048576 && n % 1048576 === 0) return `${n / 1048576} MiB`;
  return n >= 1024 && n % 1024 === 0 ? `${n / 1024} KiB` : `${n} bytes`;
};

export const tooLargeReason = (maxBytes: number): string => `is larger than ${formatBytes(maxBytes)}`;

function fromThrown(path: string, thrown: unknown): Result<never, FileReadProblem> {
  const code = (thrown as NodeJS.ErrnoException | null)?.code ?? 'EIO';
  if (code === 'ENOENT') return problem(path, 'missing', 'does not exist');
  // O_NOFOLLOW on a symlink fails with ELOOP.
  if (code === 'ELOOP') return problem(path, 'not-regular', 'is a symbolic link, not a regular file');
  return problem(path, 'io', `cannot be read (${code})`);
}

/** What is wrong with the file's type or size, before a byte is read. */
function shapeProblem(path: string, st: Stats, maxBytes: number): Result<never, FileReadProblem> | undefined {
  if (!st.isFile()) return problem(path, 'not-regular', `is ${kindOf(st)}, not a regular file`);
  if (st.size > maxBytes) return problem(path, 'too-large', tooLargeReason(maxBytes));
  return undefined;
}

/**
 * Where a symlink is followed, its target is looked at before it is opened: opening some devices has effects
 * of its own (a watchdog, a tape). The fd is checked again, so a target swapped in between is still refused.
 */
function precheck(path: string, options: BoundedReadOptions): Result<never, FileReadProblem> | undefined {
  if (!options.followSymlinks) return undefined;
  try {
    return shapeProblem(path, statSync(path), options.maxBytes);
  } catch (thrown) {
    return fromThrown(path, thrown);
  }
}

/**
 * A buffer sized by fstat that grows, for a file that grows while read, up to one byte over the cap: that byte
 * tells a file over the cap from one that fits, without reading further.
 */
class CappedReader {
  buf: Buffer;
  len = 0;

  constructor(
    size: number,
    private readonly maxBytes: number,
  ) {
    this.buf = Buffer.allocUnsafe(Math.min(maxBytes, Math.max(size, 4095)) + 1);
  }

  room(): number {
    if (this.len === this.buf.length && this.len <= this.maxBytes) {
      const bigger = Buffer.allocUnsafe(Math.min(this.maxBytes + 1, this.buf.length * 2));
      this.buf.copy(bigger, 0, 0, this.len);
      this.buf = bigger;
    }
    return this.buf.length - this.len;
  }

  /** Counts what a read returned; false at the end of the file. */
  took(n: number): boolean {
    this.len += n;
    return n > 0;
  }

  result(path: string): Result<Buffer, FileReadProblem> {
    if (this.len > this.maxBytes) return problem(path, 'too-large', tooLargeReason(this.maxBytes));
    return ok(this.len === this.buf.length ? this.buf : Buffer.from(this.buf.subarray(0, this.len)));
  }
}

/** The whole file, as bytes, if it is a regular file of at most `maxBytes`. */
export function readBoundedFileSync(path: string, options: BoundedReadOptions): Result<Buffer, FileReadProblem> {
  const early = precheck(path, options);
  if (early) return early;
  let fd: number;
  try {
    fd = openSync(path, openFlags(options.followSymlinks ?? false));
  } catch (thrown) {
    return fromThrown(path, thrown);
  }
  try {
    const st = fstatSync(fd);
    const bad = shapeProblem(path, st, options.maxBytes);
    if (bad) return bad;
    const reader = new CappedReader(st.size, options.maxBytes);
    while (reader.room() > 0 && reader.took(readSync(fd, reader.buf, reader.len, reader.room(), null)));
    return reader.result(path);
  } catch (thrown) {
    return fromThrown(path, thrown);
  } finally {
    closeSync(fd);
  }
}

/** The same as readBoundedFileSync, on the thread pool. */
export async function readBoundedFile(
  path: string,
  options: BoundedReadOptions,
): Promise<Result<Buffer, FileReadProblem>> {
  const early = precheck(path, options);
  if (early) return early;
  let handle;
  try {
    handle = await openAsync(path, openFlags(options.followSymlinks ?? false));
  } catch (thrown) {
    return fromThrown(path, thrown);
  }
  try {
    const st = await handle.stat();
    const bad = shapeProblem(path, st, options.maxBytes);
    if (bad) return bad;
    const reader = new CappedReader(st.size, options.maxBytes);
    while (
      reader.room() > 0 &&
      reader.took((await handle.read(reader.buf, reader.len, reader.room(), null)).bytesRead)
    );
    return reader.result(path);
  } catch (thrown) {
    return fromThrown(path, thrown);
  } finally {
    await handle.close();
  }
}

/** "a, b, c and 7 more": a list of problems that stays readable however many files are broken. */
export function cappedList(items: readonly string[], shown = 10, separator = '; '): string {
  if (items.length <= shown) return items.join(separator);
  return `${items.slice(0, shown).join(separator)}${separator}and ${items.length - shown} more`;
}
