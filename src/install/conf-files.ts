/**
 * Reading the CNI config files of a node for the installer: regular files only (a FIFO would hang it), at most
 * 1 MiB each (a config is a few hundred bytes), in libcni's order.
 */
import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { readBoundedFileSync } from '../common/bounded-file';
import { err, type Result } from '../common/result';

/** An install step that cannot go on, said so that the node's operator knows what to do. */
export interface InstallProblem {
  readonly message: string;
}
export const problem = (message: string): Result<never, InstallProblem> => err({ message });

const MAX_CONF_BYTES = 1 << 20;
/** The file extensions libcni (containerd, CRI-O) loads from a conf dir. */
export const CNI_CONF_EXTENSIONS: readonly string[] = ['.conf', '.conflist', '.json'];

export type ConfFile =
  | { readonly kind: 'file'; readonly text: string }
  | { readonly kind: 'absent' }
  | { readonly kind: 'problem'; readonly message: string };

/** A config file of a listing, read when asked. */
export interface ConfFileReader {
  readonly path: string;
  /** Its text; undefined when it is not a readable regular file of at most 1 MiB. */
  read(): string | undefined;
}

export function readConfFile(path: string): ConfFile {
  const read = readBoundedFileSync(path, { maxBytes: MAX_CONF_BYTES, followSymlinks: true });
  if (read.ok) return { kind: 'file', text: read.value.toString('utf8') };
  return read.error.kind === 'missing' ? { kind: 'absent' } : { kind: 'problem', message: read.error.reason };
}

/**
 * The CNI config files of a directory, sorted by name as libcni sorts them; undefined when `dir` is not a directory.
 * Only names are listed here: opening a FIFO's name would block, so each file is checked when read.
 */
export function listConfFiles(dir: string): readonly ConfFileReader[] | undefined {
  let names: string[];
  try {
    if (!statSync(dir).isDirectory()) return undefined;
    names = readdirSync(dir);
  } catch {
    return undefined;
  }
  return names
    .filter((n) => CNI_CONF_EXTENSIONS.some((ext) => n.endsWith(ext)))
    .sort()
    .map((n) => {
      const path = join(dir, n);
      return { path, read: () => (isRegularFile(path) ? textOf(readConfFile(path)) : undefined) };
    });
}

function isRegularFile(path: string): boolean {
  try {
    return statSync(path).isFile();
  } catch {
    return false;
  }
}

const textOf = (f: ConfFile): string | undefined => (f.kind === 'file' ? f.text : undefined);
