/**
 * The claims of the definitions a source has read, kept as they change, and which of them are refused now
 * (exclusive-claims.ts): a source asks it about each definition it reads or forgets, and hears what that changed.
 * Only the claimants are kept and compared, so a change costs the few networks that claim anything.
 */
import type { NetworkDefinition } from './nad';
import { type Claimant, type ClaimClash, type ClaimsOf, claimClashes } from './exclusive-claims';

/** A definition refused for a clash, with what names it where it came from. */
export interface RefusedNetwork {
  readonly namespace: string;
  readonly name: string;
  /** The object's uid in the API, when it has one (an Event about it names it so). */
  readonly uid?: string | undefined;
  readonly clash: ClaimClash;
}

/** What one read changed: networks refused now, and those (keys) served again after a refusal. */
export interface ClaimChange {
  readonly refused: readonly RefusedNetwork[];
  readonly served: readonly string[];
}

/** Where a definition came from, beyond the definition: its creation time and uid in the API. */
export interface DefinitionOrigin {
  readonly createdAt?: string | undefined;
  readonly uid?: string | undefined;
}

type Entry = Claimant & { readonly definition: NetworkDefinition; readonly uid?: string | undefined };

export class ClaimedNetworks {
  private readonly claimants = new Map<string, Entry>();
  private refused = new Map<string, ClaimClash>();

  constructor(private readonly claimsOf: ClaimsOf) {}

  /** Notes `definition` as read now (undefined: gone, or no longer valid) under `key`; what that changed. */
  update(key: string, definition: NetworkDefinition | undefined, origin: DefinitionOrigin = {}): ClaimChange {
    const had = this.claimants.has(key);
    const claims = definition ? this.claimsOf(definition) : [];
    if (definition && claims.length)
      this.claimants.set(key, { key, createdAt: origin.createdAt, claims, definition, uid: origin.uid });
    else this.claimants.delete(key);
    if (!had && !claims.length) return { refused: [], served: [] };
    const before = this.refused;
    this.refused = claimClashes(this.claimants.values());
    const refused: RefusedNetwork[] = [];
    for (const clash of this.refused.values()) {
      const earlier = before.get(clash.network);
      if (earlier?.holder === clash.holder && earlier.claim.resource === clash.claim.resource) continue;
      const entry = this.claimants.get(clash.network);
      if (entry) refused.push({ ...nameOf(entry.definition), uid: entry.uid, clash });
    }
    const served = [...before.keys()].filter((k) => !this.refused.has(k) && this.claimants.has(k));
    return { refused, served };
  }

  /** Why `key` is refused now, if it is. */
  clashOf(key: string): ClaimClash | undefined {
    return this.refused.get(key);
  }

  /** Why `definition`, not read yet, would be refused beside those read. */
  clashIfAdded(definition: NetworkDefinition, origin: DefinitionOrigin = {}): ClaimClash | undefined {
    const claims = this.claimsOf(definition);
    if (!claims.length) return undefined;
    const others = [...this.claimants.values()].filter((c) => c.key !== definition.key);
    return claimClashes([...others, { key: definition.key, createdAt: origin.createdAt, claims }]).get(definition.key);
  }
}

const nameOf = (d: NetworkDefinition): { namespace: string; name: string } => ({
  namespace: d.namespace,
  name: d.name,
});
