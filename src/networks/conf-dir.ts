/**
 * CNI config files for NetworkAttachmentDefinitions that do not carry their config: the CNI config dir
 * (`/etc/cni/net.d` by default). Found by name (NPWG spec 3.4.1: an empty spec.config means the conflist, else
 * the conf, whose "name" is the NAD's name) or by id (DANM-style static configs: `<dir>/<id>.conf`).
 * Files are read on every lookup; NetworkDirectory uses stamp() to know when its cached NADs are stale.
 */
import { readdirSync, statSync } from 'node:fs';
import { readBoundedFileSync } from '../common/bounded-file';
import { dirname, join, resolve } from 'node:path';
import { type Result, err, ok } from '../cni/errors';
import { confDirErrors } from './errors';
import type { ConfigFile, NadConfigSource } from './nad';
import { errorMessage } from '../common/error-message';

export const DEFAULT_CNI_CONF_DIR = '/etc/cni/net.d';

const CONFLIST = /\.conflist$/;
const CONF = /\.(conf|json)$/;

const errno = (e: unknown): string | undefined => (e as NodeJS.ErrnoException).code;

const lookedAt = (files: readonly string[]): string =>
  `looked at: ${files.join(', ') || 'no *.conflist, *.conf or *.json files'}`;

/** A CNI config file: a regular file (or a symlink to one) of at most 1 MiB, as NAD files are. */
export const readConfigFile = (path: string): ReturnType<typeof readBoundedFileSync> =>
  readBoundedFileSync(path, { maxBytes: 1024 * 1024, followSymlinks: true });

export class CniConfDir implements NadConfigSource {
  constructor(readonly dir: string = DEFAULT_CNI_CONF_DIR) {}

  /** Regular files (or links to them) with a CNI config extension, in name order. */
  private files(): Result<string[]> {
    let names: string[];
    try {
      names = readdirSync(this.dir);
    } catch (e) {
      if (errno(e) === 'ENOENT' || errno(e) === 'ENOTDIR') return err(confDirErrors.missing(this.dir));
      return err(confDirErrors.unreadable(this.dir, errorMessage(e)));
    }
    return ok(
      names
        .filter((n) => CONFLIST.test(n) || CONF.test(n))
        .filter((n) => {
          try {
            return statSync(join(this.dir, n)).isFile();
          } catch {
            return false;
          }
        })
        .sort(),
    );
  }

  /**
   * The config whose top-level "name" is `name`: conflists first, then confs (`.conf`, `.json`), each in name
   * order, as the NPWG spec orders them. Files that cannot be read or parsed are skipped and listed if nothing
   * matches (a broken file's name cannot be known).
   */
  byName(name: string): Result<ConfigFile> {
    const files = this.files();
    if (!files.ok) return files;
    const ordered = [...files.value.filter((n) => CONFLIST.test(n)), ...files.value.filter((n) => !CONFLIST.test(n))];
    const skipped: string[] = [];
    for (const file of ordered) {
      const path = join(this.dir, file);
      let text: string;
      let parsed: unknown;
      const read = readConfigFile(path);
      if (!read.ok) {
        skipped.push(`${path} ${read.error.reason}`);
        continue;
      }
      try {
        text = read.value.toString('utf8');
        parsed = JSON.parse(text);
      } catch (e) {
        skipped.push(`${path}: ${errorMessage(e)}`);
        continue;
      }
      if (typeof parsed === 'object' && parsed !== null && (parsed as { name?: unknown }).name === name)
        return ok({ path, text });
    }
    return err(confDirErrors.noSuchName(this.dir, name, skipped, lookedAt(ordered)));
  }

  /** `<dir>/<id>.conf`. An id that could name a file elsewhere (with "/", "..", NUL) is refused, not cleaned. */
  byId(id: string): Result<ConfigFile> {
    const refuse = (why: string): Result<never> => err(confDirErrors.badId(id, why));
    if (id === '') return refuse('is empty');
    if (id.includes('/')) return refuse('may not contain "/"');
    if (id.includes('..')) return refuse('may not contain ".."');
    if (id.includes('\0')) return refuse('may not contain NUL');
    const path = resolve(this.dir, `${id}.conf`);
    if (dirname(path) !== resolve(this.dir)) return refuse(`resolves outside ${this.dir}`);
    const read = readConfigFile(path);
    if (read.ok) return ok({ path, text: read.value.toString('utf8') });
    return err(confDirErrors.unreadableFile(path, read.error.reason, read.error.kind === 'io'));
  }

  /** Changes whenever a config file is added, removed or rewritten (names, mtimes and sizes). */
  stamp(): string {
    let names: string[];
    try {
      names = readdirSync(this.dir)
        .filter((n) => CONFLIST.test(n) || CONF.test(n))
        .sort();
    } catch (e) {
      return `unreadable:${errno(e) ?? ''}`;
    }
    return names
      .map((n) => {
        try {
          const st = statSync(join(this.dir, n));
          return `${n}:${st.mtimeMs}:${st.size}`;
        } catch {
          return `${n}:gone`;
        }
      })
      .join('|');
  }
}
