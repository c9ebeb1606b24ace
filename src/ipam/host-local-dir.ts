/**
 * The reference host-local plugin's store of a network, `<dataDir>/<network name>/`: one file per address, named by
 * the address (Go's text for it: RFC 5952 for IPv6), holding `<containerID>\r\n<ifname>` (older: the ID alone), with
 * `last_reserved_ip.<range set>` and a `lock` file the plugin flocks around each allocation and release.
 *
 * Native host-local shares it (docs/ipam.md, "One store of addresses with the reference plugin"): under that flock,
 * an address the directory names is held, whoever wrote it, and each native lease is written there too, in the
 * plugin's format, so a delegated host-local (Multus's pods, a NAD switched to `plexus.io/delegate`) never hands it
 * out either.
 */
import {
  closeSync,
  constants as fsConstants,
  mkdirSync,
  openSync,
  readdirSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { readBoundedFileSync } from '../common/bounded-file';
import { type Ip, formatIp, parseIp } from '../common/ip';
import { sys, errnoName } from '../kernel/syscalls';
import type { Lease } from './lease';
import { ipKey } from './lease-index';
import { isErrno } from './lease-file-io';

const LOCK_EX = 2;
const LOCK_NB = 4;
const LOCK_UN = 8;
const EWOULDBLOCK = 11;
/** The plugin holds its lock for an allocation's few file operations; a minute means it is stuck. */
const LOCK_WAIT_MS = 60_000;
/** A host-local lease is an ID and an interface name; anything far bigger is not one. */
const LEASE_READ = { maxBytes: 4096 } as const;

/** The directory of one network in a host-local dataDir, as the plugin names it. */
export const hostLocalDirOf = (dataDir: string, network: string): string => join(dataDir, network);

/** The text host-local writes for a lease (disk.Store.Reserve). */
export const hostLocalLeaseText = (lease: Pick<Lease, 'containerId' | 'ifname'>): string =>
  `${lease.containerId}\r\n${lease.ifname}`;

/**
 * What each directory held when last listed, by its modification time: listing thousands of entries on every ADD cost
 * 20 ms. A listing missed by a change within the clock's tick is harmless: the O_EXCL write is the arbiter.
 */
export type HeldListings = Map<string, { readonly mtimeNs: bigint; readonly held: Set<bigint> }>;

const mtimeOf = (path: string): bigint => statSync(path, { bigint: true }).mtimeNs;

/** Every address the directory holds: each entry whose name is an address, in any form, whatever it is. */
function heldAddresses(path: string, listings: HeldListings): Set<bigint> {
  const mtimeNs = mtimeOf(path);
  const listed = listings.get(path);
  if (listed !== undefined && listed.mtimeNs === mtimeNs) return listed.held;
  const held = new Set<bigint>();
  for (const name of readdirSync(path)) {
    const ip = parseIp(name);
    if (ip !== undefined) held.add(ipKey(ip));
  }
  listings.set(path, { mtimeNs, held });
  return held;
}

const wait = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** Takes the plugin's flock on `<path>/lock`, polling without blocking the event loop. Returns its descriptor. */
async function lock(path: string): Promise<number> {
  const fd = openSync(join(path, 'lock'), fsConstants.O_RDWR | fsConstants.O_CREAT, 0o600);
  const deadline = Date.now() + LOCK_WAIT_MS;
  for (let pause = 1; ; pause = Math.min(pause * 2, 20)) {
    if (sys.flock(fd, LOCK_EX | LOCK_NB) === 0) return fd;
    const errno = sys.errno();
    if (errno !== EWOULDBLOCK || Date.now() > deadline) {
      closeSync(fd);
      const why = errno === EWOULDBLOCK ? `still held after ${LOCK_WAIT_MS / 1000} s` : errnoName(errno);
      throw new Error(`cannot lock ${join(path, 'lock')}, host-local's lock: ${why}`);
    }
    await wait(pause);
  }
}

/** One allocation's view of the directory, taken under its lock: what it holds, and the native leases written there. */
export class HostLocalDir {
  private constructor(
    readonly path: string,
    private readonly held: Set<bigint>,
  ) {}

  /**
   * Runs `body` holding the plugin's lock on the directory (made as the plugin makes it, mode 0755, when missing).
   * Throws, naming the path, when it is not a directory or cannot be listed.
   */
  static async locked<T>(path: string, listings: HeldListings, body: (dir: HostLocalDir) => Promise<T>): Promise<T> {
    try {
      mkdirSync(path, { recursive: true, mode: 0o755 });
      if (!statSync(path).isDirectory()) throw new Error('not a directory');
    } catch (thrown) {
      const why = isErrno(thrown, 'EEXIST') || isErrno(thrown, 'ENOTDIR') ? 'is not a directory' : String(thrown);
      throw new Error(`host-local's store ${path} ${why}: what it holds cannot be read`, { cause: thrown });
    }
    const fd = await lock(path);
    try {
      const held = heldAddresses(path, listings);
      const result = await body(new HostLocalDir(path, held));
      // Under the lock only this allocation changed the directory: its listing is the set it kept up to date.
      listings.set(path, { mtimeNs: mtimeOf(path), held });
      return result;
    } finally {
      sys.flock(fd, LOCK_UN);
      closeSync(fd);
    }
  }

  /** Whether the directory names the address (a lease of the plugin's, or one of ours). */
  holds(ip: Ip): boolean {
    return this.held.has(ipKey(ip));
  }

  /** What the file of a held address says, for an error message. */
  holderOf(ip: Ip): string {
    const read = readBoundedFileSync(join(this.path, formatIp(ip.family, ip.value)), LEASE_READ);
    return read.ok ? read.value.toString('utf8').trim().split(/\r?\n/).join(' interface ') : read.error.reason;
  }

  /**
   * Writes the lease in the plugin's format under its address's name, if no file has it (O_EXCL, as the plugin
   * reserves). False when one has: someone took it without the lock.
   */
  write(ip: Ip, lease: Lease): boolean {
    try {
      writeFileSync(join(this.path, formatIp(ip.family, ip.value)), hostLocalLeaseText(lease), {
        flag: 'wx',
        mode: 0o600,
      });
    } catch (thrown) {
      if (isErrno(thrown, 'EEXIST')) return false;
      throw thrown;
    }
    this.held.add(ipKey(ip));
    return true;
  }
}

/**
 * Removes a native lease's copy from the plugin's directory, only if it is still that lease's (the plugin may have
 * the address again after a removal by hand). A missing file is fine. No lock is needed: the plugin creates files
 * with O_EXCL, so a removal can only make an address free a moment sooner.
 */
export function removeFromHostLocal(path: string, ip: Ip, lease: Lease): void {
  const file = join(path, formatIp(ip.family, ip.value));
  const read = readBoundedFileSync(file, LEASE_READ);
  if (!read.ok) {
    if (read.error.kind === 'missing') return;
    throw new Error(`${file} ${read.error.reason}`);
  }
  if (read.value.toString('utf8').trim() === hostLocalLeaseText(lease)) rmSync(file, { force: true });
}
