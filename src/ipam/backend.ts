/**
 * The port the engine and the drivers use for IPAM: allocate for an attachment, release its leases, and list or
 * collect leases (recovery, GC); with what a request and a result are. `Ipam` (allocator.ts, leases as files on the
 * node) and `ClusterIpam` (cluster/cluster-ipam.ts, pools in blocks on the Kubernetes API) implement it.
 */
import type { Result } from '../cni/errors';
import type { DnsSpec, IpamConfig, IpamRoute } from './config';
import type { Lease, LeaseOwner } from './lease';

export interface IpamRequest {
  /** Network name; leases are per network. */
  readonly network: string;
  readonly containerId: string;
  /** The lease's interface: with the container, the owner a release must name exactly (lease-key.ts). */
  readonly ifname: string;
  readonly config: IpamConfig;
  /** "ip" or "ip/prefix", from CNI_ARGS IP= or runtimeConfig ips. */
  readonly requestedIps?: readonly string[];
  /** Recorded with each lease (the pod's UID and name; the attachment's network when the lease is in a shared pool). */
  readonly owner?: LeaseOwner;
  /** The pod, when the runtime named it (cluster IPAM records it with the lease). */
  readonly pod?: { readonly uid?: string; readonly namespace?: string; readonly name?: string };
  /**
   * The IPAMClaim (in the pod's namespace) that owns the addresses instead of the pod: the selection's
   * ipam-claim-reference. Only cluster IPAM honours it (cluster/claims.ts).
   */
  readonly claim?: string;
}

export interface IpamResult {
  readonly ips: readonly { readonly address: string; readonly gateway?: string }[];
  readonly routes: readonly IpamRoute[];
  readonly dns?: DnsSpec;
}

export interface IpamBackend {
  allocate(req: IpamRequest): Promise<Result<IpamResult>>;
  /** Releases every lease of one attachment on one network; releasing nothing succeeds. */
  release(network: string, containerId: string, ifname: string): Promise<Result<readonly Lease[]>>;
  leases(network?: string): Promise<readonly Lease[]>;
  /** Releases every lease for which keep(lease) is false; returns what it released. */
  releaseUnless(keep: (lease: Lease) => boolean): Promise<readonly Lease[]>;
}
