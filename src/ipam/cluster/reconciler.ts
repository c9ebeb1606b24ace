/**
 * The pass cluster IPAM runs every --ipam-reconcile-seconds: every local lease lies in a block this node holds, empty
 * blocks go back (one kept per pool and family), pools no network names and no block uses are deleted, the addresses
 * of deleted IPAMClaims are freed, and the blocks of nodes proven dead go back to their pools.
 */
import type { Logger } from 'pino';
import { parseCidr } from '../../common/ip';
import type { KeyedMutex } from '../../common/keyed-mutex';
import type { Ipam } from '../allocator';
import type { Lease } from '../lease';
import type { BlockLedger, HeldBlock } from './block-ledger';
import { type PoolLayout, blockOf, poolLayout } from './blocks';
import { type ClaimObject, type IpamClaims, parseClaimKey } from './claims';
import type { ClusterIpamOptions } from './cluster-options';
import { type BlockObject, type ClaimEntry, type PoolObject, type PoolObjects } from './objects';
import type { PoolCatalog } from './pool-catalog';
import { inCidr } from './pool-leases';

/** What the reconciler works with: the same pieces as the allocations, and the pools' locks. */
export interface ReconcilerParts {
  readonly options: ClusterIpamOptions;
  readonly ledger: BlockLedger;
  readonly catalog: PoolCatalog;
  readonly objects: PoolObjects;
  readonly claims: IpamClaims;
  readonly pooled: Ipam;
  readonly locks: KeyedMutex;
  readonly log: Logger;
}

export class BlockReconciler {
  /** Pool -> when this node first saw it named by no network and used by no block. */
  private readonly staleSince = new Map<string, number>();

  constructor(private readonly parts: ReconcilerParts) {}

  async reconcileOnce(): Promise<void> {
    const { options, log } = this.parts;
    // Two processes serving one node name would each return blocks the other allocates from: neither writes.
    const refused = options.liveness.refusal(options.nodeGraceMs);
    if (refused !== undefined) {
      log.warn({ reason: refused }, 'IPAM block reconciliation skipped');
      return;
    }
    const wanted = this.wantedPools();
    await this.holdBlocksOfLeases();
    await this.returnEmptyBlocks(wanted);
    if (wanted !== undefined) await this.collectStalePools(wanted);
    const dead = await this.deadNodes();
    if (dead === undefined) return;
    await this.releaseDeletedClaims(dead);
    await this.reclaimDeadNodesBlocks(dead);
  }

  /** The pools the API's networks name now; undefined when they are not known. */
  private wantedPools(): ReadonlySet<string> | undefined {
    const networks = this.parts.options.networks?.();
    if (networks === undefined) return undefined;
    const names = new Set<string>();
    for (const { network, config } of networks) {
      if (config.type !== 'cluster') continue;
      const layout = poolLayout(network, config);
      if (layout.ok) names.add(layout.value.name);
    }
    return names;
  }

  /**
   * Deletes the IPPools of deleted networks, so that they stop blocking new overlapping pools: a pool no network names
   * and no IPBlock uses (so no pod has an address of it) for the grace period, checked against etcd just before the
   * deletion, which is conditional on the pool's version. Layouts of pools no network names or that are gone are
   * forgotten first, so an ADD of a network naming one again reads it (or creates it, younger than any pool made since).
   */
  private async collectStalePools(wanted: ReadonlySet<string>): Promise<void> {
    const { objects, catalog, ledger, pooled, options, log } = this.parts;
    const listed = await objects.listPools();
    if (!listed.ok) return;
    const pools = (listed.value as { items?: PoolObject[] }).items ?? [];
    for (const name of catalog.known()) {
      const heldHere = ledger.heldBlocks().some((b) => b.pool === name);
      if (!heldHere && (!wanted.has(name) || !pools.some((p) => p.metadata?.name === name))) catalog.forget(name);
    }
    const used = new Set(ledger.list().map((b) => b.spec?.pool));
    const now = Date.now();
    const stale = new Set<string>();
    for (const pool of pools) {
      const { name, uid, resourceVersion } = pool.metadata ?? {};
      if (!name || !uid || !resourceVersion || wanted.has(name) || used.has(name)) continue;
      stale.add(name);
      const since = this.staleSince.get(name) ?? now;
      this.staleSince.set(name, since);
      if (now - since < options.nodeGraceMs || (await pooled.leases(name)).length > 0) continue;
      const blocks = await objects.listBlocks();
      if (!blocks.ok || ((blocks.value as { items?: BlockObject[] }).items ?? []).some((b) => b.spec?.pool === name))
        continue;
      const r = await objects.deletePool(name, uid, resourceVersion);
      if (r.ok)
        log.info({ pool: name, ranges: pool.spec?.ranges }, 'deleted a pool no network names and no block uses');
      else if (r.error.status !== 404 && r.error.status !== 409)
        log.warn({ pool: name, err: r.error.message }, 'could not delete an unused pool; the next pass retries');
    }
    for (const name of [...this.staleSince.keys()]) if (!stale.has(name)) this.staleSince.delete(name);
  }

  /**
   * The nodes named by blocks or claim entries that are proven dead: no Node object, and their liveness (a Lease) expired
   * for the grace period. A Node deleted by hand or by an autoscaler while its plexusd and pods still run is not dead.
   * Undefined when the Nodes cannot be listed.
   */
  private async deadNodes(): Promise<ReadonlySet<string> | undefined> {
    const { objects, ledger, options } = this.parts;
    const listed = await objects.listNodes();
    if (!listed.ok) return undefined;
    const nodes = new Set(
      ((listed.value as { items?: { metadata?: { name?: string } }[] }).items ?? []).map((n) => n.metadata?.name ?? ''),
    );
    const named = new Set<string>();
    for (const block of ledger.list()) {
      if (block.spec?.node) named.add(block.spec.node);
      for (const entry of block.spec?.claims ?? []) for (const n of entry.nodes) named.add(n);
    }
    const dead = new Set<string>();
    for (const node of named) {
      if (node === options.node || nodes.has(node)) continue;
      const expired = await options.liveness.expiredForMs(node);
      if (expired !== undefined && expired >= options.nodeGraceMs) dead.add(node);
    }
    return dead;
  }

  /**
   * Frees the addresses of deleted IPAMClaims, never one a pod still uses. An entry whose claim is gone (404, or a new
   * object under its name) loses the nodes that have no lease on it any more (each node answers for itself, under the
   * pool's lock, so an ADD in flight here is not missed) and those whose Node has been gone for the grace period; with
   * no node left, the entry goes and the block's node may hand the address out again. This node looks at the entries
   * of its blocks, those that list it, and those of blocks whose node is gone.
   */
  private async releaseDeletedClaims(dead: ReadonlySet<string>): Promise<void> {
    const { ledger, options, locks } = this.parts;
    const isGone = this.claimGoneCheck();
    for (const cached of ledger.list()) {
      const name = cached.metadata?.name ?? '';
      const pool = cached.spec?.pool ?? '';
      const holder = cached.spec?.node ?? '';
      const mine = holder === options.node;
      const orphaned = !mine && dead.has(holder);
      const relevant = ledger.entriesOf(name).filter((e) => mine || orphaned || e.nodes.includes(options.node));
      if (relevant.length === 0) continue;
      const gone: ClaimEntry[] = [];
      for (const entry of relevant) if ((await isGone(entry)) === true) gone.push(entry);
      if (gone.length === 0) continue;
      await locks.run(pool, () => this.dropUsers(name, pool, gone, dead));
    }
  }

  /** Whether an entry's claim is gone (true), still there (false) or cannot be told now (undefined); asked once each. */
  private claimGoneCheck(): (entry: ClaimEntry) => Promise<boolean | undefined> {
    const claimGone = new Map<string, boolean | undefined>();
    return async (entry) => {
      const cacheKey = `${entry.claim}\u0000${entry.claimUid}`;
      if (claimGone.has(cacheKey)) return claimGone.get(cacheKey);
      const ref = parseClaimKey(entry.claim);
      const got = ref ? await this.parts.claims.get(ref) : undefined;
      const gone =
        got === undefined
          ? true
          : got.ok
            ? (got.value as ClaimObject).metadata?.uid !== entry.claimUid
            : got.error.status === 404
              ? true
              : undefined;
      claimGone.set(cacheKey, gone);
      return gone;
    };
  }

  /** Under the pool's lock: the entries of `gone` claims in block `name` lose the users that no longer use them. */
  private async dropUsers(
    name: string,
    pool: string,
    gone: readonly ClaimEntry[],
    dead: ReadonlySet<string>,
  ): Promise<void> {
    const { objects, ledger, pooled, options, log } = this.parts;
    const leased = new Set((await pooled.leases(pool)).map((l) => l.address.split('/')[0]));
    const got = await objects.getBlock(name);
    if (!got.ok) return;
    const object = got.value as BlockObject;
    const entries = object.spec?.claims ?? [];
    const next: ClaimEntry[] = [];
    for (const entry of entries) {
      if (!gone.some((g) => g.address === entry.address && g.claimUid === entry.claimUid)) {
        next.push(entry);
        continue;
      }
      const users = entry.nodes.filter((n) => (n === options.node ? leased.has(entry.address) : !dead.has(n)));
      if (users.length > 0) next.push({ ...entry, nodes: users });
      else log.info({ pool, address: entry.address, claim: entry.claim }, 'freed the address of a deleted IPAMClaim');
    }
    if (next.length === entries.length && next.every((e, i) => e.nodes.length === entries[i]?.nodes.length)) return;
    const put = await objects.updateBlock({ ...object, spec: { ...object.spec, claims: next } });
    if (put.ok) ledger.noteWritten(put.value as BlockObject);
    else
      log.warn(
        { pool, block: object.spec?.cidr, err: put.error.message },
        'could not update the IPAMClaim entries of a block; the next pass retries',
      );
  }

  /**
   * Every local lease must lie in a block this node holds. One that does not (its block was reclaimed while this
   * daemon was away, or deleted by hand) has its block claimed again; if another node has it, that is reported loudly:
   * both nodes may then hand out its addresses, and an operator must move one of them.
   */
  private async holdBlocksOfLeases(): Promise<void> {
    const { ledger, catalog, pooled, locks, log } = this.parts;
    const byPool = new Map<string, Lease[]>();
    for (const lease of await pooled.leases()) byPool.set(lease.network, [...(byPool.get(lease.network) ?? []), lease]);
    for (const [pool, leases] of byPool) {
      const held = ledger.heldBlocks().filter((b) => b.pool === pool);
      // A claim's address may lie in any node's block: its entry there, not this node's block, keeps it.
      const strays = leases.filter((l) => l.owner?.claim === undefined && !held.some((b) => inCidr(b.cidr, l)));
      if (strays.length === 0) continue;
      const layout = await catalog.layoutOf(pool);
      if (!layout.ok) {
        log.warn(
          { pool, err: layout.error.message },
          "leases outside this node's blocks, and the pool cannot be read; the next pass retries",
        );
        continue;
      }
      await locks.run(pool, () => this.holdBlocksOf(layout.value, strays));
    }
  }

  /** Under the pool's lock: claims the blocks of leases outside this node's blocks. */
  private async holdBlocksOf(layout: PoolLayout, strays: readonly Lease[]): Promise<void> {
    const { ledger, log } = this.parts;
    const pool = layout.name;
    for (const lease of strays) {
      const ip = parseCidr(lease.address);
      const block = ip && blockOf(layout, ip);
      if (!block?.ok || ledger.holds(block.value.name)) continue;
      const claimed = await ledger.claim(layout, block.value);
      if (claimed.ok && claimed.value && ledger.regained(block.value.name)) {
        log.warn(
          { pool, block: block.value.cidr },
          'claimed again a block deleted under this node while its pods had addresses in it; allocating in the pool again',
        );
      }
      if (claimed.ok && !claimed.value) {
        const holder = ledger.holderOf(block.value.name) ?? 'another node';
        log.error(
          { pool, block: block.value.cidr, holder, lease: lease.address },
          'a lease of this node is in a block another node holds',
        );
      }
    }
  }

  /**
   * Gives back blocks with no lease, keeping one per pool and family so the next pod needs no claim. Under the
   * pool's lock, so no allocation is choosing among the blocks meanwhile.
   */
  private async returnEmptyBlocks(wanted: ReadonlySet<string> | undefined): Promise<void> {
    const { ledger, locks } = this.parts;
    const pools = new Set(ledger.heldBlocks().map((b) => b.pool));
    for (const pool of pools) await locks.run(pool, () => this.returnEmptyBlocksOf(pool, wanted));
  }

  private async returnEmptyBlocksOf(pool: string, wanted: ReadonlySet<string> | undefined): Promise<void> {
    const { ledger, pooled, log } = this.parts;
    const leases = await pooled.leases(pool);
    const mine = ledger
      .heldBlocks()
      .filter((b) => b.pool === pool)
      .sort((a, b) => (a.name < b.name ? -1 : 1));
    const used = (block: HeldBlock): boolean => {
      const cidr = parseCidr(block.cidr);
      return cidr === undefined || leases.some((l) => inCidr(block.cidr, l)) || ledger.entriesOf(block.name).length > 0;
    };
    const family = (block: HeldBlock): string => (block.cidr.includes(':') ? 'v6' : 'v4');
    // Each family keeps one block: a used one if it has any, else its first empty one; a pool no network names
    // keeps none, so that it can go (collectStalePools).
    const kept = new Set(wanted === undefined || wanted.has(pool) ? mine.filter(used).map(family) : ['v4', 'v6']);
    for (const block of mine) {
      if (used(block)) continue;
      if (!kept.has(family(block))) {
        kept.add(family(block));
        continue;
      }
      const r = await ledger.giveBack(block);
      if (r.ok) log.info({ pool, block: block.cidr }, 'returned an empty block');
      else
        log.warn(
          { pool, block: block.cidr, err: r.error.message },
          'could not return an empty block; the next pass retries',
        );
    }
  }

  /**
   * Blocks whose Node has been gone from the API for the grace period go back to the pool. The Node's absence is
   * confirmed by a GET before each deletion, and the deletion is conditional on the block being unchanged.
   */
  private async reclaimDeadNodesBlocks(dead: ReadonlySet<string>): Promise<void> {
    const { ledger, objects, log } = this.parts;
    for (const block of ledger.list()) {
      const node = block.spec?.node;
      const { name, uid, resourceVersion } = block.metadata ?? {};
      if (!node || !dead.has(node) || !name || !uid || !resourceVersion) continue;
      // A block with claim entries stays until they are freed (releaseDeletedClaims): deleting it would forget them.
      if (ledger.entriesOf(name).length > 0) continue;
      const confirmed = await objects.getNode(node);
      if (confirmed.ok || confirmed.error.status !== 404) continue;
      const r = await objects.deleteBlock(name, uid, resourceVersion);
      if (r.ok)
        log.info(
          { block: block.spec?.cidr, pool: block.spec?.pool, node },
          'reclaimed a block of a dead node (no Node object, its lease expired)',
        );
    }
  }
}
