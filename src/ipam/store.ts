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
import { closeSync, constants as fsConstants, openSync, promises as fs, rmSync, writeFileSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { type FileReadProblem, readBoundedFile, readBoundedFileSync } from '../common/bounded-file';
import type { Result } from '../common/result';
import { type Ip, bitsOf, formatCidr, formatIp, parseCidr, parseIp } from '../common/ip';

export interface Lease {
  readonly network: string;
  /** The leased address with the prefix of its subnet, e.g. 10.1.0.7/24. */
  readonly address: string;
  readonly gateway?: string;
  /** Empty for a lease file with no valid owner (empty or corrupt): it blocks its address until released. */
  readonly containerId: string;
  readonly ifname: string;
  /** Who holds it beyond the container (recorded by cluster IPAM; absent in host-local's files). */
  readonly owner?: LeaseOwner;
}

/** The pod behind a lease, and the network it was allocated for when the lease lives in a shared pool. */
export interface LeaseOwner {
  readonly network?: string;
  readonly podUid?: string;
  /** namespace/name */
  readonly pod?: string;
  /** namespace/name of the IPAMClaim that owns the address (it outlives this lease: cluster/claims.ts). */
  readonly claim?: string;
}

export interface StoredLease {
  readonly lease: Lease;
  readonly ip: Ip;
}

const NETWORK_NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,252}$/;

/** Network names become directory names. */
export const isSafeNetworkName = (name: string): boolean => NETWORK_NAME.test(name) && name !== '.' && name !== '..';

const HINT_PREFIX = 'last_reserved_ip.';
/** Longer than any address's text (39 for IPv6), so each write covers the last one; readers trim. */
const HINT_WIDTH = 48;
const TEMP_PREFIX = '.lease-';
/** A lease is four short lines and an owner; anything far bigger is not one. Symlinks are never followed. */
const LEASE_READ = { maxBytes: 64 * 1024 } as const;
const HINT_READ = { maxBytes: 256 } as const;

const ipKey = (ip: Ip): bigint => (ip.family === 4 ? ip.value : ip.value | (1n << 128n));
const ownerKey = (containerId: string, ifname: string): string => `${containerId}\n${ifname}`;
const isErrno = (thrown: unknown, code: string): boolean => (thrown as NodeJS.ErrnoException | null)?.code === code;

class NetworkLeases {
  readonly byIp = new Map<bigint, StoredLease>();
  readonly byOwner = new Map<string, Set<bigint>>();
  readonly hints = new Map<number, Ip>();
  dirReady = false;

  add(stored: StoredLease): void {
    const key = ipKey(stored.ip);
    this.delete(key);
    this.byIp.set(key, stored);
    const owner = ownerKey(stored.lease.containerId, stored.lease.ifname);
    const keys = this.byOwner.get(owner) ?? new Set<bigint>();
    keys.add(key);
    this.byOwner.set(owner, keys);
  }

  delete(key: bigint): void {
    const stored = this.byIp.get(key);
    if (stored === undefined) return;
    this.byIp.delete(key);
    const owner = ownerKey(stored.lease.containerId, stored.lease.ifname);
    const keys = this.byOwner.get(owner);
    keys?.delete(key);
    if (keys?.size === 0) this.byOwner.delete(owner);
  }
}

function leaseFileContent(lease: Lease): string {
  const base = `${lease.containerId}\n${lease.ifname}\n${lease.address}\n${lease.gateway ?? ''}\n`;
  return lease.owner !== undefined ? `${base}${JSON.stringify(lease.owner)}\n` : base;
}

/** Reads a lease file; the first two lines are host-local's format, the last two are Plexus's additions. */
function parseLeaseFile(network: string, ip: Ip, content: string): Lease {
  const [containerId = '', ifname = '', addressText = '', gatewayText = '', ownerText = ''] = content.split(/\r?\n/).map((line) => line.trim());
  const recorded = parseCidr(addressText);
  const address =
    recorded !== undefined && recorded.family === ip.family && recorded.value === ip.value
      ? formatCidr(ip.family, ip.value, recorded.prefix)
      : formatCidr(ip.family, ip.value, bitsOf(ip.family));
  const gateway = parseIp(gatewayText);
  const owned = containerId !== '' && ifname !== '';
  return {
    network,
    address,
    ...(gateway !== undefined && gateway.family === ip.family ? { gateway: formatIp(gateway.family, gateway.value) } : {}),
    containerId: owned ? containerId : '',
    ifname: owned ? ifname : '',
    ...(owned && ownerText !== '' ? ownerOf(ownerText) : {}),
  };
}

/** The optional fifth line: a JSON LeaseOwner; anything else (a torn write) is ignored, the lease stays owned. */
function ownerOf(text: string): { owner?: LeaseOwner } {
  try {
    const parsed = JSON.parse(text) as Record<string, unknown>;
    const owner: { network?: string; podUid?: string; pod?: string; claim?: string } = {};
    for (const key of ['network', 'podUid', 'pod', 'claim'] as const) if (typeof parsed[key] === 'string') owner[key] = parsed[key];
    return { owner };
  } catch {
    return {};
  }
}

async function fsyncDir(path: string): Promise<void> {
  const handle = await fs.open(path, fsConstants.O_RDONLY | fsConstants.O_DIRECTORY);
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

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

let tempCounter = 0;

/**
 * Without fsync the lease is created in place with O_EXCL: one syscall, and still never two owners. A crash
 * in the middle of the write leaves a short file, which reads as an unknown owner and is released by recovery.
 */
function claimInline(file: string, lease: Lease): boolean {
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
interface LeaseFileIo {
  readText(path: string): Promise<string | undefined>; // undefined when the file does not exist
  remove(path: string): Promise<void>;
  syncDir(path: string): Promise<void>;
}

/** Creates a file that must not exist yet, with its content on disk before it returns. */
async function writeNewSynced(path: string, content: string): Promise<void> {
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

const syncedIo: LeaseFileIo = {
  readText: async (path) => leaseText(await readBoundedFile(path, LEASE_READ)),
  remove: (path) => fs.rm(path, { force: true }),
  syncDir: fsyncDir,
};

const inlineIo: LeaseFileIo = {
  readText: async (path) => leaseText(readBoundedFileSync(path, LEASE_READ)),
  remove: async (path) => rmSync(path, { force: true }),
  syncDir: async () => undefined,
};

export interface LeaseStoreOptions {
  /** fsync each change (default true). */
  readonly sync?: boolean;
  /** Told of each entry that is not a lease file it can read (a directory, a FIFO, a symlink, an oversized file). */
  readonly onSkipped?: (file: string, reason: string) => void;
}

export class LeaseStore {
  private readonly networks = new Map<string, NetworkLeases>();

  private readonly io: LeaseFileIo;

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
  async setHint(network: string, set: number, ip: Ip): Promise<void> {
    this.of(network).hints.set(set, ip);
    const fd = openSync(join(this.dir, network, `${HINT_PREFIX}${set}`), fsConstants.O_WRONLY | fsConstants.O_CREAT, 0o600);
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
      const existing = { ip, lease: parseLeaseFile(lease.network, ip, (await this.io.readText(join(path, name)).catch(() => '')) ?? '') };
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
    const temp = join(path, `${TEMP_PREFIX}${process.pid}-${tempCounter++}`);
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
  async remove(network: string, stored: readonly StoredLease[]): Promise<{ readonly removed: readonly Lease[]; readonly failures: readonly Error[] }> {
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
