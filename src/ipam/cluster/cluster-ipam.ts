/**
 * Cluster-wide IPAM on the Kubernetes API, with no cluster-wide lock: a network's pool is cut into blocks
 * (blocks.ts); this node claims a block by creating its IPBlock object under a deterministic name (the API server lets
 * one creator win: block-ledger.ts), then allocates inside its own blocks locally and durably, in the same lease files
 * as host-local (one directory per pool), with no API request per pod (pool-allocation.ts). When its blocks of a range
 * set are full it claims another; empty blocks beyond one per pool and family go back (reconciler.ts). Leases record
 * the pod (UID, name) and the network.
 *
 * An attachment whose selection names an IPAMClaim (claims.ts) gets the claim's addresses, wherever they lie, and
 * new ones are recorded in their block and on the claim: claim-allocation.ts.
 *
 * Host-local and static networks go to the embedded allocator unchanged, so this is the node's one IpamBackend.
 */
import type { Logger } from 'pino';
import { join } from 'node:path';
import { CniCode, CniError, err, ok, type Result } from '../../cni/errors';
import { KeyedMutex } from '../../common/keyed-mutex';
import { Ipam } from '../allocator';
import type { IpamBackend, IpamRequest, IpamResult } from '../backend';
import { claimNeedsClusterPool } from '../errors';
import type { Lease } from '../lease';
import type { ClusterApi } from './api-port';
import { BlockLedger } from './block-ledger';
import { ClaimAllocation } from './claim-allocation';
import { IpamClaims } from './claims';
import type { ClusterIpamOptions, ClusterNetwork } from './cluster-options';
import { IPAM_GROUP_VERSION, PoolObjects } from './objects';
import { PoolAllocation } from './pool-allocation';
import { PoolCatalog } from './pool-catalog';
import { asAttachmentLease } from './pool-leases';
import { BlockReconciler } from './reconciler';
import { notServing } from './refusals';
import { WhereaboutsHolds } from './whereabouts-holds';

export type { ClusterIpamOptions, ClusterNetwork } from './cluster-options';

const notLoaded = (): CniError =>
  new CniError(
    CniCode.TryAgainLater,
    'cluster IPAM has not loaded its IPBlocks from the Kubernetes API yet',
    'is deploy/crds/20-crd-ipam.yaml applied, and the API reachable? plexusd logs "watching IPBlocks failed" meanwhile; ' +
      'the runtime retries',
  );

const noNamespace = (network: string, claim: string): CniError =>
  new CniError(
    CniCode.InvalidEnvironment,
    `network ${network} names IPAMClaim ${claim}, but the runtime did not name the pod's namespace ` +
      '(K8S_POD_NAMESPACE), where the claim is looked up',
  );

const usesWhereabouts = ({ config }: ClusterNetwork): boolean =>
  config.type === 'cluster' && config.flavour === 'whereabouts';

export class ClusterIpam implements IpamBackend {
  private readonly ledger: BlockLedger;
  private readonly catalog: PoolCatalog;
  private readonly inPool: PoolAllocation;
  private readonly forClaim: ClaimAllocation;
  private readonly reconciler: BlockReconciler;
  /** What Whereabouts' own objects hold: never handed out in pools of Whereabouts configs. */
  private readonly whereabouts: WhereaboutsHolds;
  /** CNI network -> pool: which pool directory a release of the network looks in. */
  private readonly poolOfNetwork = new Map<string, string>();
  private readonly locks = new KeyedMutex();
  private timer: NodeJS.Timeout | undefined;
  private reconciling: Promise<void> | undefined;
  private loaded: Promise<void> | undefined;
  private stopped = false;

  private constructor(
    private readonly local: Ipam,
    private readonly pooled: Ipam,
    private readonly api: ClusterApi,
    private readonly options: ClusterIpamOptions,
    private readonly log: Logger,
  ) {
    const objects = new PoolObjects(api);
    const claims = new IpamClaims(api);
    this.ledger = new BlockLedger(api, objects, options.node, log);
    this.catalog = new PoolCatalog(objects);
    this.whereabouts = new WhereaboutsHolds(api, log);
    this.inPool = new PoolAllocation(this.ledger, pooled, this.whereabouts);
    const parts = { node: options.node, claims, objects, ledger: this.ledger, pooled, log };
    this.forClaim = new ClaimAllocation({ ...parts, inPool: this.inPool });
    this.reconciler = new BlockReconciler({ ...parts, options, catalog: this.catalog, locks: this.locks });
  }

  /** `local`: the node's host-local store; pooled leases live in `<stateDir>/ipam-pools/<pool>/`. */
  static async open(
    local: Ipam,
    stateDir: string,
    sync: boolean,
    api: ClusterApi,
    options: ClusterIpamOptions,
    log: Logger,
  ): Promise<ClusterIpam> {
    const pooled = await Ipam.open(join(stateDir, 'ipam-pools'), { sync });
    const ipam = new ClusterIpam(local, pooled, api, options, log.child({ component: 'cluster-ipam' }));
    // Before recovery runs: it releases the leases of ADDs a crash cut short, by network, from the journal.
    for (const lease of await ipam.pooled.leases())
      ipam.poolOfNetwork.set(lease.owner?.network ?? lease.network, lease.network);
    return ipam;
  }

  /**
   * Starts loading the blocks and, once they are in memory, reconciling; resolves when they are loaded. When the API
   * does not serve the IPAM CRDs (not installed: a node whose networks are all host-local needs none), it resolves at
   * once and keeps trying in the background; cluster-IPAM allocations are refused with 11 until the blocks are loaded.
   */
  async start(): Promise<void> {
    this.loaded = this.ledger.start().then(async () => {
      if (this.stopped) return;
      await this.reconcile();
      if (this.stopped) return;
      this.timer = setInterval(() => void this.reconcile(), this.options.reconcileMs);
      this.timer.unref();
    });
    const served = await this.api.request('GET', `/apis/${IPAM_GROUP_VERSION}`, 'discovery');
    if (!served.ok && served.error.status === 404) {
      this.log.warn(
        `the API does not serve ${IPAM_GROUP_VERSION} (deploy/crds/20-crd-ipam.yaml not applied): networks with cluster IPAM fail until it does`,
      );
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
    await this.whereabouts.stop();
    await this.ledger.stop();
  }

  async allocate(req: IpamRequest): Promise<Result<IpamResult>> {
    if (req.claim !== undefined && req.config.type !== 'cluster')
      return err(claimNeedsClusterPool(req.network, req.config.type));
    if (req.config.type !== 'cluster') return this.local.allocate(req);
    if (!this.ledger.ready) return err(notLoaded());
    const refused = this.options.liveness.refusal(this.options.nodeGraceMs);
    if (refused !== undefined) return err(notServing(refused));
    const config = req.config;
    if (config.flavour === 'whereabouts') {
      await this.whereabouts.read();
      const unreadable = this.whereabouts.refusal();
      if (unreadable !== undefined) return err(unreadable);
    }
    const layout = await this.catalog.poolFor(req.network, config);
    if (!layout.ok) return err(layout.error);
    this.poolOfNetwork.set(req.network, layout.value.name);
    const claim = req.claim;
    if (claim === undefined)
      return this.locks.run(layout.value.name, () => this.inPool.allocate(req, config, layout.value));
    if (!req.pod?.namespace) return err(noNamespace(req.network, claim));
    const ref = { namespace: req.pod.namespace, name: claim };
    return this.locks.run(layout.value.name, () => this.forClaim.allocate(req, config, layout.value, ref));
  }

  /**
   * Makes the pools of these networks known before their first ADD (at start, for the networks the API already
   * has), so a cold node's first pods do not wait for the pool to be read, created and checked for overlaps.
   * A pool that cannot be loaded is logged; its first ADD tries again and fails with the reason. One at a time, in the
   * order given: of two overlapping pools the one created first wins, so creation order must not be left to chance.
   */
  async preparePools(networks: readonly ClusterNetwork[]): Promise<void> {
    if (networks.some(usesWhereabouts)) void this.whereabouts.read();
    for (const { network, config } of networks) {
      if (this.stopped) return;
      if (config.type !== 'cluster') continue;
      const r = await this.catalog.poolFor(network, config);
      if (!r.ok)
        this.log.warn({ network, err: r.error.message }, 'cluster IPAM pool not ready; its first ADD tries again');
    }
  }

  /** When one of these networks uses a Whereabouts config: resolves once what Whereabouts holds is first read (or 5 s). */
  async readWhereabouts(networks: readonly ClusterNetwork[]): Promise<void> {
    if (networks.some(usesWhereabouts)) await this.whereabouts.read();
  }

  /**
   * Why the takeover from Multus must wait for cluster IPAM: while one of these networks uses a Whereabouts config,
   * what Whereabouts' objects hold must have been read (docs/migrate-from-multus.md). Empty when nothing stops it.
   */
  takeoverProblems(networks: readonly ClusterNetwork[]): string[] {
    if (!networks.some(usesWhereabouts)) return [];
    const names = networks.filter(usesWhereabouts).map((n) => n.network);
    return this.whereabouts
      .takeoverProblems()
      .map((problem) => `network(s) ${[...new Set(names)].join(', ')} use Whereabouts IPAM, and ${problem}`);
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
    const pooled = (await this.pooled.leases())
      .map(asAttachmentLease)
      .filter((l) => network === undefined || l.network === network);
    return [...(await this.local.leases(network)), ...pooled];
  }

  async releaseUnless(keep: (lease: Lease) => boolean): Promise<readonly Lease[]> {
    const pooled = await this.pooled.releaseUnless((lease) => keep(asAttachmentLease(lease)));
    return [...(await this.local.releaseUnless(keep)), ...pooled.map(asAttachmentLease)];
  }

  /** One pass; passes never overlap. */
  reconcile(): Promise<void> {
    this.reconciling ??= this.reconciler
      .reconcileOnce()
      .catch((e: unknown) => this.log.error({ err: e }, 'IPAM block reconciliation failed; the next pass retries'))
      .finally(() => {
        this.reconciling = undefined;
      });
    return this.reconciling;
  }
}
