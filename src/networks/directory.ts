/**
 * The embedded network source: NetworkAttachmentDefinitions kept as YAML or JSON files in a directory
 * (several documents per file allowed). Files are re-read only when they change, or, for files whose NADs take
 * their config from the CNI config dir (empty spec.config, config ids), when that directory changes.
 */
import type { NetworkSource } from './source';
import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { parseAllDocuments } from 'yaml';
import { type CniError, type Result, err, ok } from '../cni/errors';
import { directoryErrors } from './errors';
import { cappedList, readBoundedFileSync } from '../common/bounded-file';
import { CniConfDir, DEFAULT_CNI_CONF_DIR } from './conf-dir';
import { type NadConfigSource, type NetworkDefinition, parseNad } from './nad';
import { errorMessage } from '../common/error-message';

interface CachedFile {
  readonly stamp: string;
  /** The CNI config dir's stamp when the file was parsed, if any of its NADs looked there. */
  readonly confDirStamp?: string;
  readonly networks: readonly NetworkDefinition[];
  readonly errors: readonly CniError[];
}

export interface NetworkDirectoryOptions {
  /** Where NADs with an empty spec.config or a config id find their CNI config (default /etc/cni/net.d). */
  readonly cniConfDir?: string;
  /** The largest NAD file read (default 1 MiB): a bigger one is reported broken, not read. */
  readonly maxFileBytes?: number;
}

export const MAX_NAD_FILE_BYTES = 1024 * 1024;
/** How many broken definitions an error message names before "and N more". */
const BROKEN_SHOWN = 10;

export class NetworkDirectory implements NetworkSource {
  private readonly cache = new Map<string, CachedFile>();
  readonly cniConfDir: string;
  private readonly confDir: CniConfDir;
  private readonly maxFileBytes: number;

  constructor(
    readonly dir: string,
    options: NetworkDirectoryOptions = {},
  ) {
    this.cniConfDir = options.cniConfDir ?? DEFAULT_CNI_CONF_DIR;
    this.confDir = new CniConfDir(this.cniConfDir);
    this.maxFileBytes = options.maxFileBytes ?? MAX_NAD_FILE_BYTES;
  }

  private load(): { networks: Map<string, NetworkDefinition>; errors: CniError[] } {
    const networks = new Map<string, NetworkDefinition>();
    const errors: CniError[] = [];
    let names: string[] = [];
    try {
      names = readdirSync(this.dir)
        .filter((n) => /\.(ya?ml|json)$/.test(n))
        .sort();
    } catch (e) {
      errors.push(directoryErrors.unreadableDir(this.dir, errorMessage(e)));
    }
    let confStamp: string | undefined;
    const confDirStamp = (): string => (confStamp ??= this.confDir.stamp());
    for (const name of names) {
      const path = join(this.dir, name);
      let entry: CachedFile;
      try {
        const st = statSync(path);
        const stamp = `${st.mtimeMs}:${st.size}`;
        const cached = this.cache.get(path);
        if (
          cached &&
          cached.stamp === stamp &&
          (cached.confDirStamp === undefined || cached.confDirStamp === confDirStamp())
        ) {
          entry = cached;
        } else {
          // Stamp the conf dir before reading it, so a change made while parsing is seen on the next load.
          const before = confDirStamp();
          let used = false;
          const tracked: NadConfigSource = {
            dir: this.confDir.dir,
            byName: (n) => ((used = true), this.confDir.byName(n)),
            byId: (id) => ((used = true), this.confDir.byId(id)),
          };
          const parsed = parseFile(path, tracked, this.maxFileBytes);
          entry = { stamp, ...(used ? { confDirStamp: before } : {}), ...parsed };
        }
      } catch (e) {
        entry = { stamp: '', networks: [], errors: [directoryErrors.unreadableFile(path, errorMessage(e))] };
      }
      this.cache.set(path, entry);
      errors.push(...entry.errors);
      for (const n of entry.networks) networks.set(n.key, n);
    }
    return { networks, errors };
  }

  /** Looks up a network by namespace and name. */
  get(namespace: string, name: string): Result<NetworkDefinition> {
    const { networks, errors } = this.load();
    const found = networks.get(`${namespace}/${name}`);
    if (found) return ok(found);
    const listed = cappedList(
      errors.map((e) => e.message),
      BROKEN_SHOWN,
    );
    const broken = errors.length ? ` (problems reading definitions: ${listed})` : '';
    return err(directoryErrors.undefinedNetwork(namespace, name, this.dir, broken));
  }

  list(): { networks: NetworkDefinition[]; errors: CniError[] } {
    const { networks, errors } = this.load();
    return { networks: [...networks.values()], errors };
  }
}

interface ParsedFile {
  readonly networks: NetworkDefinition[];
  readonly errors: CniError[];
}

function parseFile(path: string, configs: NadConfigSource, maxBytes: number): ParsedFile {
  const networks: NetworkDefinition[] = [];
  const errors: CniError[] = [];
  // A ConfigMap mount makes every file a symlink: followed, but only to a regular file.
  const bytes = readBoundedFileSync(path, { maxBytes, followSymlinks: true });
  if (!bytes.ok) return { networks, errors: [directoryErrors.refusedFile(path, bytes.error.reason, maxBytes)] };
  const docs = parseAllDocuments(bytes.value.toString('utf8'));
  for (const [i, doc] of (Array.isArray(docs) ? docs : [docs]).entries()) {
    const where = `${path}${i > 0 ? ` (document ${i + 1})` : ''}`;
    if (doc.errors.length) {
      errors.push(directoryErrors.notYaml(where, doc.errors[0]?.message ?? ''));
      continue;
    }
    const obj = doc.toJS() as unknown;
    if (obj === null || obj === undefined) continue;
    const isList = (obj as { kind?: unknown }).kind === 'List';
    const listItems = (obj as { items?: unknown }).items;
    if (isList && listItems !== undefined && !Array.isArray(listItems)) {
      errors.push(directoryErrors.itemsNotList(where));
      continue;
    }
    const items = isList ? ((listItems as unknown[] | undefined) ?? []) : [obj];
    for (const item of items) {
      const r = parseNad(item, where, configs);
      if (r.ok) networks.push(r.value);
      else errors.push(r.error);
    }
  }
  return { networks, errors };
}
