/** The in-memory index of one network's leases: by address and by owner, with the round-robin hints. */
import type { Ip } from '../common/ip';
import type { StoredLease } from './lease';

export const ipKey = (ip: Ip): bigint => (ip.family === 4 ? ip.value : ip.value | (1n << 128n));
export const ownerKey = (containerId: string, ifname: string): string => `${containerId}\n${ifname}`;

export class NetworkLeases {
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
