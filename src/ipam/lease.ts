/** A lease: an address held by one attachment (its container and lease interface), as the store keeps it. */
import type { Ip } from '../common/ip';

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
  /** The reference host-local's directory of the network (`<dataDir>/<network>`) the lease is written in too. */
  readonly hostLocalDir?: string;
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

/** A lease with its address parsed, as the store indexes it. */
export interface StoredLease {
  readonly lease: Lease;
  readonly ip: Ip;
}

const NETWORK_NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,252}$/;

/** Network names become directory names. */
export const isSafeNetworkName = (name: string): boolean => NETWORK_NAME.test(name) && name !== '.' && name !== '..';
