/**
 * The embedded lease store: one file per reserved address, as host-local keeps them,
 * `<dir>/<network>/<ip>` holding `<containerId>\n<ifname>\n<address/prefix>\n<gateway>`.
 *
 * The files are the truth; an in-memory index loaded at open() makes lookups free.
 * A lease file is written to a temporary name, fsync'd, then hard-linked to its final name:
 * link() fails with EEXIST if the address is taken (so two writers, even in two processes,
 * never get the same address) and a crash can never leave a half-written lease under an
 * address's name. With `sync` (the default), the file and the directory are fsync'd after every
 * change; without it, a lease survives any crash of the daemon (the page cache outlives the process)
 * but not a power loss, which on a node also ends every pod that could hold the address.
 */
import { closeSync, constants as fsConstants, openSync, promises as fs, writeSync } from 'node:fs';
import { join } from 'node:path';
import { readBoundedFile } from '../common/bounded-file';
import { type Ip, formatIp, parseIp } from '../common/ip';
import { type Lease, type StoredLease, isSafeNetworkName } from './lease';
import { leaseFileContent, parseLeaseFile } from './lease-file';
import {
  LEASE_READ,
  type LeaseFileIo,
  claimInline,
  fsyncDir,
  inlineIo,
  isErrno,
  syncedIo,
  writeNewSynced,
} from './lease-file-io';
import { NetworkLeases, ipKey, ownerKey } from './lease-index';

const HINT_PREFIX = 'last_reserved_ip.';
/** Longer than any address's text (39 for IPv6), so each write covers the last one; readers trim. */
const HINT_WIDTH = 48;
const TEMP_PREFIX = '.lease-';
const HINT_READ = { maxBytes: 256 } as const;

function processIsAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (thrown) {
    return !isErrno(thrown, 'ESRCH');
  }
}

async function inChunks<T>(items: readonly T[], size: number, task: (item: T) => Promise<void>): Promise<void> {
  for (let i = 0; i < items.length; i += size) await Promise.all(items.slice(i, i + size).map(task));
}

export interface LeaseStoreOptions {
  /** fsync each change (default true). */
  readonly sync?: boolean;
  /** Told of each entry that is not a lease file it can read (a directory, a FIFO, a symlink, an oversized file). */
  readonly onSkipped?: (file: string, reason: string) => void;
}

export class LeaseStore {
  private readonly networks = new Map<string, NetworkLeases>();

  private readonly io: LeaseFileIo;
  /** Temporary files this store has made: each gets a name of its own. */
  private temps = 0;

  private constructor(
    readonly dir: string,
    private readonly sync: boolean,
    private readonly onSkipped: (file: string, reason: string) => void,
  ) {
    this.io = sync ? syncedIo : inlineIo;
  }

  /** Opens (creating it with mode 0700 if missing) the store directory and loads every lease. */
  static async open(dir: string, options: LeaseStoreOptions = {}): Promise<LeaseStore> {
    await fs.mkdir(dir, { recursive: true, mode: 0o700 });
    const store = new LeaseStore(dir, options.sync ?? true, options.onSkipped ?? (() => undefined));
    for (const entry of await fs.readdir(dir, { withFileTypes: true })) {
      if (entry.isDirectory() && isSafeNetworkName(entry.name)) await store.load(entry.name);
    }
    return store;
  }

  private async load(network: string): Promise<void> {
    const leases = this.of(network);
    leases.dirReady = true;
    const path = join(this.dir, network);
    const names = await fs.readdir(path);
    await inChunks(names, 64, async (name) => {
      if (name.startsWith(TEMP_PREFIX)) {
        // A temporary file left by a writer that died before linking or unlinking it.
        const pid = Number(name.slice(TEMP_PREFIX.length).split('-')[0]);
        if (!Number.isInteger(pid) || !processIsAlive(pid)) await fs.rm(join(path, name), { force: true });
        return;
      }
      if (name.startsWith(HINT_PREFIX)) {
        const set = Number(name.slice(HINT_PREFIX.length));
        const hint = parseIp(((await this.readListed(join(path, name), HINT_READ)) ?? '').trim());
        if (Number.isInteger(set) && hint !== undefined) leases.hints.set(set, hint);
        return;
      }
      const ip = parseIp(name);
      if (ip === undefined || formatIp(ip.family, ip.value) !== name) return; // not a lease file (e.g. host-local's lock)
      // Undefined also when released concurrently by another process.
      const content = await this.readListed(join(path, name), LEASE_READ);
      if (content !== undefined) leases.add({ ip, lease: parseLeaseFile(network, ip, content) });
    });
  }

  /**
   * A file found in the store, if it is a small regular file. Anything else is skipped with a warning: its address
   * stays out of the index, and reserve() treats it as taken when it meets the name (link() fails with EEXIST).
   */
  private async readListed(file: string, limits: { readonly maxBytes: number }): Promise<string | undefined> {
    const read = await readBoundedFile(file, limits);
    if (read.ok) return read.value.toString('utf8');
    if (read.error.kind !== 'missing') this.onSkipped(file, read.error.reason);
    return undefined;
  }

  private of(network: string): NetworkLeases {
    let leases = this.networks.get(network);
    if (leases === undefined) {
      leases = new NetworkLeases();
      this.networks.set(network, leases);
    }
    return leases;
  }

  networkNames(): readonly string[] {
    return [...this.networks.keys()];
  }

  holder(network: string, ip: Ip): StoredLease | undefined {
    return this.networks.get(network)?.byIp.get(ipKey(ip));
  }

  owned(network: string, containerId: string, ifname: string): readonly StoredLease[] {
    const leases = this.networks.get(network);
    const keys = leases?.byOwner.get(ownerKey(containerId, ifname));
    if (leases === undefined || keys === undefined) return [];
    return [...keys].flatMap((key) => leases.byIp.get(key) ?? []);
  }

  all(network?: string): readonly StoredLease[] {
    const names = network === undefined ? this.networkNames() : [network];
    return names.flatMap((name) => [...(this.networks.get(name)?.byIp.values() ?? [])]);
  }

  hint(network: string, set: number): Ip | undefined {
    return this.networks.get(network)?.hints.get(set);
  }

  /**
   * Remembers the last address reserved in a range set, for round-robin allocation. A hint only: not fsync'd.
   * It is overwritten in place, padded to a fixed width, never truncated: on ext4 an O_TRUNC of a file with
   * data forces its writeback (auto_da_alloc), which cost 0.7 ms on every ADD.
   */
  setHint(network: string, set: number, ip: Ip): void {
    this.of(network).hints.set(set, ip);
    const fd = openSync(
      join(this.dir, network, `${HINT_PREFIX}${set}`),
      fsConstants.O_WRONLY | fsConstants.O_CREAT,
      0o600,
    );
    try {
      writeSync(fd, formatIp(ip.family, ip.value).padEnd(HINT_WIDTH), 0);
    } finally {
      closeSync(fd);
    }
  }

  /**
   * Durably reserves `ip` for `lease`. Returns undefined when reserved, or the lease that
   * already holds the address (learned from disk if another process took it). Throws on I/O failure.
   */
  async reserve(ip: Ip, lease: Lease): Promise<StoredLease | undefined> {
    const leases = this.of(lease.network);
    const path = join(this.dir, lease.network);
    if (!leases.dirReady) {
      await fs.mkdir(path, { mode: 0o700 }).catch((thrown: unknown) => {
        if (!isErrno(thrown, 'EEXIST')) throw thrown;
      });
      if (this.sync) await fsyncDir(this.dir);
      leases.dirReady = true;
    }
    const name = formatIp(ip.family, ip.value);
    const claimed = this.sync ? await this.claimSynced(path, name, lease) : claimInline(join(path, name), lease);
    if (!claimed) {
      const existing = {
        ip,
        lease: parseLeaseFile(lease.network, ip, (await this.io.readText(join(path, name)).catch(() => '')) ?? ''),
      };
      leases.add(existing);
      return existing;
    }
    leases.add({ ip, lease });
    return undefined;
  }

  /**
   * Writes the lease under a temporary name, fsyncs it, then links it to the address's name, so a power loss
   * never leaves a half-written lease there. False when the address was taken meanwhile.
   */
  private async claimSynced(path: string, name: string, lease: Lease): Promise<boolean> {
    const temp = join(path, `${TEMP_PREFIX}${process.pid}-${this.temps++}`);
    try {
      await writeNewSynced(temp, leaseFileContent(lease));
      try {
        await fs.link(temp, join(path, name));
      } catch (thrown) {
        if (!isErrno(thrown, 'EEXIST')) throw thrown;
        return false;
      }
    } finally {
      // The temporary name goes in every case: after the link, or after a failure or a lost race.
      await this.io.remove(temp).catch(() => undefined);
    }
    await this.io.syncDir(path);
    return true;
  }

  /**
   * Removes leases, continuing past individual failures. A file that now names another owner
   * (re-leased by another process) is kept and the index corrected.
   */
  async remove(
    network: string,
    stored: readonly StoredLease[],
  ): Promise<{ readonly removed: readonly Lease[]; readonly failures: readonly Error[] }> {
    const leases = this.networks.get(network);
    if (leases === undefined || stored.length === 0) return { removed: [], failures: [] };
    const path = join(this.dir, network);
    const removed: Lease[] = [];
    const failures: Error[] = [];
    for (const { ip, lease } of stored) {
      const file = join(path, formatIp(ip.family, ip.value));
      try {
        const content = await this.io.readText(file);
        if (content !== undefined) {
          const onDisk = parseLeaseFile(network, ip, content);
          if (onDisk.containerId !== lease.containerId || onDisk.ifname !== lease.ifname) {
            leases.add({ ip, lease: onDisk });
            continue;
          }
          await this.io.remove(file);
        }
        leases.delete(ipKey(ip));
        removed.push(lease);
      } catch (thrown) {
        failures.push(thrown instanceof Error ? thrown : new Error(String(thrown)));
      }
    }
    if (removed.length > 0) {
      try {
        await this.io.syncDir(path);
      } catch (thrown) {
        failures.push(thrown instanceof Error ? thrown : new Error(String(thrown)));
      }
    }
    return { removed, failures };
  }
}
