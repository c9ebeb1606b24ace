/**
 * Cluster-wide IPAM on the Kubernetes API, with no cluster-wide lock: a network's pool is cut into blocks
 * (blocks.ts); this node claims a block by creating its IPBlock object under a deterministic name (the API server lets
 * one creator win), then allocates inside its own blocks locally and durably, in the same lease files as host-local
 * (one directory per pool), with no API request per pod. When its blocks of a range set are full it claims another;
 * empty blocks beyond one per pool and family go back. Leases record the pod (UID, name) and the network.
 *
 * An attachment whose selection names an IPAMClaim (claims.ts) gets the claim's addresses, wherever they lie, and
 * new ones are recorded in their block and on the claim: see allocateForClaim.
 *
 * Host-local and static networks go to the embedded allocator unchanged, so this is the node's one IpamBackend.
 */
import type { Logger } from 'pino';
import { join } from 'node:path';
import { CniCode, CniError, err, ok, type Result } from '../../cni/errors';
import { contains, formatIp, parseCidr } from '../../common/ip';
import { KeyedMutex } from '../../common/keyed-mutex';
import { Ipam } from '../allocator';
import type { IpamBackend, IpamRequest, IpamResult } from '../backend';
import { claimNeedsClusterPool } from '../errors';
import { IPAM_ADDRESS_IN_USE, IPAM_POOL_EXHAUSTED } from '../codes';
import type { ClusterIpamConfig, IpamConfig } from '../config';
import type { Lease } from '../lease';
import { type PoolBlock, type PoolLayout, blockByCidr, blockOf, blocksOf, poolLayout, poolsOverlap, spreadOf, withoutAddresses } from './blocks';
import { type ClaimedAddress, type ClaimObject, type ClaimRef, IpamClaims, claimKey, claimedInPool, missingClaim, parseClaimKey, statusIpsWith } from './claims';
import { type BlockObject, type ClaimEntry, BLOCKS_PATH, IPAM_GROUP_VERSION, type PoolObject, PoolObjects, type PoolSpec, apiError } from './objects';
import type { ClusterApi, WatchedObjects } from './api-port';
import type { NodeLiveness } from './node-liveness';
import { blockLost, notServing, overlapsOlder } from './refusals';

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

/** A block this node allocated from that someone else deleted while some of its addresses are leased here. */
interface LostBlock {
  readonly pool: string;
  readonly cidr: string;
}

/** A block this node holds, with the version it was read at (the precondition of its deletion). */
interface HeldBlock {
  readonly pool: string;
  readonly name: string;
  readonly cidr: string;
  readonly uid: string;
  readonly resourceVersion: string;
}

/** Claims that got 409 in a row before the node gives up for now (the blocks cache is far behind). */
const MAX_LOST_RACES = 64;

/** JSON with sorted keys: the API server gives fields back in its own order. */
const canonical = (value: unknown): string =>
  JSON.stringify(value, (_key, v: unknown) => (v !== null && typeof v === 'object' && !Array.isArray(v) ? Object.fromEntries(Object.entries(v).sort(([a], [b]) => (a < b ? -1 : 1))) : v));

const specOf = (config: ClusterIpamConfig): PoolSpec => ({ ranges: config.ranges, exclude: config.exclude, blockPrefix: config.blockPrefix });

export class ClusterIpam implements IpamBackend {
  private readonly blocks: WatchedObjects<BlockObject>;
  private readonly objects: PoolObjects;
  private readonly claims: IpamClaims;
  /** Blocks as this node last wrote them (PUT), until the watch brings that version or a newer one. */
  private readonly written = new Map<string, BlockObject>();
  private readonly layouts = new Map<string, PoolLayout>();
  private readonly poolLoads = new Map<string, Promise<Result<PoolLayout>>>();
  /** Pool -> the canonical spec its layout was checked against the API with. */
  private readonly specs = new Map<string, string>();
  /** CNI network -> pool: which pool directory a release of the network looks in. */
  private readonly poolOfNetwork = new Map<string, string>();
  private readonly held = new Map<string, HeldBlock>();
  private readonly locks = new KeyedMutex();
  /** Blocks deleted under this node (not returned by it) while its pods may have addresses in them. */
  private readonly lost = new Map<string, LostBlock>();
  /** Blocks this node is deleting itself: their removal from the watch is no loss. */
  private readonly returning = new Set<string>();
  /** Pool -> when this node first saw it named by no network and used by no block. */
  private readonly staleSince = new Map<string, number>();
  private timer: NodeJS.Timeout | undefined;
  private reconciling: Promise<void> | undefined;
  private loaded: Promise<void> | undefined;
  private stopped = false;

  private constructor(
    private readonly local: Ipam,
    private readonly pooled: Ipam,
    private readonly client: ClusterApi,
    private readonly options: ClusterIpamOptions,
    private readonly log: Logger,
  ) {
    this.objects = new PoolObjects(client);
    this.claims = new IpamClaims(client);
    this.blocks = client.watch<BlockObject>(BLOCKS_PATH, 'ipblocks', {
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

  /** `local`: the node's host-local store; pooled leases live in `<stateDir>/ipam-pools/<pool>/`. */
  static async open(local: Ipam, stateDir: string, sync: boolean, client: ClusterApi, options: ClusterIpamOptions, log: Logger): Promise<ClusterIpam> {
    const ipam = new ClusterIpam(local, await Ipam.open(join(stateDir, 'ipam-pools'), { sync }), client, options, log.child({ component: 'cluster-ipam' }));
    // Before recovery runs: it releases the leases of ADDs a crash cut short, by network, from the journal.
    for (const lease of await ipam.pooled.leases()) ipam.poolOfNetwork.set(lease.owner?.network ?? lease.network, lease.network);
    return ipam;
  }

  /**
   * Starts loading the blocks and, once they are in memory, reconciling; resolves when they are loaded. When the API
   * does not serve the IPAM CRDs (not installed: a node whose networks are all host-local needs none), it resolves at
   * once and keeps trying in the background; cluster-IPAM allocations are refused with 11 until the blocks are loaded.
   */
  async start(): Promise<void> {
    this.loaded = this.blocks.start().then(async () => {
      if (this.stopped) return;
      for (const block of this.blocks.list()) this.remember(block);
      await this.reconcile();
      if (this.stopped) return;
      this.timer = setInterval(() => void this.reconcile(), this.options.reconcileMs);
      this.timer.unref();
    });
    const served = await this.client.request('GET', `/apis/${IPAM_GROUP_VERSION}`, 'discovery');
    if (!served.ok && served.error.status === 404) {
      this.log.warn(`the API does not serve ${IPAM_GROUP_VERSION} (deploy/crds/20-crd-ipam.yaml not applied): networks with cluster IPAM fail until it does`);
      return;
    }
    await this.loaded;
  }

  /** Resolves when the blocks are loaded and the first reconciliation is done (tests, benchmarks). */
  whenLoaded(): Promise<void> {
    return this.loaded ?? Promise.resolve();
  }

  /**
   * Stops reconciling; the promise resolves when the blocks' watch has ended, which is when the API client is closed
   * (after this call: see main.ts).
   */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    await this.reconciling;
    await this.blocks.stop();
  }

  async allocate(req: IpamRequest): Promise<Result<IpamResult>> {
    if (req.claim !== undefined && req.config.type !== 'cluster') return err(claimNeedsClusterPool(req.network, req.config.type));
    if (req.config.type !== 'cluster') return this.local.allocate(req);
    if (!this.blocks.ready) {
      return err(new CniError(CniCode.TryAgainLater, 'cluster IPAM has not loaded its IPBlocks from the Kubernetes API yet', 'is deploy/crds/20-crd-ipam.yaml applied, and the API reachable? plexusd logs "watching IPBlocks failed" meanwhile; the runtime retries'));
    }
    const refused = this.options.liveness.refusal(this.options.nodeGraceMs);
    if (refused !== undefined) return err(notServing(refused));
    const config = req.config;
    const layout = await this.poolFor(req.network, config);
    if (!layout.ok) return err(layout.error);
    this.poolOfNetwork.set(req.network, layout.value.name);
    const claim = req.claim;
    if (claim === undefined) return this.locks.run(layout.value.name, () => this.allocateInPool(req, config, layout.value));
    if (!req.pod?.namespace) {
      return err(new CniError(CniCode.InvalidEnvironment, `network ${req.network} names IPAMClaim ${claim}, but the runtime did not name the pod's namespace (K8S_POD_NAMESPACE), where the claim is looked up`));
    }
    const ref = { namespace: req.pod.namespace, name: claim };
    return this.locks.run(layout.value.name, () => this.allocateForClaim(req, config, layout.value, ref));
  }

  /**
   * `claimed`: the sets in which the attachment gets a claim's address (its block may be another node's: the claim's
   * entry there keeps that node from handing it out), not a new one.
   */
  private async allocateInPool(req: IpamRequest, config: ClusterIpamConfig, layout: PoolLayout, claimed: ReadonlyMap<number, ClaimedAddress> = new Map()): Promise<Result<IpamResult>> {
    const lost = await this.lostIn(layout.name);
    if (lost !== undefined) return err(blockLost(lost.block, layout.name, lost.leased));
    const requestedSets = new Set<number>(claimed.keys());
    for (const text of req.requestedIps ?? []) {
      const ip = parseCidr(text) ?? parseCidr(`${text}/${text.includes(':') ? 128 : 32}`);
      if (ip === undefined) return err(new CniError(CniCode.InvalidNetworkConfig, `requested IP ${JSON.stringify(text)} is not a valid IP address`));
      const block = blockOf(layout, ip);
      if (!block.ok) return block;
      const owner = this.entriesOf(block.value.name).find((e) => e.address === formatIp(ip.family, ip.value));
      if (owner !== undefined) return err(new CniError(IPAM_ADDRESS_IN_USE, `requested IP ${formatIp(ip.family, ip.value)} is owned by IPAMClaim ${owner.claim} in pool ${layout.name}`));
      requestedSets.add(block.value.set);
      const mine = await this.holdBlock(layout, block.value);
      if (!mine.ok) return mine;
    }
    // A set of which this node holds no block yet gets one first (the sets of a dual-stack pool at once).
    const unheld = [...layout.sets.keys()].filter((set) => !requestedSets.has(set) && this.heldIn(layout, set).length === 0);
    const claims = await Promise.all(unheld.map((set) => this.claimNext(layout, set, req.network)));
    const failedClaim = claims.find((c) => !c.ok);
    if (failedClaim) return failedClaim;
    // The common path allocates in the blocks held, reading no lease list (a retried ADD gets what it has: the
    // allocator is idempotent per owner). Only when they are full, once per block filled, are the leases counted to
    // find the sets that need another block.
    let result = await this.allocateInHeld(req, config, layout, claimed);
    if (result.ok || result.error.code !== IPAM_POOL_EXHAUSTED) return result;
    const leases = await this.pooled.leases(layout.name);
    let claimedAny = false;
    for (const set of layout.sets.keys()) {
      if (requestedSets.has(set)) continue;
      const blocks = this.heldIn(layout, set);
      // Addresses claims own count as used, whether or not a pod of this node has them now.
      const used = new Set([...leases.filter((l) => blocks.some((b) => inBlock(b, l))).map((l) => l.address.split('/')[0]), ...blocks.flatMap((b) => this.entriesOf(b.name).map((e) => e.address))]).size;
      const size = blocks.reduce((sum, b) => sum + b.size, 0n);
      if (BigInt(used) < size) continue;
      const claimed = await this.claimNext(layout, set, req.network);
      if (!claimed.ok) return claimed;
      claimedAny = true;
    }
    if (claimedAny) result = await this.allocateInHeld(req, config, layout, claimed);
    if (!result.ok && result.error.code === IPAM_POOL_EXHAUSTED) {
      return err(new CniError(IPAM_POOL_EXHAUSTED, `no free address in pool ${layout.name} (network ${req.network}): ${result.error.message}`));
    }
    return result;
  }

  /**
   * Allocates with host-local's rules inside the blocks this node holds, less the addresses claims own there (so this
   * node never hands one out, whichever node's pod uses it now); a claimed set gets the claim's address.
   */
  private async allocateInHeld(req: IpamRequest, config: ClusterIpamConfig, layout: PoolLayout, claimed: ReadonlyMap<number, ClaimedAddress>): Promise<Result<IpamResult>> {
    const ranges = layout.sets.map((_, set) => {
      const mine = claimed.get(set);
      return mine !== undefined ? mine.block.ranges : this.heldIn(layout, set).flatMap((b) => withoutAddresses(b.ranges, this.entriesOf(b.name).map((e) => e.address)));
    });
    const empty = ranges.findIndex((set) => set.length === 0);
    if (empty >= 0) return err(new CniError(IPAM_POOL_EXHAUSTED, `range set ${empty} of pool ${layout.name}: every address of this node's blocks is owned by an IPAMClaim`));
    const owner = {
      network: req.network,
      ...(req.pod?.uid ? { podUid: req.pod.uid } : {}),
      ...(req.pod?.namespace && req.pod.name ? { pod: `${req.pod.namespace}/${req.pod.name}` } : {}),
      ...(req.claim !== undefined && req.pod?.namespace ? { claim: `${req.pod.namespace}/${req.claim}` } : {}),
    };
    const derived: IpamConfig = { type: 'host-local', ranges, routes: config.routes, ...(config.dns ? { dns: config.dns } : {}) };
    const requestedIps = [...(req.requestedIps ?? []), ...[...claimed.values()].map((c) => c.address)];
    return this.pooled.allocate({ network: layout.name, containerId: req.containerId, ifname: req.ifname, config: derived, requestedIps, owner });
  }

  /**
   * An attachment whose addresses an IPAMClaim owns, under the pool's lock. In each range set: the claim's address if
   * it has one in this pool (its status.ips; else an entry for its UID in a block, left by an ADD cut between the two
   * writes below), wherever it lies; else a new one from this node's blocks, as any pod's. Then, before the ADD
   * answers: every address is an entry of its block that lists this node (a guarded update of that block, which may
   * be another node's), and new addresses are added to the claim's status.ips (guarded by its resourceVersion).
   *
   * Two pods using one claim at once (a KubeVirt live migration: source and target pods on two nodes) get the same
   * addresses: when both allocate a first address, the first status write wins, and the other node gives its new
   * addresses back and takes the winner's.
   */
  private async allocateForClaim(req: IpamRequest, config: ClusterIpamConfig, layout: PoolLayout, ref: ClaimRef): Promise<Result<IpamResult>> {
    for (let attempt = 0; ; attempt++) {
      const got = await this.claims.get(ref);
      if (!got.ok) return err(got.error.status === 404 ? missingClaim(ref, req.network) : apiError(`reading IPAMClaim ${claimKey(ref)}`, got.error));
      const claim = got.value as ClaimObject;
      const network = claim.spec?.network;
      if (network && network !== req.network) {
        return err(new CniError(CniCode.InvalidNetworkConfig, `IPAMClaim ${claimKey(ref)} is for network ${network}, not ${req.network}`, 'each network of the pod needs its own claim (spec.network is the network\'s CNI name)'));
      }
      const uid = claim.metadata?.uid ?? '';
      const claimed = claimedInPool(layout, claim.status?.ips ?? []);
      for (const block of this.blocks.list()) {
        if (block.spec?.pool !== layout.name) continue;
        for (const entry of this.entriesOf(block.metadata?.name ?? '')) {
          const ip = parseCidr(`${entry.address}/${entry.address.includes(':') ? 128 : 32}`);
          const found = entry.claimUid === uid && ip !== undefined ? blockOf(layout, ip) : undefined;
          if (found?.ok && !claimed.has(found.value.set)) claimed.set(found.value.set, { address: entry.address, block: found.value });
        }
      }
      for (const address of claimed.values()) {
        const used = await this.recordClaimUse(layout, address, ref, uid);
        if (!used.ok) return used;
      }
      const result = await this.allocateInPool(req, config, layout, claimed);
      if (!result.ok) return result;
      const fresh = result.value.ips.filter((ip) => ![...claimed.values()].some((c) => c.address === ip.address.split('/')[0]));
      // Those of an entry but not of status.ips too (an ADD cut between its two writes): the claim shows them.
      const unlisted = result.value.ips.filter((ip) => !(claim.status?.ips ?? []).some((x) => x.split('/')[0] === ip.address.split('/')[0]));
      if (unlisted.length === 0) return result;
      const undo = async (error: CniError): Promise<Result<never>> => {
        await this.pooled.release(layout.name, req.containerId, req.ifname);
        for (const ip of fresh) await this.forgetClaimUse(layout, ip.address.split('/')[0] ?? '', uid);
        return err(error);
      };
      for (const ip of fresh) {
        const text = ip.address.split('/')[0] ?? '';
        const block = blockOf(layout, parseCidr(ip.address)!);
        if (!block.ok) return undo(block.error);
        const recorded = await this.recordClaimUse(layout, { address: text, block: block.value }, ref, uid);
        if (!recorded.ok) return undo(recorded.error);
      }
      const status = { ...claim.status, ips: statusIpsWith(claim.status?.ips ?? [], unlisted.map((ip) => ip.address)), ownerPod: req.pod?.name ?? '' };
      const wrote = await this.claims.updateStatus(ref, claim, status);
      if (wrote.ok) {
        this.log.info({ claim: claimKey(ref), pool: layout.name, ips: status.ips }, 'recorded addresses on an IPAMClaim');
        return result;
      }
      // 409: the claim changed since it was read; another node may have given it addresses first. Read it again.
      const undone = await undo(apiError(`writing the status of IPAMClaim ${claimKey(ref)}`, wrote.error));
      if (wrote.error.status !== 409 || attempt >= 3) return undone;
    }
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

  /** The first lost block of a pool in which this node still has leases, and how many; lost blocks without are dropped. */
  private async lostIn(pool: string): Promise<{ readonly block: string; readonly leased: number } | undefined> {
    const lost = [...this.lost].filter(([, b]) => b.pool === pool);
    if (lost.length === 0) return undefined;
    const leases = await this.pooled.leases(pool);
    for (const [name, block] of lost) {
      const leased = leases.filter((l) => inCidr(block.cidr, l)).length;
      if (leased > 0 && !this.held.has(name)) return { block: `${block.cidr} (IPBlock ${name})`, leased };
      this.lost.delete(name);
    }
    return undefined;
  }

  /** A block's claim entries, as this node last saw or wrote them. */
  private entriesOf(name: string): readonly ClaimEntry[] {
    const cached = this.blocks.get('', name);
    const mine = this.written.get(name);
    const view = cached !== undefined && mine !== undefined ? newer(cached, mine) : (cached ?? mine);
    return view?.spec?.claims ?? [];
  }

  /**
   * Makes `address` an entry of its block owned by the claim, with this node among its users: a resourceVersion-guarded
   * update of the block object, read fresh, retried on conflict. No entry yet is allowed only in a block this node
   * holds (then the address must not be leased to anything else here), or in a block no node holds (this node claims
   * it first): a block of another node's that does not list the address may have it leased, unknown to the API, and
   * only that node could say.
   */
  private async recordClaimUse(layout: PoolLayout, { address, block }: ClaimedAddress, ref: ClaimRef, uid: string): Promise<Result<void>> {
    const key = claimKey(ref);
    for (let attempt = 0; attempt < 8; attempt++) {
      const got = await this.objects.getBlock(block.name);
      if (!got.ok && got.error.status === 404) {
        const claimed = await this.claim(layout, block);
        if (!claimed.ok) return claimed;
        continue;
      }
      if (!got.ok) return err(apiError(`reading block ${block.cidr} of pool ${layout.name}`, got.error));
      const object = got.value as BlockObject;
      const entries = object.spec?.claims ?? [];
      const entry = entries.find((e) => e.address === address);
      if (entry !== undefined && entry.claimUid !== uid) {
        return err(new CniError(IPAM_ADDRESS_IN_USE, `address ${address} of IPAMClaim ${key} is owned by IPAMClaim ${entry.claim} (another object) in pool ${layout.name}`));
      }
      if (entry === undefined) {
        const holder = object.spec?.node;
        if (holder !== this.options.node) {
          return err(new CniError(IPAM_ADDRESS_IN_USE, `address ${address} of IPAMClaim ${key} is in block ${block.cidr} of pool ${layout.name}, which node ${holder} holds and which does not record the claim: only that node knows whether the address is free`, 'delete the claim\'s status.ips to let it get a new address'));
        }
        const leased = (await this.pooled.leases(layout.name)).find((l) => l.address.split('/')[0] === address);
        if (leased !== undefined && leased.owner?.claim !== key) {
          return err(new CniError(IPAM_ADDRESS_IN_USE, `address ${address} of IPAMClaim ${key} is leased on this node to container ${leased.containerId} interface ${leased.ifname}`));
        }
      }
      if (entry?.nodes.includes(this.options.node)) return ok(undefined);
      const claims = entry !== undefined
        ? entries.map((e) => (e === entry ? { ...e, nodes: [...e.nodes, this.options.node] } : e))
        : [...entries, { address, claim: key, claimUid: uid, nodes: [this.options.node] }];
      const put = await this.objects.updateBlock({ ...object, spec: { ...object.spec, claims } });
      if (put.ok) {
        this.noteWritten(put.value as BlockObject);
        return ok(undefined);
      }
      if (put.error.status !== 409) return err(apiError(`recording IPAMClaim ${key} in block ${block.cidr}`, put.error));
    }
    return err(new CniError(CniCode.TryAgainLater, `block ${block.cidr} of pool ${layout.name} kept changing while IPAMClaim ${key} was recorded in it; try again`));
  }

  /** Undoes recordClaimUse of a new address (the ADD failed): the entry goes, if it is still the claim's alone. */
  private async forgetClaimUse(layout: PoolLayout, address: string, uid: string): Promise<void> {
    const ip = parseCidr(`${address}/${address.includes(':') ? 128 : 32}`);
    const block = ip && blockOf(layout, ip);
    if (!block?.ok) return;
    for (let attempt = 0; attempt < 4; attempt++) {
      const got = await this.objects.getBlock(block.value.name);
      if (!got.ok) return;
      const object = got.value as BlockObject;
      const entries = object.spec?.claims ?? [];
      const entry = entries.find((e) => e.address === address && e.claimUid === uid);
      if (entry === undefined || entry.nodes.some((n) => n !== this.options.node)) return;
      const put = await this.objects.updateBlock({ ...object, spec: { ...object.spec, claims: entries.filter((e) => e !== entry) } });
      if (put.ok) {
        this.noteWritten(put.value as BlockObject);
        return;
      }
      if (put.error.status !== 409) break;
    }
    // Left behind, it is harmless: the next ADD with the claim takes it, and deleting the claim frees it.
    this.log.warn({ pool: layout.name, address }, 'could not remove the entry of an IPAMClaim whose ADD failed; it is reused or freed with the claim');
  }

  private noteWritten(block: BlockObject): void {
    const name = block.metadata?.name;
    if (!name) return;
    this.written.set(name, block);
    this.remember(block);
  }

  /** The blocks of a set this node holds, in the pool's order. */
  private heldIn(layout: PoolLayout, set: number): PoolBlock[] {
    const blocks: PoolBlock[] = [];
    for (const held of this.held.values()) {
      if (held.pool !== layout.name) continue;
      const block = blockByCidr(layout, held.cidr);
      if (block !== undefined && block.set === set && block.name === held.name) blocks.push(block);
    }
    return blocks.sort((a, b) => (a.name < b.name ? -1 : 1));
  }

  /** Makes `block` this node's (a static address's block): ours already, or claimed now; another node's is refused. */
  private async holdBlock(layout: PoolLayout, block: PoolBlock): Promise<Result<void>> {
    if (this.held.has(block.name)) return ok(undefined);
    const other = this.blocks.get('', block.name)?.spec?.node;
    if (other === undefined) {
      const claimed = await this.claim(layout, block);
      if (!claimed.ok) return claimed;
      if (claimed.value) return ok(undefined);
    }
    const holder = other ?? this.blocks.get('', block.name)?.spec?.node ?? 'another node';
    return err(
      new CniError(IPAM_ADDRESS_IN_USE, `the requested address is in block ${block.cidr} of pool ${layout.name}, which node ${holder} holds: a static address can be given only on the node holding its block`),
    );
  }

  /** Claims the next free block of a set (creating its IPBlock); exhaustion names the pool and its ranges. */
  private async claimNext(layout: PoolLayout, set: number, network: string): Promise<Result<void>> {
    let lost = 0;
    for (const block of blocksOf(layout, set, spreadOf(this.options.node))) {
      if (this.held.has(block.name) || this.blocks.get('', block.name) !== undefined) continue;
      const claimed = await this.claim(layout, block);
      if (!claimed.ok) return claimed;
      if (claimed.value) return ok(undefined);
      if (++lost >= MAX_LOST_RACES) return err(new CniError(CniCode.TryAgainLater, `pool ${layout.name}: ${lost} blocks in a row were claimed by other nodes first; try again`));
    }
    const ranges = (layout.sets[set] ?? []).map((r) => `${r.path}`).join(', ');
    return err(new CniError(IPAM_POOL_EXHAUSTED, `pool ${layout.name} (network ${network}) is exhausted: every block of range set ${set} (${ranges}) is held by a node, and this node's are full`));
  }

  /** True when this node now holds the block, false when another node created it first. */
  private async claim(layout: PoolLayout, block: PoolBlock): Promise<Result<boolean>> {
    const created = await this.objects.createBlock(block.name, layout.name, block.cidr, this.options.node);
    if (created.ok) {
      this.remember(created.value as BlockObject);
      this.log.info({ pool: layout.name, block: block.cidr }, 'claimed a block');
      return ok(true);
    }
    if (created.error.status === 409) return ok(false);
    return err(apiError(`claiming block ${block.cidr} of pool ${layout.name}`, created.error));
  }

  private remember(block: BlockObject): void {
    const { name, uid, resourceVersion } = block.metadata ?? {};
    const { pool, cidr, node } = block.spec ?? {};
    if (node !== this.options.node || !name || !uid || !resourceVersion || !pool || !cidr) return;
    this.held.set(name, { name, uid, resourceVersion, pool, cidr });
  }

  /**
   * The pool of a network, its IPPool created if absent. Refused: a pool of that name with other ranges, or one that
   * overlaps another pool (the older pool keeps its addresses; equal ages go by name, so every node agrees).
   */
  private async poolFor(network: string, config: ClusterIpamConfig): Promise<Result<PoolLayout>> {
    const layout = poolLayout(network, config);
    if (!layout.ok) return layout;
    const name = layout.value.name;
    const spec = specOf(config);
    const known = this.layouts.get(name);
    if (known !== undefined && this.specs.get(name) === canonical(spec)) return ok(known);
    // The first ADDs of a pool arrive together: one of them reads (or creates) and checks it, the others wait for that.
    const key = `${name}\u0000${canonical(spec)}`;
    let loading = this.poolLoads.get(key);
    if (!loading) {
      loading = this.loadPool(network, layout.value, spec).finally(() => this.poolLoads.delete(key));
      this.poolLoads.set(key, loading);
    }
    return loading;
  }

  /**
   * Makes the pools of these networks known before their first ADD (at start, for the networks the API already
   * has), so a cold node's first pods do not wait for the pool to be read, created and checked for overlaps.
   * A pool that cannot be loaded is logged; its first ADD tries again and fails with the reason. One at a time, in the
   * order given: of two overlapping pools the one created first wins, so creation order must not be left to chance.
   */
  async preparePools(networks: readonly ClusterNetwork[]): Promise<void> {
    for (const { network, config } of networks) {
      if (this.stopped) return;
      if (config.type !== 'cluster') continue;
      const r = await this.poolFor(network, config);
      if (!r.ok) this.log.warn({ network, err: r.error.message }, 'cluster IPAM pool not ready; its first ADD tries again');
    }
  }

  private async loadPool(network: string, layout: PoolLayout, spec: PoolSpec): Promise<Result<PoolLayout>> {
    const name = layout.name;
    let got = await this.objects.getPool(name);
    if (!got.ok && got.error.status === 404) {
      const made = await this.objects.createPool(name, spec);
      got = made.ok || made.error.status !== 409 ? made : await this.objects.getPool(name);
    }
    if (!got.ok) return err(apiError(`reading IPPool ${name}`, got.error));
    const pool = got.value as PoolObject;
    if (canonical(pool.spec) !== canonical(spec)) {
      return err(new CniError(CniCode.InvalidNetworkConfig, `network ${network}: pool ${name} exists with other ranges (${JSON.stringify(pool.spec)}); a pool's ranges cannot change while it exists`));
    }
    const all = await this.objects.listPools();
    if (!all.ok) return err(apiError('listing IPPools', all.error));
    const age = (p: PoolObject): string => `${p.metadata?.creationTimestamp ?? ''}\u0000${p.metadata?.name ?? ''}`;
    for (const other of (all.value as { items?: PoolObject[] }).items ?? []) {
      if (other.metadata?.name === name || other.spec === undefined) continue;
      const overlap = poolsOverlap(spec.ranges, other.spec.ranges);
      if (overlap !== undefined && age(other) < age(pool)) {
        return err(overlapsOlder(network, name, other.metadata?.name ?? '', overlap.subnet));
      }
    }
    this.layouts.set(name, layout);
    this.specs.set(name, canonical(spec));
    return ok(layout);
  }

  async release(network: string, containerId: string, ifname: string): Promise<Result<readonly Lease[]>> {
    const released: Lease[] = [];
    const pool = this.poolOfNetwork.get(network);
    if (pool !== undefined) {
      const r = await this.locks.run(pool, () => this.pooled.release(pool, containerId, ifname));
      if (!r.ok) return r;
      released.push(...r.value.map(asAttachmentLease));
    }
    const r = await this.local.release(network, containerId, ifname);
    if (!r.ok) return r;
    return ok([...released, ...r.value]);
  }

  async leases(network?: string): Promise<readonly Lease[]> {
    const pooled = (await this.pooled.leases()).map(asAttachmentLease).filter((l) => network === undefined || l.network === network);
    return [...(await this.local.leases(network)), ...pooled];
  }

  async releaseUnless(keep: (lease: Lease) => boolean): Promise<readonly Lease[]> {
    const pooled = await this.pooled.releaseUnless((lease) => keep(asAttachmentLease(lease)));
    return [...(await this.local.releaseUnless(keep)), ...pooled.map(asAttachmentLease)];
  }

  /** One pass; passes never overlap. */
  reconcile(): Promise<void> {
    this.reconciling ??= this.reconcileOnce()
      .catch((e: unknown) => this.log.error({ err: e }, 'IPAM block reconciliation failed; the next pass retries'))
      .finally(() => {
        this.reconciling = undefined;
      });
    return this.reconciling;
  }

  private async reconcileOnce(): Promise<void> {
    // Two processes serving one node name would each return blocks the other allocates from: neither writes.
    const refused = this.options.liveness.refusal(this.options.nodeGraceMs);
    if (refused !== undefined) {
      this.log.warn({ reason: refused }, 'IPAM block reconciliation skipped');
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
    const networks = this.options.networks?.();
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
    const listed = await this.objects.listPools();
    if (!listed.ok) return;
    const pools = (listed.value as { items?: PoolObject[] }).items ?? [];
    for (const name of [...this.layouts.keys()]) {
      const heldHere = [...this.held.values()].some((b) => b.pool === name);
      if (!heldHere && (!wanted.has(name) || !pools.some((p) => p.metadata?.name === name))) {
        this.layouts.delete(name);
        this.specs.delete(name);
      }
    }
    const used = new Set(this.blocks.list().map((b) => b.spec?.pool));
    const now = Date.now();
    const stale = new Set<string>();
    for (const pool of pools) {
      const { name, uid, resourceVersion } = pool.metadata ?? {};
      if (!name || !uid || !resourceVersion || wanted.has(name) || used.has(name)) continue;
      stale.add(name);
      const since = this.staleSince.get(name) ?? now;
      this.staleSince.set(name, since);
      if (now - since < this.options.nodeGraceMs || (await this.pooled.leases(name)).length > 0) continue;
      const blocks = await this.objects.listBlocks();
      if (!blocks.ok || ((blocks.value as { items?: BlockObject[] }).items ?? []).some((b) => b.spec?.pool === name)) continue;
      const r = await this.objects.deletePool(name, uid, resourceVersion);
      if (r.ok) this.log.info({ pool: name, ranges: pool.spec?.ranges }, 'deleted a pool no network names and no block uses');
      else if (r.error.status !== 404 && r.error.status !== 409) this.log.warn({ pool: name, err: r.error.message }, 'could not delete an unused pool; the next pass retries');
    }
    for (const name of [...this.staleSince.keys()]) if (!stale.has(name)) this.staleSince.delete(name);
  }

  /**
   * The nodes named by blocks or claim entries that are proven dead: no Node object, and their liveness (a Lease) expired
   * for the grace period. A Node deleted by hand or by an autoscaler while its plexusd and pods still run is not dead.
   * Undefined when the Nodes cannot be listed.
   */
  private async deadNodes(): Promise<ReadonlySet<string> | undefined> {
    const listed = await this.objects.listNodes();
    if (!listed.ok) return undefined;
    const nodes = new Set(((listed.value as { items?: { metadata?: { name?: string } }[] }).items ?? []).map((n) => n.metadata?.name ?? ''));
    const named = new Set<string>();
    for (const block of this.blocks.list()) {
      if (block.spec?.node) named.add(block.spec.node);
      for (const entry of block.spec?.claims ?? []) for (const n of entry.nodes) named.add(n);
    }
    const dead = new Set<string>();
    for (const node of named) {
      if (node === this.options.node || nodes.has(node)) continue;
      const expired = await this.options.liveness.expiredForMs(node);
      if (expired !== undefined && expired >= this.options.nodeGraceMs) dead.add(node);
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
    const claimGone = new Map<string, boolean | undefined>();
    const isGone = async (entry: ClaimEntry): Promise<boolean | undefined> => {
      const cacheKey = `${entry.claim}\u0000${entry.claimUid}`;
      if (claimGone.has(cacheKey)) return claimGone.get(cacheKey);
      const ref = parseClaimKey(entry.claim);
      const got = ref ? await this.claims.get(ref) : undefined;
      const gone = got === undefined ? true : got.ok ? (got.value as ClaimObject).metadata?.uid !== entry.claimUid : got.error.status === 404 ? true : undefined;
      claimGone.set(cacheKey, gone);
      return gone;
    };
    for (const cached of this.blocks.list()) {
      const name = cached.metadata?.name ?? '';
      const pool = cached.spec?.pool ?? '';
      const holder = cached.spec?.node ?? '';
      const mine = holder === this.options.node;
      const orphaned = !mine && dead.has(holder);
      const relevant = this.entriesOf(name).filter((e) => mine || orphaned || e.nodes.includes(this.options.node));
      if (relevant.length === 0) continue;
      const gone: ClaimEntry[] = [];
      for (const entry of relevant) if ((await isGone(entry)) === true) gone.push(entry);
      if (gone.length === 0) continue;
      await this.locks.run(pool, async () => {
        const leased = new Set((await this.pooled.leases(pool)).map((l) => l.address.split('/')[0]));
        const got = await this.objects.getBlock(name);
        if (!got.ok) return;
        const object = got.value as BlockObject;
        const entries = object.spec?.claims ?? [];
        const next: ClaimEntry[] = [];
        for (const entry of entries) {
          if (!gone.some((g) => g.address === entry.address && g.claimUid === entry.claimUid)) {
            next.push(entry);
            continue;
          }
          const users = entry.nodes.filter((n) => (n === this.options.node ? leased.has(entry.address) : !dead.has(n)));
          if (users.length > 0) next.push({ ...entry, nodes: users });
          else this.log.info({ pool, address: entry.address, claim: entry.claim }, 'freed the address of a deleted IPAMClaim');
        }
        if (next.length === entries.length && next.every((e, i) => e.nodes.length === entries[i]?.nodes.length)) return;
        const put = await this.objects.updateBlock({ ...object, spec: { ...object.spec, claims: next } });
        if (put.ok) this.noteWritten(put.value as BlockObject);
        else this.log.warn({ pool, block: object.spec?.cidr, err: put.error.message }, 'could not update the IPAMClaim entries of a block; the next pass retries');
      });
    }
  }

  /**
   * Every local lease must lie in a block this node holds. One that does not (its block was reclaimed while this
   * daemon was away, or deleted by hand) has its block claimed again; if another node has it, that is reported loudly:
   * both nodes may then hand out its addresses, and an operator must move one of them.
   */
  private async holdBlocksOfLeases(): Promise<void> {
    const byPool = new Map<string, Lease[]>();
    for (const lease of await this.pooled.leases()) byPool.set(lease.network, [...(byPool.get(lease.network) ?? []), lease]);
    for (const [pool, leases] of byPool) {
      const held = [...this.held.values()].filter((b) => b.pool === pool);
      // A claim's address may lie in any node's block: its entry there, not this node's block, keeps it.
      const strays = leases.filter((l) => l.owner?.claim === undefined && !held.some((b) => inCidr(b.cidr, l)));
      if (strays.length === 0) continue;
      const layout = await this.layoutOf(pool);
      if (!layout.ok) {
        this.log.warn({ pool, err: layout.error.message }, 'leases outside this node\'s blocks, and the pool cannot be read; the next pass retries');
        continue;
      }
      await this.locks.run(pool, async () => {
        for (const lease of strays) {
          const ip = parseCidr(lease.address);
          const block = ip && blockOf(layout.value, ip);
          if (!block?.ok || this.held.has(block.value.name)) continue;
          const claimed = await this.claim(layout.value, block.value);
          if (claimed.ok && claimed.value && this.lost.delete(block.value.name)) {
            this.log.warn({ pool, block: block.value.cidr }, 'claimed again a block deleted under this node while its pods had addresses in it; allocating in the pool again');
          }
          if (claimed.ok && !claimed.value) {
            const holder = this.blocks.get('', block.value.name)?.spec?.node ?? 'another node';
            this.log.error({ pool, block: block.value.cidr, holder, lease: lease.address }, 'a lease of this node is in a block another node holds');
          }
        }
      });
    }
  }

  /** A pool's layout, from memory or from its IPPool object. */
  private async layoutOf(pool: string): Promise<Result<PoolLayout>> {
    const known = this.layouts.get(pool);
    if (known !== undefined) return ok(known);
    const got = await this.objects.getPool(pool);
    if (!got.ok) return err(apiError(`reading IPPool ${pool}`, got.error));
    const spec = (got.value as PoolObject).spec;
    if (spec === undefined) return err(new CniError(CniCode.IoFailure, `IPPool ${pool} has no spec`));
    return poolLayout(pool, { type: 'cluster', flavour: 'plexus', pool, ranges: spec.ranges, exclude: spec.exclude, blockPrefix: spec.blockPrefix, routes: [] });
  }

  /**
   * Gives back blocks with no lease, keeping one per pool and family so the next pod needs no claim. Under the
   * pool's lock, so no allocation is choosing among the blocks meanwhile.
   */
  private async returnEmptyBlocks(wanted: ReadonlySet<string> | undefined): Promise<void> {
    const pools = new Set([...this.held.values()].map((b) => b.pool));
    for (const pool of pools) {
      await this.locks.run(pool, async () => {
        const leases = await this.pooled.leases(pool);
        const mine = [...this.held.values()].filter((b) => b.pool === pool).sort((a, b) => (a.name < b.name ? -1 : 1));
        const used = (block: HeldBlock): boolean => {
          const cidr = parseCidr(block.cidr);
          return cidr === undefined || leases.some((l) => inCidr(block.cidr, l)) || this.entriesOf(block.name).length > 0;
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
          this.returning.add(block.name);
          const r = await this.objects.deleteBlock(block.name, block.uid, block.resourceVersion).finally(() => this.returning.delete(block.name));
          if (r.ok || r.error.status === 404) {
            this.held.delete(block.name);
            this.log.info({ pool, block: block.cidr }, 'returned an empty block');
          } else this.log.warn({ pool, block: block.cidr, err: r.error.message }, 'could not return an empty block; the next pass retries');
        }
      });
    }
  }

  /**
   * Blocks whose Node has been gone from the API for the grace period go back to the pool. The Node's absence is
   * confirmed by a GET before each deletion, and the deletion is conditional on the block being unchanged.
   */
  private async reclaimDeadNodesBlocks(dead: ReadonlySet<string>): Promise<void> {
    for (const block of this.blocks.list()) {
      const node = block.spec?.node;
      const { name, uid, resourceVersion } = block.metadata ?? {};
      if (!node || !dead.has(node) || !name || !uid || !resourceVersion) continue;
      // A block with claim entries stays until they are freed (releaseDeletedClaims): deleting it would forget them.
      if (this.entriesOf(name).length > 0) continue;
      const confirmed = await this.objects.getNode(node);
      if (confirmed.ok || confirmed.error.status !== 404) continue;
      const r = await this.objects.deleteBlock(name, uid, resourceVersion);
      if (r.ok) this.log.info({ block: block.spec?.cidr, pool: block.spec?.pool, node }, 'reclaimed a block of a dead node (no Node object, its lease expired)');
    }
  }
}

/** The later of two versions of one block (resourceVersions are etcd revisions: numbers, in practice). */
function newer(a: BlockObject, b: BlockObject): BlockObject {
  try {
    return BigInt(a.metadata?.resourceVersion ?? '0') >= BigInt(b.metadata?.resourceVersion ?? '0') ? a : b;
  } catch {
    return a;
  }
}

/** A pooled lease as the engine knows it: under its attachment's network, not its pool's directory. */
const asAttachmentLease = (lease: Lease): Lease => (lease.owner?.network !== undefined ? { ...lease, network: lease.owner.network } : lease);

const inBlock = (block: PoolBlock, lease: Lease): boolean => inCidr(block.cidr, lease);

function inCidr(text: string, lease: Lease): boolean {
  const cidr = parseCidr(text);
  const ip = parseCidr(lease.address);
  return cidr !== undefined && ip !== undefined && contains(cidr, ip);
}
