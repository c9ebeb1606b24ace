/**
 * Built-in IPAM: the IpamBackend port, host-local and static config schemas, with a durable per-network lease store.
 * The cluster-wide pools (cluster/) are imported by src/node only when the node talks to the Kubernetes API.
 */
export type { DnsSpec, IpamConfig, IpRange, IpamRoute } from './config';
export { parseIpamConfig } from './parse-config';
export { Ipam } from './allocator';
export type { IpamBackend, IpamRequest, IpamResult } from './backend';
export { type Lease, isSafeNetworkName } from './lease';
export { leaseInterface } from './lease-key';
export { IPAM_ADDRESS_IN_USE, IPAM_POOL_EXHAUSTED } from './codes';
