/**
 * Native host-local's side of sharing a network's addresses with the reference plugin's directory (host-local-dir.ts,
 * docs/ipam.md): which directory a network's leases go to, the allocation run under the plugin's lock, the copies of
 * leases from before the sharing written there, and a lease's copy removed before the lease.
 */
import { formatIp, type Ip } from '../common/ip';
import type { IpamConfig } from './config';
import {
  type HeldListings,
  HostLocalDir,
  hostLocalDirOf,
  hostLocalLeaseText,
  removeFromHostLocal,
} from './host-local-dir';
import type { Lease, StoredLease } from './lease';
import type { LeaseStore } from './store';

type HostLocal = Extract<IpamConfig, { type: 'host-local' }>;

export interface SharingOptions {
  /**
   * The reference host-local's dataDir for a network whose config names none (the plugin's default is
   * /var/lib/cni/networks). Unset: no address is shared with the plugin (the store of cluster pools).
   */
  readonly hostLocalDataDir?: string;
  /** Told of a lease of this store whose address host-local's directory gives to another holder. */
  readonly onDuplicate?: (file: string, holder: string) => void;
}

/** Where an allocation's addresses are held besides this store: host-local's directory, or nowhere. */
export interface Share {
  readonly path?: string;
  holds(ip: Ip): boolean;
  holderOf(ip: Ip): string;
  write(ip: Ip, lease: Lease): boolean;
}

const UNSHARED: Share = { holds: () => false, holderOf: () => '', write: () => true };

const asError = (thrown: unknown): Error => (thrown instanceof Error ? thrown : new Error(String(thrown)));

export class HostLocalSharing {
  /** The directory each network's leases were last written into, in this process. */
  private readonly shared = new Map<string, string>();
  private readonly listings: HeldListings = new Map();

  constructor(
    private readonly store: LeaseStore,
    private readonly options: SharingOptions,
  ) {}

  /** The reference plugin's directory of the network, when this store shares addresses with it. */
  dirOf(network: string, config: HostLocal): string | undefined {
    const dataDir = config.dataDir ?? this.options.hostLocalDataDir;
    return this.options.hostLocalDataDir === undefined || dataDir === undefined
      ? undefined
      : hostLocalDirOf(dataDir, network);
  }

  /** Runs `body` under host-local's lock on the directory, once this store's leases of the network are there. */
  async run<T>(network: string, path: string | undefined, body: (share: Share) => Promise<T>): Promise<T> {
    if (path === undefined) return body(UNSHARED);
    return HostLocalDir.locked(path, this.listings, async (dir) => {
      if (this.shared.get(network) !== path) this.writeHeld(network, dir);
      return body(dir);
    });
  }

  /**
   * Writes into host-local's directory the leases of the network that are not there: those of a plexusd from before
   * sharing, or a copy lost (a power loss). One there for another holder is a duplicate made before: reported.
   */
  private writeHeld(network: string, dir: HostLocalDir): void {
    for (const { ip, lease } of this.store.all(network)) {
      if (lease.containerId === '' || (lease.hostLocalDir !== undefined && lease.hostLocalDir !== dir.path)) continue;
      if (!dir.holds(ip)) dir.write(ip, lease);
      else if (dir.holderOf(ip) !== hostLocalLeaseText(lease).replace('\r\n', ' interface '))
        this.options.onDuplicate?.(`${dir.path}/${formatIp(ip.family, ip.value)}`, dir.holderOf(ip));
    }
    this.shared.set(network, dir.path);
  }

  /** Removes the copies of leases about to be removed; those whose copy could not be removed stay (failures). */
  removeCopies(
    network: string,
    stored: readonly StoredLease[],
  ): { readonly kept: readonly StoredLease[]; readonly failures: readonly Error[] } {
    const failures: Error[] = [];
    const kept: StoredLease[] = [];
    for (const entry of stored) {
      const path = entry.lease.hostLocalDir ?? this.shared.get(network);
      try {
        if (path !== undefined) {
          removeFromHostLocal(path, entry.ip, entry.lease);
          this.listings.delete(path);
        }
        kept.push(entry);
      } catch (thrown) {
        failures.push(asError(thrown));
      }
    }
    return { kept, failures };
  }
}
