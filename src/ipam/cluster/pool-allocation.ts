/**
 * Allocation in a pool, inside the blocks this node holds: host-local's rules (the pool's lease directory, one address
 * per range set, idempotent per owner), less the addresses IPAMClaims own there. A set of which this node holds no
 * block gets one first; when its blocks are full, another.
 */
import { CniCode, CniError, err, ok, type Result } from '../../cni/errors';
import { formatIp, parseCidr } from '../../common/ip';
import type { Ipam } from '../allocator';
import type { IpamRequest, IpamResult } from '../backend';
import { IPAM_ADDRESS_IN_USE, IPAM_POOL_EXHAUSTED } from '../codes';
import type { ClusterIpamConfig, IpamConfig } from '../config';
import type { Lease } from '../lease';
import type { BlockLedger } from './block-ledger';
import { type PoolBlock, type PoolLayout, blockOf, withoutAddresses } from './blocks';
import type { ClaimedAddress } from './claims';
import { inCidr } from './pool-leases';
import { blockLost } from './refusals';
import { definedFields } from '../../common/defined-fields';

const inBlock = (block: PoolBlock, lease: Lease): boolean => inCidr(block.cidr, lease);

/** Addresses another IPAM holds in a pool (Whereabouts', for its configs): never handed out. */
export interface ForeignHolds {
  /** The addresses held in a block's CIDR, as text. */
  heldIn(cidr: string): readonly string[];
  /** Who holds an address, as a refusal names it; undefined when nobody does. */
  holderOf(address: string): string | undefined;
}

const NONE_HELD: ForeignHolds = { heldIn: () => [], holderOf: () => undefined };

const heldByOther = (address: string, pool: string, holder: string): CniError =>
  new CniError(IPAM_ADDRESS_IN_USE, `requested IP ${address} of pool ${pool} is held by ${holder}`);

export class PoolAllocation {
  constructor(
    private readonly ledger: BlockLedger,
    /** The leases of every pool, a directory per pool. */
    private readonly pooled: Ipam,
    /** What Whereabouts holds: held in pools of Whereabouts configs. */
    private readonly whereabouts: ForeignHolds,
  ) {}

  private foreignHolds(config: ClusterIpamConfig): ForeignHolds {
    return config.flavour === 'whereabouts' ? this.whereabouts : NONE_HELD;
  }

  /** The addresses of a block this node must not hand out: owned by IPAMClaims, or held by the pool's other IPAM. */
  private unavailableIn(block: PoolBlock, foreign: ForeignHolds): string[] {
    return [...this.ledger.entriesOf(block.name).map((e) => e.address), ...foreign.heldIn(block.cidr)];
  }

  /**
   * Allocates for `req` in the pool, under the pool's lock (the caller's). `claimed`: the sets in which the attachment
   * gets a claim's address (its block may be another node's: the claim's entry there keeps that node from handing it
   * out), not a new one.
   */
  async allocate(
    req: IpamRequest,
    config: ClusterIpamConfig,
    layout: PoolLayout,
    claimed: ReadonlyMap<number, ClaimedAddress> = new Map(),
  ): Promise<Result<IpamResult>> {
    const lost = this.ledger.hasLost(layout.name)
      ? this.ledger.lostIn(layout.name, await this.pooled.leases(layout.name))
      : undefined;
    if (lost !== undefined) return err(blockLost(lost.block, layout.name, lost.leased));
    const requestedSets = new Set<number>(claimed.keys());
    const foreign = this.foreignHolds(config);
    for (const text of req.requestedIps ?? []) {
      const ip = parseCidr(text) ?? parseCidr(`${text}/${text.includes(':') ? 128 : 32}`);
      if (ip === undefined)
        return err(
          new CniError(CniCode.InvalidNetworkConfig, `requested IP ${JSON.stringify(text)} is not a valid IP address`),
        );
      const block = blockOf(layout, ip);
      if (!block.ok) return block;
      const owner = this.ledger.entriesOf(block.value.name).find((e) => e.address === formatIp(ip.family, ip.value));
      if (owner !== undefined)
        return err(
          new CniError(
            IPAM_ADDRESS_IN_USE,
            `requested IP ${formatIp(ip.family, ip.value)} is owned by IPAMClaim ${owner.claim} in pool ${layout.name}`,
          ),
        );
      const holder = foreign.holderOf(formatIp(ip.family, ip.value));
      if (holder !== undefined) return err(heldByOther(formatIp(ip.family, ip.value), layout.name, holder));
      requestedSets.add(block.value.set);
      const mine = await this.ledger.hold(layout, block.value);
      if (!mine.ok) return mine;
    }
    // A set of which this node holds no block yet gets one first (the sets of a dual-stack pool at once).
    const unheld = [...layout.sets.keys()].filter(
      (set) => !requestedSets.has(set) && this.ledger.heldIn(layout, set).length === 0,
    );
    const claims = await Promise.all(unheld.map((set) => this.ledger.claimNext(layout, set, req.network)));
    const failedClaim = claims.find((c) => !c.ok);
    if (failedClaim) return failedClaim;
    // The common path allocates in the blocks held, reading no lease list (a retried ADD gets what it has: the
    // allocator is idempotent per owner). Only when they are full, once per block filled, are the leases counted to
    // find the sets that need another block.
    let result = await this.allocateInHeld(req, config, layout, claimed);
    if (result.ok || result.error.code !== IPAM_POOL_EXHAUSTED) return result;
    const grown = await this.claimWhereFull(req.network, layout, { requestedSets, foreign });
    if (!grown.ok) return grown;
    if (grown.value) result = await this.allocateInHeld(req, config, layout, claimed);
    if (!result.ok && result.error.code === IPAM_POOL_EXHAUSTED) {
      return err(
        new CniError(
          IPAM_POOL_EXHAUSTED,
          `no free address in pool ${layout.name} (network ${req.network}): ${result.error.message}`,
        ),
      );
    }
    return result;
  }

  /** Claims another block in each set (not requested) whose held blocks are full; true when it claimed any. */
  private async claimWhereFull(
    network: string,
    layout: PoolLayout,
    { requestedSets, foreign }: { readonly requestedSets: ReadonlySet<number>; readonly foreign: ForeignHolds },
  ): Promise<Result<boolean>> {
    const leases = await this.pooled.leases(layout.name);
    let claimedAny = false;
    for (const set of layout.sets.keys()) {
      if (requestedSets.has(set)) continue;
      const blocks = this.ledger.heldIn(layout, set);
      // Addresses claims own (or another IPAM holds) count as used, whether or not a pod of this node has them now.
      const used = new Set([
        ...leases.filter((l) => blocks.some((b) => inBlock(b, l))).map((l) => l.address.split('/')[0]),
        ...blocks.flatMap((b) => this.unavailableIn(b, foreign)),
      ]).size;
      const size = blocks.reduce((sum, b) => sum + b.size, 0n);
      if (BigInt(used) < size) continue;
      const claimed = await this.ledger.claimNext(layout, set, network);
      if (!claimed.ok) return claimed;
      claimedAny = true;
    }
    return ok(claimedAny);
  }

  /**
   * Allocates with host-local's rules inside the blocks this node holds, less the addresses claims own there (so this
   * node never hands one out, whichever node's pod uses it now); a claimed set gets the claim's address.
   */
  private async allocateInHeld(
    req: IpamRequest,
    config: ClusterIpamConfig,
    layout: PoolLayout,
    claimed: ReadonlyMap<number, ClaimedAddress>,
  ): Promise<Result<IpamResult>> {
    const foreign = this.foreignHolds(config);
    const ranges = layout.sets.map((_, set) => {
      const mine = claimed.get(set);
      return mine !== undefined
        ? mine.block.ranges
        : this.ledger.heldIn(layout, set).flatMap((b) => withoutAddresses(b.ranges, this.unavailableIn(b, foreign)));
    });
    const empty = ranges.findIndex((set) => set.length === 0);
    if (empty >= 0)
      return err(
        new CniError(
          IPAM_POOL_EXHAUSTED,
          `range set ${empty} of pool ${layout.name}: every address of this node's blocks is owned by an IPAMClaim or held by Whereabouts`,
        ),
      );
    const owner = {
      network: req.network,
      ...(req.pod?.uid ? { podUid: req.pod.uid } : {}),
      ...(req.pod?.namespace && req.pod.name ? { pod: `${req.pod.namespace}/${req.pod.name}` } : {}),
      ...(req.claim !== undefined && req.pod?.namespace ? { claim: `${req.pod.namespace}/${req.claim}` } : {}),
    };
    const derived: IpamConfig = {
      type: 'host-local',
      ranges,
      routes: config.routes,
      ...definedFields({ dns: config.dns }),
    };
    const requestedIps = [...(req.requestedIps ?? []), ...[...claimed.values()].map((c) => c.address)];
    return this.pooled.allocate({
      network: layout.name,
      containerId: req.containerId,
      ifname: req.ifname,
      config: derived,
      requestedIps,
      owner,
    });
  }
}
