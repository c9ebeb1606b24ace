/**
 * What the engine and the drivers need of IPAM: allocate for an attachment, release its leases, and list or collect
 * leases (recovery, GC). `Ipam` (allocator.ts, leases as files on the node) is the one backend today; a cluster-wide
 * backend on the Kubernetes API is the next.
 */
import type { Result } from '../cni/errors';
import type { IpamRequest, IpamResult } from './allocator';
import type { Lease } from './store';

export interface IpamBackend {
  allocate(req: IpamRequest): Promise<Result<IpamResult>>;
  /** Releases every lease of one attachment on one network; releasing nothing succeeds. */
  release(network: string, containerId: string, ifname: string): Promise<Result<readonly Lease[]>>;
  leases(network?: string): Promise<readonly Lease[]>;
  /** Releases every lease for which keep(lease) is false; returns what it released. */
  releaseUnless(keep: (lease: Lease) => boolean): Promise<readonly Lease[]>;
}
