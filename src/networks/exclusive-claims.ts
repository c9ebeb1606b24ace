/**
 * What a network holds that no other network may (a VXLAN VNI: two networks on one would be one segment), and which
 * network keeps it when two claim it: the older definition (creationTimestamp), then the first by namespace/name. Every
 * node reads the same definitions, so every node refuses the same one. Drivers say what their networks claim
 * (ClaimsOf); a source of definitions refuses the others when it reads them (src/k8s/nad-source.ts). Pure.
 */
import { CniCode, CniError } from '../cni/errors';
import type { NetworkDefinition } from './nad';

export interface ExclusiveClaim {
  /** What is claimed, as an operator names it, unique across kinds: "VXLAN VNI 42". */
  readonly resource: string;
  /** Why two networks cannot share it. */
  readonly why: string;
  /** What to change. */
  readonly fix: string;
}

/** What one definition claims; empty for most. */
export type ClaimsOf = (definition: NetworkDefinition) => readonly ExclusiveClaim[];

export interface Claimant {
  readonly key: string;
  /** The definition's creationTimestamp (RFC 3339, UTC); undefined for files, which then go by name alone. */
  readonly createdAt?: string | undefined;
  readonly claims: readonly ExclusiveClaim[];
}

/** A network refused because `holder` claimed `claim` first. */
export interface ClaimClash {
  readonly network: string;
  readonly holder: string;
  readonly claim: ExclusiveClaim;
}

/**
 * The claimants that are refused, by key. Oldest first, each takes all it claims unless one of its claims is already
 * taken: then it is refused and takes nothing, so a refused network never keeps a third one out.
 */
export function claimClashes(claimants: Iterable<Claimant>): Map<string, ClaimClash> {
  const holders = new Map<string, string>();
  const clashes = new Map<string, ClaimClash>();
  for (const c of [...claimants].sort(olderFirst)) {
    const taken = c.claims.find((claim) => holders.has(claim.resource));
    if (taken) {
      clashes.set(c.key, { network: c.key, holder: holders.get(taken.resource) ?? '', claim: taken });
      continue;
    }
    for (const claim of c.claims) holders.set(claim.resource, c.key);
  }
  return clashes;
}

/** The refusal a clashing network's lookups answer: code 7, naming the network that holds the claim. */
export function clashError(clash: ClaimClash): CniError {
  return new CniError(
    CniCode.InvalidNetworkConfig,
    `network ${clash.network} is not served: it uses ${clash.claim.resource}, which network ${clash.holder} (the older definition) already uses; ${clash.claim.why}`,
    `${clash.claim.fix}; network ${clash.network} is served once ${clash.holder} is deleted or no longer uses it`,
  );
}

function olderFirst(a: Claimant, b: Claimant): number {
  const at = a.createdAt ?? '';
  const bt = b.createdAt ?? '';
  if (at !== bt) return at < bt ? -1 : 1;
  return a.key < b.key ? -1 : a.key > b.key ? 1 : 0;
}
