/**
 * The sandboxes Multus made that this node still holds, for plexusctl, the GC and the orphan sweep: one per Multus
 * cache, and one per container only libcni's records still hold (Multus's DEL failed part-way). Both directories are
 * indexed (directory-index.ts): a listing reads no file that an earlier one read, and the first is read in batches
 * that leave the event loop to the pods' calls.
 */
import type { Dirent } from 'node:fs';
import type { AdoptedSandbox } from '../engine/foreign-sandboxes';
import { DirectoryIndex } from './directory-index';
import {
  inDelOrder,
  type LibcniRecord,
  libcniRecordName,
  libcniResultsDir,
  readRecordSummary,
  type RecordSummary,
} from './libcni-records';
import { isContainerId, readMultusCache } from './multus-cache';
import { definedFields } from '../common/defined-fields';

/** What a listing needs of a Multus cache: its delegates' names, in attach order. */
interface CacheSummary {
  readonly networks: readonly { readonly name: string; readonly network: string; readonly ifname: string }[];
}

export class AdoptedListing {
  private readonly caches: DirectoryIndex<CacheSummary>;
  private readonly records: DirectoryIndex<RecordSummary>;
  /** Each cache's sandbox as last listed, with the record it was made with. */
  private readonly built = new WeakMap<CacheSummary, { record?: RecordSummary; sandbox: AdoptedSandbox }>();
  /** The last listing, with the index versions it was made from. */
  private last: { readonly versions: string; readonly sandboxes: AdoptedSandbox[] } | undefined;

  constructor(cacheDir: string) {
    this.caches = new DirectoryIndex({
      dir: cacheDir,
      accepts: (e: Dirent) => e.isFile() && isContainerId(e.name),
      // CNI_IFNAME is not known here: Multus's default, eth0.
      read: (containerId) => {
        const cache = readMultusCache(cacheDir, containerId, 'eth0');
        return cache.kind === 'delegates' ? { networks: cache.delegates } : undefined;
      },
    });
    this.records = new DirectoryIndex({
      dir: libcniResultsDir(cacheDir),
      accepts: (e: Dirent) => e.isFile(),
      read: (file) => readRecordSummary(cacheDir, file).summary,
    });
  }

  /** Reads what changed since the last look, a batch per turn of the event loop. */
  async refresh(): Promise<void> {
    await this.caches.refresh();
    await this.records.refresh();
  }

  /** Every sandbox, by container ID; reads synchronously only what `refresh` has not read yet. */
  list(): AdoptedSandbox[] {
    const caches = this.caches.current();
    const records = this.records.current();
    const versions = `${this.caches.version}/${this.records.version}`;
    if (this.last?.versions !== versions) this.last = { versions, sandboxes: this.listing(caches, records) };
    return [...this.last.sandboxes];
  }

  /** The sandboxes the two indexes hold, by container ID. */
  private listing(
    caches: ReadonlyMap<string, CacheSummary | undefined>,
    records: ReadonlyMap<string, RecordSummary | undefined>,
  ): AdoptedSandbox[] {
    const listed: AdoptedSandbox[] = [];
    for (const [containerId, cache] of caches) {
      const first = cache?.networks[0];
      if (!cache || !first) continue;
      const record = records.get(libcniRecordName(first.network, containerId, first.ifname));
      const built = this.built.get(cache);
      const sandbox =
        built && built.record === record ? built.sandbox : adopted(containerId, cache.networks, record ?? {});
      this.built.set(cache, { ...definedFields({ record }), sandbox });
      listed.push(sandbox);
    }
    const recordedOnly = new Map<string, RecordSummary[]>();
    for (const r of records.values())
      if (r && !caches.has(r.containerId))
        recordedOnly.set(r.containerId, [...(recordedOnly.get(r.containerId) ?? []), r]);
    for (const [containerId, held] of recordedOnly) {
      // In attach order, as far as the records tell it (CNI_IFNAME is not known here: Multus's default, eth0).
      const ordered = inDelOrder(held, 'eth0').reverse();
      const networks = ordered.map((r) => ({ name: r.network, ifname: r.ifname }));
      listed.push(adopted(containerId, networks, ordered[0] ?? {}));
    }
    return listed.sort((a, b) => (a.containerId < b.containerId ? -1 : a.containerId > b.containerId ? 1 : 0));
  }

  /**
   * The record files that may be the container's: those naming it, and those that name nothing readable (a DEL reads
   * them again and reports what it refuses).
   */
  recordFilesOf(containerId: string): string[] {
    const files: string[] = [];
    for (const [file, summary] of this.records.current())
      if (summary ? summary.containerId === containerId : file.includes(`-${containerId}-`)) files.push(file);
    return files;
  }
}

/** What plexusctl and the orphan sweep are told of a sandbox: its networks, and its pod and netns as libcni recorded. */
function adopted(
  containerId: string,
  networks: readonly { readonly name: string; readonly ifname: string }[],
  cached: Pick<LibcniRecord, 'cniArgs' | 'netns'>,
): AdoptedSandbox {
  const arg = (key: string): string | undefined => cached.cniArgs?.find(([k]) => k === key)?.[1];
  const [namespace, name, uid] = [arg('K8S_POD_NAMESPACE'), arg('K8S_POD_NAME'), arg('K8S_POD_UID')];
  return {
    containerId,
    maker: 'multus',
    networks: networks.map((d) => ({ name: d.name, ifname: d.ifname })),
    ...(namespace && name ? { pod: { namespace, name, ...definedFields({ uid: uid || undefined }) } } : {}),
    ...definedFields({ netns: cached.netns || undefined }),
  };
}
