/**
 * Which IPAM leases the journal's attachments hold. A lease belongs to one attachment: its network, its container and
 * its lease interface (ipam/lease-key.ts: the runtime's interface and the pod's, `eth0:net1`; the bare pod interface
 * in leases an older plexusd made). The record's releaseIpam undo steps name exactly the leases it will release, and
 * each is recorded before its address is reserved, so they are the one complete list of leases a live attachment
 * holds. A lease is compared with a step by the whole owner, so one sandbox's record never holds (or releases) a lease
 * of another that shares its container ID.
 */
import type { Lease } from '../ipam';
import type { AttachmentRecord } from './journal/record';

const holderKey = (network: string, containerId: string, ifname: string): string =>
  `${network}\u0000${containerId}\u0000${ifname}`;

/**
 * What the journal cannot tell is held: a record this daemon cannot read holds every lease of its container (of every
 * container, when not even its file name says whose it is), and while records are known lost, every lease is.
 */
export class LeaseHolders {
  private readonly held = new Set<string>();
  /** Containers with a record this daemon cannot read: which of their leases it holds cannot be told, so all of them. */
  private readonly unreadable = new Set<string>();
  private readonly all: boolean;

  constructor(records: readonly AttachmentRecord[], recordsLost = false) {
    let all = recordsLost;
    for (const record of records) {
      if (record.unreadable) {
        if (record.meta.containerId === '') all = true;
        this.unreadable.add(record.meta.containerId);
      }
      for (const step of record.undo)
        if (step.kind === 'releaseIpam') this.held.add(holderKey(step.network, step.containerId, step.ifname));
    }
    this.all = all;
  }

  holds(lease: Lease): boolean {
    if (lease.containerId === '') return false;
    if (this.all) return true;
    return (
      this.unreadable.has(lease.containerId) || this.held.has(holderKey(lease.network, lease.containerId, lease.ifname))
    );
  }
}
