/**
 * This node's view of the pool's IPBlocks: every block, watched on the API; the blocks this node holds, with the
 * version each was read at (the precondition of giving it back); the blocks it wrote but the watch has not brought
 * back yet; and the blocks deleted under it while its pods had addresses there (lost: no allocation in their pool
 * until it holds them again). Claiming a block is creating its IPBlock: the API server lets one creator win.
 */
import type { Logger } from 'pino';
import { CniCode, CniError, err, ok, type Result } from '../../cni/errors';
import { IPAM_ADDRESS_IN_USE, IPAM_POOL_EXHAUSTED } from '../codes';
import type { Lease } from '../lease';
import type { ClusterApi, WatchedObjects } from './api-port';
import { type PoolBlock, type PoolLayout, blockByCidr, blocksOf, spreadOf } from './blocks';
import { type BlockObject, type ClaimEntry, BLOCKS_PATH, type PoolObjects, apiError } from './objects';
import { inCidr } from './pool-leases';

/** A block this node holds, with the version it was read at (the precondition of its deletion). */
export interface HeldBlock {
  readonly pool: string;
  readonly name: string;
  readonly cidr: string;
  readonly uid: string;
  readonly resourceVersion: string;
}

/** A block this node allocated from that someone else deleted while some of its addresses are leased here. */
interface LostBlock {
  readonly pool: string;
  readonly cidr: string;
}

/** Claims that got 409 in a row before the node gives up for now (the blocks cache is far behind). */
const MAX_LOST_RACES = 64;

/** The later of two versions of one block (resourceVersions are etcd revisions: numbers, in practice). */
function newer(a: BlockObject, b: BlockObject): BlockObject {
  try {
    return BigInt(a.metadata?.resourceVersion ?? '0') >= BigInt(b.metadata?.resourceVersion ?? '0') ? a : b;
  } catch {
    return a;
  }
}

export class BlockLedger {
  private readonly blocks: WatchedObjects<BlockObject>;
  /** Blocks as this node last wrote them (PUT), until the watch brings that version or a newer one. */
  private readonly written = new Map<string, BlockObject>();
  private readonly held = new Map<string, HeldBlock>();
  /** Blocks deleted under this node (not returned by it) while its pods may have addresses in them. */
  private readonly lost = new Map<string, LostBlock>();
  /** Blocks this node is deleting itself: their removal from the watch is no loss. */
  private readonly returning = new Set<string>();

  constructor(
    api: ClusterApi,
    private readonly objects: PoolObjects,
    private readonly node: string,
    private readonly log: Logger,
  ) {
    this.blocks = api.watch<BlockObject>(BLOCKS_PATH, 'ipblocks', {
      error: (message) => log.warn({ err: message }, 'watching IPBlocks failed; retrying'),
      upsert: (block) => {
        const name = block.metadata?.name ?? '';
        const mine = this.written.get(name);
        if (mine !== undefined && newer(block, mine) === block) this.written.delete(name);
        // Its claim entries change the block's version: the precondition of returning it must follow.
        if (this.held.get(name)?.uid === block.metadata?.uid) this.remember(newer(block, mine ?? block));
      },
      remove: (block) => {
        const name = block.metadata?.name ?? '';
        const held = this.held.get(name);
        if (held?.uid === block.metadata?.uid) {
          this.held.delete(name);
          if (held !== undefined && !this.returning.has(name)) this.noteLost(held);
        }
        this.written.delete(name);
      },
    });
  }

  /** True once the blocks are in memory. */
  get ready(): boolean {
    return this.blocks.ready;
  }

  /** Starts watching; resolves when the blocks are in memory and those of this node remembered. */
  async start(): Promise<void> {
    await this.blocks.start();
    for (const block of this.blocks.list()) this.remember(block);
  }

  stop(): Promise<void> {
    return this.blocks.stop();
  }

  /** Every block of every pool, as the watch has them. */
  list(): BlockObject[] {
    return this.blocks.list();
  }

  /** The node a block's object names, undefined when there is none. */
  holderOf(name: string): string | undefined {
    return this.blocks.get('', name)?.spec?.node;
  }

  /** The blocks this node holds. */
  heldBlocks(): HeldBlock[] {
    return [...this.held.values()];
  }

  holds(name: string): boolean {
    return this.held.has(name);
  }

  /** A block's claim entries, as this node last saw or wrote them. */
  entriesOf(name: string): readonly ClaimEntry[] {
    const cached = this.blocks.get('', name);
    const mine = this.written.get(name);
    const view = cached !== undefined && mine !== undefined ? newer(cached, mine) : (cached ?? mine);
    return view?.spec?.claims ?? [];
  }

  /** The blocks of a set this node holds, in the pool's order. */
  heldIn(layout: PoolLayout, set: number): PoolBlock[] {
    const blocks: PoolBlock[] = [];
    for (const held of this.held.values()) {
      if (held.pool !== layout.name) continue;
      const block = blockByCidr(layout, held.cidr);
      if (block !== undefined && block.set === set && block.name === held.name) blocks.push(block);
    }
    return blocks.sort((a, b) => (a.name < b.name ? -1 : 1));
  }

  /** A block as this node just wrote it (its claim entries). */
  noteWritten(block: BlockObject): void {
    const name = block.metadata?.name;
    if (!name) return;
    this.written.set(name, block);
    this.remember(block);
  }

  /** True when this node now holds the block, false when another node created it first. */
  async claim(layout: PoolLayout, block: PoolBlock): Promise<Result<boolean>> {
    const created = await this.objects.createBlock(block.name, layout.name, block.cidr, this.node);
    if (created.ok) {
      this.remember(created.value as BlockObject);
      this.log.info({ pool: layout.name, block: block.cidr }, 'claimed a block');
      return ok(true);
    }
    if (created.error.status === 409) return ok(false);
    return err(apiError(`claiming block ${block.cidr} of pool ${layout.name}`, created.error));
  }

  /** Claims the next free block of a set (creating its IPBlock); exhaustion names the pool and its ranges. */
  async claimNext(layout: PoolLayout, set: number, network: string): Promise<Result<void>> {
    let lost = 0;
    for (const block of blocksOf(layout, set, spreadOf(this.node))) {
      if (this.held.has(block.name) || this.blocks.get('', block.name) !== undefined) continue;
      const claimed = await this.claim(layout, block);
      if (!claimed.ok) return claimed;
      if (claimed.value) return ok(undefined);
      if (++lost >= MAX_LOST_RACES)
        return err(
          new CniError(
            CniCode.TryAgainLater,
            `pool ${layout.name}: ${lost} blocks in a row were claimed by other nodes first; try again`,
          ),
        );
    }
    const ranges = (layout.sets[set] ?? []).map((r) => `${r.path}`).join(', ');
    return err(
      new CniError(
        IPAM_POOL_EXHAUSTED,
        `pool ${layout.name} (network ${network}) is exhausted: every block of range set ${set} (${ranges}) is held by a node, and this node's are full`,
      ),
    );
  }

  /** Makes `block` this node's (a static address's block): ours already, or claimed now; another node's is refused. */
  async hold(layout: PoolLayout, block: PoolBlock): Promise<Result<void>> {
    if (this.held.has(block.name)) return ok(undefined);
    const other = this.blocks.get('', block.name)?.spec?.node;
    if (other === undefined) {
      const claimed = await this.claim(layout, block);
      if (!claimed.ok) return claimed;
      if (claimed.value) return ok(undefined);
    }
    const holder = other ?? this.blocks.get('', block.name)?.spec?.node ?? 'another node';
    return err(
      new CniError(
        IPAM_ADDRESS_IN_USE,
        `the requested address is in block ${block.cidr} of pool ${layout.name}, which node ${holder} holds: a static address can be given only on the node holding its block`,
      ),
    );
  }

  /** Deletes a block this node holds (conditional on its version); true when it is gone. */
  async giveBack(block: HeldBlock): Promise<Result<void, { readonly message: string }>> {
    this.returning.add(block.name);
    const r = await this.objects
      .deleteBlock(block.name, block.uid, block.resourceVersion)
      .finally(() => this.returning.delete(block.name));
    if (!r.ok && r.error.status !== 404) return r;
    this.held.delete(block.name);
    return ok(undefined);
  }

  /** A block claimed again: if it was lost, it is no more. True when it was. */
  regained(name: string): boolean {
    return this.lost.delete(name);
  }

  /**
   * The first lost block of a pool in which this node still has leases (`leases`, the pool's), and how many; lost
   * blocks without are dropped.
   */
  lostIn(pool: string, leases: readonly Lease[]): { readonly block: string; readonly leased: number } | undefined {
    for (const [name, block] of [...this.lost].filter(([, b]) => b.pool === pool)) {
      const leased = leases.filter((l) => inCidr(block.cidr, l)).length;
      if (leased > 0 && !this.held.has(name)) return { block: `${block.cidr} (IPBlock ${name})`, leased };
      this.lost.delete(name);
    }
    return undefined;
  }

  /** Whether some block of the pool is lost (cheap: no lease read). */
  hasLost(pool: string): boolean {
    return [...this.lost.values()].some((b) => b.pool === pool);
  }

  private remember(block: BlockObject): void {
    const { name, uid, resourceVersion } = block.metadata ?? {};
    const { pool, cidr, node } = block.spec ?? {};
    if (node !== this.node || !name || !uid || !resourceVersion || !pool || !cidr) return;
    this.held.set(name, { name, uid, resourceVersion, pool, cidr });
  }

  /**
   * A block this node held was deleted by someone else (by hand, or by a node that took this one for dead): this node
   * stops allocating in its pool at once, and says so. Its pods' addresses in it may be handed out by whoever claims it
   * next; the reconciler claims it again if it is free (holdBlocksOfLeases).
   */
  private noteLost(held: HeldBlock): void {
    this.lost.set(held.name, { pool: held.pool, cidr: held.cidr });
    this.log.error(
      { pool: held.pool, block: held.cidr, ipblock: held.name },
      'a block this node allocates from was deleted by someone else: no more allocations in its pool until this node holds it again',
    );
  }
}
