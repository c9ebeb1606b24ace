/** Leases of a pool's directory, as the rest of the node sees them. */
import { contains, parseCidr } from '../../common/ip';
import type { Lease } from '../lease';

/** A pooled lease as the engine knows it: under its attachment's network, not its pool's directory. */
export const asAttachmentLease = (lease: Lease): Lease =>
  lease.owner?.network !== undefined ? { ...lease, network: lease.owner.network } : lease;

/** Whether the lease's address lies in the CIDR `text` (a block's). */
export function inCidr(text: string, lease: Lease): boolean {
  const cidr = parseCidr(text);
  const ip = parseCidr(lease.address);
  return cidr !== undefined && ip !== undefined && contains(cidr, ip);
}
