/** How cluster IPAM is set up for this node (src/node/main.ts fills it from plexusd's flags). */
import type { IpamConfig } from '../config';
import type { NodeLiveness } from './node-liveness';

export interface ClusterIpamOptions {
  readonly node: string;
  /** How often blocks are reconciled: empty ones returned, lost ones re-claimed, dead nodes' ones reclaimed. */
  readonly reconcileMs: number;
  /**
   * How long a node's liveness must have been expired (and its Node object gone) before its blocks are reclaimed; also
   * how long this node goes on allocating when it cannot renew its own.
   */
  readonly nodeGraceMs: number;
  /** Which nodes are proven dead, and whether this process may allocate for its node (a Lease per node, on the API). */
  readonly liveness: NodeLiveness;
  /**
   * The networks with their IPAM configs, as the API has them now: a pool none of them names and no block uses is
   * deleted after the grace period. Without it, no pool is ever deleted.
   */
  readonly networks?: () => readonly ClusterNetwork[];
}

/** A network and its IPAM config (preparePools, and the pools the API's networks name). */
export interface ClusterNetwork {
  readonly network: string;
  readonly config: IpamConfig;
}
