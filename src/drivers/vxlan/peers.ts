/**
 * Which remote VTEPs a node floods a cluster-mode network's traffic to: the live peers that serve the network (publish
 * its VNI), of the VTEP's IP family, never the node itself. Pure, so the rule is tested without a cluster.
 */
import { ipFamily } from '../common';
import type { PeerVteps } from './vtep-directory';

export interface FloodQuery {
  readonly vni: number;
  /** This node's underlay address for the network: excluded, and its family the one kept. */
  readonly self: string;
}

/** The flood targets of one VTEP, sorted and without duplicates. */
export function floodTargets(query: FloodQuery, peers: readonly PeerVteps[]): string[] {
  const family = ipFamily(query.self);
  const targets = new Set<string>();
  for (const peer of peers) {
    const address = peer.vteps.get(query.vni);
    if (address === undefined || address === query.self || ipFamily(address) !== family) continue;
    targets.add(address);
  }
  return [...targets].sort();
}

/** The entries to append and to delete so that `current` becomes `wanted`. */
export function floodChanges(
  current: readonly string[],
  wanted: readonly string[],
): { add: readonly string[]; remove: readonly string[] } {
  const have = new Set(current);
  const want = new Set(wanted);
  return { add: wanted.filter((a) => !have.has(a)), remove: current.filter((a) => !want.has(a)) };
}
