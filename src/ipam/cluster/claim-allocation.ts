/**
 * Allocation for an attachment whose addresses an IPAMClaim owns (claims.ts), under the pool's lock. In each range set:
 * the claim's address if it has one in this pool (its status.ips; else an entry for its UID in a block, left by an ADD
 * cut between the two writes below), wherever it lies; else a new one from this node's blocks, as any pod's. Then,
 * before the ADD answers: every address is an entry of its block that lists this node (a guarded update of that
 * block, which may be another node's), and new addresses are added to the claim's status.ips (guarded by its
 * resourceVersion).
 *
 * Two pods using one claim at once (a KubeVirt live migration: source and target pods on two nodes) get the same
 * addresses: when both allocate a first address, the first status write wins, and the other node gives its new
 * addresses back and takes the winner's.
 */
import type { Logger } from 'pino';
import { CniCode, CniError, err, ok, type Result } from '../../cni/errors';
import { parseCidr } from '../../common/ip';
import type { Ipam } from '../allocator';
import type { IpamRequest, IpamResult } from '../backend';
import { IPAM_ADDRESS_IN_USE } from '../codes';
import type { ClusterIpamConfig } from '../config';
import type { BlockLedger } from './block-ledger';
import { type PoolLayout, blockOf } from './blocks';
import {
  type ClaimedAddress,
  type ClaimObject,
  type IpamClaimRef,
  type IpamClaims,
  claimKey,
  claimedInPool,
  missingClaim,
  statusIpsWith,
} from './claims';
import { type BlockObject, type PoolObjects, apiError } from './objects';
import type { PoolAllocation } from './pool-allocation';

/** What a claim's allocation works with. */
export interface ClaimAllocationParts {
  readonly node: string;
  readonly claims: IpamClaims;
  readonly objects: PoolObjects;
  readonly ledger: BlockLedger;
  readonly pooled: Ipam;
  readonly inPool: PoolAllocation;
  readonly log: Logger;
}

export class ClaimAllocation {
  constructor(private readonly parts: ClaimAllocationParts) {}

  async allocate(
    req: IpamRequest,
    config: ClusterIpamConfig,
    layout: PoolLayout,
    ref: IpamClaimRef,
  ): Promise<Result<IpamResult>> {
    const { claims, pooled, log } = this.parts;
    for (let attempt = 0; ; attempt++) {
      const got = await claims.get(ref);
      if (!got.ok)
        return err(
          got.error.status === 404
            ? missingClaim(ref, req.network)
            : apiError(`reading IPAMClaim ${claimKey(ref)}`, got.error),
        );
      const claim = got.value as ClaimObject;
      const network = claim.spec?.network;
      if (network && network !== req.network) {
        return err(
          new CniError(
            CniCode.InvalidNetworkConfig,
            `IPAMClaim ${claimKey(ref)} is for network ${network}, not ${req.network}`,
            "each network of the pod needs its own claim (spec.network is the network's CNI name)",
          ),
        );
      }
      const uid = claim.metadata?.uid ?? '';
      const claimed = this.addressesOf(layout, claim, uid);
      for (const address of claimed.values()) {
        const used = await this.recordUse(layout, address, ref, uid);
        if (!used.ok) return used;
      }
      const result = await this.parts.inPool.allocate(req, config, layout, claimed);
      if (!result.ok) return result;
      const fresh = result.value.ips.filter(
        (ip) => ![...claimed.values()].some((c) => c.address === ip.address.split('/')[0]),
      );
      // Those of an entry but not of status.ips too (an ADD cut between its two writes): the claim shows them.
      const unlisted = result.value.ips.filter(
        (ip) => !(claim.status?.ips ?? []).some((x) => x.split('/')[0] === ip.address.split('/')[0]),
      );
      if (unlisted.length === 0) return result;
      const undo = async (error: CniError): Promise<Result<never>> => {
        await pooled.release(layout.name, req.containerId, req.ifname);
        for (const ip of fresh) await this.forgetUse(layout, ip.address.split('/')[0] ?? '', uid);
        return err(error);
      };
      for (const ip of fresh) {
        const text = ip.address.split('/')[0] ?? '';
        const block = blockOf(layout, parseCidr(ip.address)!);
        if (!block.ok) return undo(block.error);
        const recorded = await this.recordUse(layout, { address: text, block: block.value }, ref, uid);
        if (!recorded.ok) return undo(recorded.error);
      }
      const status = {
        ...claim.status,
        ips: statusIpsWith(
          claim.status?.ips ?? [],
          unlisted.map((ip) => ip.address),
        ),
        ownerPod: req.pod?.name ?? '',
      };
      const wrote = await claims.updateStatus(ref, claim, status);
      if (wrote.ok) {
        log.info({ claim: claimKey(ref), pool: layout.name, ips: status.ips }, 'recorded addresses on an IPAMClaim');
        return result;
      }
      // 409: the claim changed since it was read; another node may have given it addresses first. Read it again.
      const undone = await undo(apiError(`writing the status of IPAMClaim ${claimKey(ref)}`, wrote.error));
      if (wrote.error.status !== 409 || attempt >= 3) return undone;
    }
  }

  /** The claim's addresses in this pool, by set: its status.ips, else entries of blocks for its UID. */
  private addressesOf(layout: PoolLayout, claim: ClaimObject, uid: string): Map<number, ClaimedAddress> {
    const claimed = claimedInPool(layout, claim.status?.ips ?? []);
    for (const block of this.parts.ledger.list()) {
      if (block.spec?.pool !== layout.name) continue;
      for (const entry of this.parts.ledger.entriesOf(block.metadata?.name ?? '')) {
        const ip = parseCidr(`${entry.address}/${entry.address.includes(':') ? 128 : 32}`);
        const found = entry.claimUid === uid && ip !== undefined ? blockOf(layout, ip) : undefined;
        if (found?.ok && !claimed.has(found.value.set))
          claimed.set(found.value.set, { address: entry.address, block: found.value });
      }
    }
    return claimed;
  }

  /**
   * Makes `address` an entry of its block owned by the claim, with this node among its users: a resourceVersion-guarded
   * update of the block object, read fresh, retried on conflict. No entry yet is allowed only in a block this node
   * holds (then the address must not be leased to anything else here), or in a block no node holds (this node claims
   * it first): a block of another node's that does not list the address may have it leased, unknown to the API, and
   * only that node could say.
   */
  private async recordUse(
    layout: PoolLayout,
    { address, block }: ClaimedAddress,
    ref: IpamClaimRef,
    uid: string,
  ): Promise<Result<void>> {
    const { node, objects, ledger } = this.parts;
    const key = claimKey(ref);
    for (let attempt = 0; attempt < 8; attempt++) {
      const got = await objects.getBlock(block.name);
      if (!got.ok && got.error.status === 404) {
        const claimed = await ledger.claim(layout, block);
        if (!claimed.ok) return claimed;
        continue;
      }
      if (!got.ok) return err(apiError(`reading block ${block.cidr} of pool ${layout.name}`, got.error));
      const object = got.value as BlockObject;
      const entries = object.spec?.claims ?? [];
      const entry = entries.find((e) => e.address === address);
      if (entry !== undefined && entry.claimUid !== uid) {
        return err(
          new CniError(
            IPAM_ADDRESS_IN_USE,
            `address ${address} of IPAMClaim ${key} is owned by IPAMClaim ${entry.claim} (another object) in pool ${layout.name}`,
          ),
        );
      }
      if (entry === undefined) {
        const refused = await this.refuseNewEntry(layout, object, { address, block }, key);
        if (refused !== undefined) return err(refused);
      }
      if (entry?.nodes.includes(node)) return ok(undefined);
      const claims =
        entry !== undefined
          ? entries.map((e) => (e === entry ? { ...e, nodes: [...e.nodes, node] } : e))
          : [...entries, { address, claim: key, claimUid: uid, nodes: [node] }];
      const put = await objects.updateBlock({ ...object, spec: { ...object.spec, claims } });
      if (put.ok) {
        ledger.noteWritten(put.value as BlockObject);
        return ok(undefined);
      }
      if (put.error.status !== 409)
        return err(apiError(`recording IPAMClaim ${key} in block ${block.cidr}`, put.error));
    }
    return err(
      new CniError(
        CniCode.TryAgainLater,
        `block ${block.cidr} of pool ${layout.name} kept changing while IPAMClaim ${key} was recorded in it; try again`,
      ),
    );
  }

  /** Why `address` may not get a new entry in `object` (another node's block, or leased here to another), if it may not. */
  private async refuseNewEntry(
    layout: PoolLayout,
    object: BlockObject,
    { address, block }: ClaimedAddress,
    key: string,
  ): Promise<CniError | undefined> {
    const holder = object.spec?.node;
    if (holder !== this.parts.node) {
      return new CniError(
        IPAM_ADDRESS_IN_USE,
        `address ${address} of IPAMClaim ${key} is in block ${block.cidr} of pool ${layout.name}, which node ${holder} holds and which does not record the claim: only that node knows whether the address is free`,
        "delete the claim's status.ips to let it get a new address",
      );
    }
    const leased = (await this.parts.pooled.leases(layout.name)).find((l) => l.address.split('/')[0] === address);
    if (leased !== undefined && leased.owner?.claim !== key) {
      return new CniError(
        IPAM_ADDRESS_IN_USE,
        `address ${address} of IPAMClaim ${key} is leased on this node to container ${leased.containerId} interface ${leased.ifname}`,
      );
    }
    return undefined;
  }

  /** Undoes recordUse of a new address (the ADD failed): the entry goes, if it is still the claim's alone. */
  private async forgetUse(layout: PoolLayout, address: string, uid: string): Promise<void> {
    const { node, objects, ledger, log } = this.parts;
    const ip = parseCidr(`${address}/${address.includes(':') ? 128 : 32}`);
    const block = ip && blockOf(layout, ip);
    if (!block?.ok) return;
    for (let attempt = 0; attempt < 4; attempt++) {
      const got = await objects.getBlock(block.value.name);
      if (!got.ok) return;
      const object = got.value as BlockObject;
      const entries = object.spec?.claims ?? [];
      const entry = entries.find((e) => e.address === address && e.claimUid === uid);
      if (entry === undefined || entry.nodes.some((n) => n !== node)) return;
      const put = await objects.updateBlock({
        ...object,
        spec: { ...object.spec, claims: entries.filter((e) => e !== entry) },
      });
      if (put.ok) {
        ledger.noteWritten(put.value as BlockObject);
        return;
      }
      if (put.error.status !== 409) break;
    }
    // Left behind, it is harmless: the next ADD with the claim takes it, and deleting the claim frees it.
    log.warn(
      { pool: layout.name, address },
      'could not remove the entry of an IPAMClaim whose ADD failed; it is reused or freed with the claim',
    );
  }
}
