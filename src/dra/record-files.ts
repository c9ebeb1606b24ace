/**
 * The files under <state>/dra/claims, read as hostile input: the directory may have been replaced by a file or a
 * symlink, and any entry may be a FIFO, a directory, a symlink to a device or a file of any size. Each is read as the
 * journal reads its records (bounded-file.ts: regular files only, never a blocking open, never past a cap); what
 * cannot be used is named and held where it is, never fatal. Writes never follow a link planted at the temp path.
 */
import { constants, fsyncSync, lstatSync, mkdirSync, openSync, closeSync, readdirSync, renameSync } from 'node:fs';
import { unlinkSync, writeSync, type Stats } from 'node:fs';
import { join } from 'node:path';
import { readBoundedFileSync } from '../common/bounded-file';

/** An entry that is not loaded, and why (for the log: the path and what is wrong with it). */
export interface RecordProblem {
  readonly path: string;
  readonly reason: string;
}

/** A record's file, as text; far above what a claim of 32 devices needs. */
export const MAX_CLAIM_RECORD_BYTES = 1024 * 1024;

export interface RecordFile {
  readonly name: string;
  readonly path: string;
  readonly text: string;
}

const errnoOf = (e: unknown): string => (e as NodeJS.ErrnoException).code ?? 'EIO';

const KINDS: readonly [(s: Stats) => boolean, string][] = [
  [(s) => s.isFile(), 'a regular file'],
  [(s) => s.isSymbolicLink(), 'a symbolic link'],
  [(s) => s.isFIFO(), 'a FIFO'],
  [(s) => s.isSocket(), 'a socket'],
];
const kindOf = (st: Stats): string => KINDS.find(([is]) => is(st))?.[1] ?? 'a device';

/**
 * `path` as a directory of plexusd's own: made if missing; anything else in its place (a file, a symlink, even to a
 * directory) moved aside to `<path>.aside-<ms>`, kept for the operator. Undefined when it is usable; else why not.
 */
function ownDirectory(path: string, problems: RecordProblem[]): string | undefined {
  let st: Stats;
  try {
    st = lstatSync(path);
  } catch (e) {
    if (errnoOf(e) !== 'ENOENT') return `${path} cannot be looked at (${errnoOf(e)})`;
    return made(path);
  }
  if (st.isDirectory()) return undefined;
  const aside = `${path}.aside-${Date.now()}`;
  try {
    renameSync(path, aside);
  } catch (e) {
    return `${path} is ${kindOf(st)}, not a directory, and cannot be moved aside (${errnoOf(e)})`;
  }
  problems.push({
    path,
    reason: `is ${kindOf(st)}, not a directory: moved to ${aside}; no prepared claim is known from before`,
  });
  return made(path);
}

function made(path: string): string | undefined {
  try {
    mkdirSync(path, { mode: 0o700 });
    return undefined;
  } catch (e) {
    return `${path} cannot be made (${errnoOf(e)})`;
  }
}

/** The records' directory ready for use (its parent first); undefined when it is, else why it is not. */
export function claimsDirectory(stateDir: string, problems: RecordProblem[]): string | undefined {
  return ownDirectory(join(stateDir, 'dra'), problems) ?? ownDirectory(join(stateDir, 'dra', 'claims'), problems);
}

/**
 * A temp file is a write cut off by a crash (that Prepare was never answered): removed. Anything but a directory is
 * unlinked (which neither opens nor follows it); a directory is held.
 */
function removeTemp(path: string, problems: RecordProblem[]): void {
  try {
    if (lstatSync(path).isDirectory()) {
      problems.push({ path, reason: 'is a directory, not a regular file: held (plexusd writes only files here)' });
      return;
    }
    unlinkSync(path);
  } catch (e) {
    if (errnoOf(e) !== 'ENOENT') problems.push({ path, reason: `cannot be removed (${errnoOf(e)})` });
  }
}

/** The `*.json` files of `dir` as text; temp files removed; every other problem named in `problems`. */
export function readRecordFiles(dir: string, problems: RecordProblem[]): RecordFile[] {
  let names: string[];
  try {
    names = readdirSync(dir).sort();
  } catch (e) {
    problems.push({ path: dir, reason: `cannot be listed (${errnoOf(e)}): no prepared claim is known from before` });
    return [];
  }
  const files: RecordFile[] = [];
  for (const name of names) {
    const path = join(dir, name);
    if (name.endsWith('.tmp')) removeTemp(path, problems);
    if (!name.endsWith('.json')) continue;
    const read = readBoundedFileSync(path, { maxBytes: MAX_CLAIM_RECORD_BYTES });
    if (read.ok) files.push({ name, path, text: read.value.toString('utf8') });
    else if (read.error.kind !== 'missing') problems.push({ path, reason: read.error.reason });
  }
  return files;
}

/** Writes `text` to `dir`/`name` durably: a temp file made afresh (never through a link), fsync, rename, fsync. */
export function writeRecordFile(dir: string, name: string, text: string): void {
  const path = join(dir, name);
  const tmp = `${path}.tmp`;
  removeIfThere(tmp);
  const flags = constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW;
  const fd = openSync(tmp, flags, 0o600);
  try {
    writeSync(fd, text);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  renameSync(tmp, path);
  const dirFd = openSync(dir, 'r');
  try {
    fsyncSync(dirFd);
  } finally {
    closeSync(dirFd);
  }
}

function removeIfThere(path: string): void {
  try {
    unlinkSync(path);
  } catch (e) {
    if (errnoOf(e) !== 'ENOENT') throw e;
  }
}

/** A record's file gone (idempotent); a directory in its place is no record of ours (held, named at start). */
export function removeRecordFile(path: string): void {
  try {
    removeIfThere(path);
  } catch (e) {
    if (errnoOf(e) !== 'EISDIR') throw e;
  }
}
