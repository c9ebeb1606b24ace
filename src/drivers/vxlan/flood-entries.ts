/**
 * A node's flood entries of its cluster-mode VTEPs, kept in the background, never on the CNI path: each round reads the
 * cluster's vxlan networks, finds those this node serves (its VTEP `vx<vni>` exists), publishes their underlay
 * addresses, and makes each VTEP's all-zeros-MAC entries equal the live peers that serve the same VNI (peers.ts). It
 * runs when a peer's record changes and every `intervalMs` (a lease expires without an event), one round at a time.
 */
import type { Logger } from 'pino';
import type { KernelPort } from '../../kernel/kernel';
import type { BatchOp } from '../../kernel/types';
import { kernelError } from '../common/kernel-error';
import { clusterNetworks, type VxlanNetwork } from './cluster-networks';
import { vtepName } from './config';
import { floodChanges, floodTargets } from './peers';
import { underlayOf } from './underlay';
import type { PeerVteps, VxlanCluster } from './vtep-directory';
import { errorMessage } from '../../common/error-message';

export const ALL_ZERO_MAC = '00:00:00:00:00:00';

export interface FloodEntriesOptions {
  readonly kernel: KernelPort;
  /** The node's netns (a test's stand-in), the daemon's own when undefined. */
  readonly netns: string | undefined;
  readonly cluster: VxlanCluster;
  readonly log: Logger;
  readonly intervalMs: number;
}

export class FloodEntries {
  /** The VTEPs whose entries the last round kept: a network deleted since has its entries removed. */
  private kept = new Set<string>();
  /** Each live peer's address per VNI (`node/vni`) as the last round saw it: a change is a move. */
  private peerAddresses = new Map<string, string>();
  /** Whether the VTEPs a previous plexusd published are among `kept` (taken once the directory has read them). */
  private inherited = false;
  /** Why a network could not be served, as last logged (logged again only when it changes). */
  private readonly problems = new Map<string, string>();
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private again = false;
  private publishing: Promise<void> | undefined;
  private stopped = false;

  constructor(private readonly options: FloodEntriesOptions) {}

  start(): void {
    this.options.cluster.directory.onChange(() => this.wake());
    this.timer = setInterval(() => this.wake(), this.options.intervalMs);
    this.timer.unref();
    this.wake();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    await this.running;
  }

  /** Runs a round now, or right after the one under way. */
  wake(): void {
    if (this.stopped) return;
    if (this.running) {
      this.again = true;
      return;
    }
    this.running = this.round()
      .catch((e: unknown) => this.options.log.warn({ err: errorMessage(e) }, 'keeping VXLAN flood entries failed'))
      .finally(() => {
        this.running = undefined;
        if (this.again) {
          this.again = false;
          this.wake();
        }
      });
  }

  /** One round; resolves when the node's entries match what the directory says now. */
  async round(): Promise<void> {
    const { kernel, netns, cluster } = this.options;
    const networks = clusterNetworks(cluster.networks());
    this.inherit();
    // A node with no cluster-mode network reads nothing of its kernel (the loop runs on every node with an API).
    if (networks.length === 0 && this.kept.size === 0) return this.publish(new Map());
    const read = await kernel.batch(netns, [{ op: 'linkList' }, { op: 'addrList' }]);
    if (!read.ok) throw kernelError(read.error, 'reading the node links for VXLAN flood entries');
    const [links, addresses] = read.value;
    const devices = new Set(links.filter((l) => l.kind === 'vxlan').map((l) => l.name));
    const served = networks.filter((n) => devices.has(n.conf.device));
    const node = { links, addresses, directory: cluster.directory };
    const published = new Map<number, string>();
    const vteps: { network: VxlanNetwork; self: string }[] = [];
    for (const network of served) {
      const underlay = underlayOf(network.conf, node);
      if (!underlay.ok) {
        this.problem(network.key, underlay.error.message);
        continue;
      }
      this.problems.delete(network.key);
      published.set(network.conf.vni, underlay.value.address);
      vteps.push({ network, self: underlay.value.address });
    }
    this.publish(published);
    const peers = cluster.directory.livePeers();
    // Until the peers are read (a restart), the entries stay as they are: emptying them would cut the floods.
    if (peers) {
      const movedFrom = this.movedFrom(peers);
      for (const { network, self } of vteps)
        await this.converge(network.conf.device, floodTargets({ vni: network.conf.vni, self }, peers), movedFrom);
    }
    // A network deleted (or no longer cluster-mode) since the last round: its VTEP floods to no one any more.
    const now = new Set(vteps.map((v) => v.network.conf.device));
    for (const device of this.kept)
      if (!now.has(device) && devices.has(device)) await this.converge(device, [], new Set());
    this.kept = now;
  }

  /**
   * A network deleted while no plexusd ran left its VTEP's entries behind: the VTEPs this node's record named at start
   * are treated as kept by a last round, so the next round empties those whose network is gone.
   */
  private inherit(): void {
    if (this.inherited) return;
    const before = this.options.cluster.directory.publishedBefore();
    if (!before) return;
    this.inherited = true;
    for (const vni of before.keys()) this.kept.add(vtepName(vni));
  }

  /**
   * Makes the device's all-zeros entries `wanted`, appending and deleting only the difference, and forgets the MACs it
   * learned behind an address a peer moved away from (`movedFrom`): their unicast would go on to the address that went
   * until they age out (5 minutes); forgotten, it is flooded once and learned again behind the new one.
   */
  private async converge(device: string, wanted: readonly string[], movedFrom: ReadonlySet<string>): Promise<void> {
    const { kernel, netns } = this.options;
    const listed = await kernel.batch(netns, [{ op: 'fdbList', dev: device }]);
    if (!listed.ok) throw kernelError(listed.error, `reading the flood entries of ${device}`);
    const entries = listed.value[0];
    const current = entries.filter((e) => e.mac === ALL_ZERO_MAC && e.permanent).map((e) => e.dst);
    const { add, remove } = floodChanges(current, wanted);
    const stale = entries.filter((e) => !e.permanent && movedFrom.has(e.dst));
    const ops: BatchOp[] = [
      ...add.map((dst): BatchOp => ({ op: 'fdbAppend', dev: device, mac: ALL_ZERO_MAC, dst, ignore: ['EEXIST'] })),
      ...remove.map((dst): BatchOp => ({ op: 'fdbDel', dev: device, mac: ALL_ZERO_MAC, dst, ignore: ['ENOENT'] })),
      ...stale.map(({ mac, dst }): BatchOp => ({ op: 'fdbDel', dev: device, mac, dst, ignore: ['ENOENT'] })),
    ];
    if (!ops.length) return;
    const changed = await kernel.batch(netns, ops);
    if (!changed.ok) throw kernelError(changed.error, `updating the flood entries of ${device}`);
    const forgotten = stale.length;
    this.options.log.info(
      { device, added: add, removed: remove, forgotten },
      'VXLAN flood entries follow the live peers',
    );
  }

  /** The addresses live peers published last round and publish no more for the same VNI: they moved away from them. */
  private movedFrom(peers: readonly PeerVteps[]): Set<string> {
    const moved = new Set<string>();
    const now = new Map<string, string>();
    for (const peer of peers)
      for (const [vni, address] of peer.vteps) {
        const before = this.peerAddresses.get(`${peer.node}/${vni}`);
        if (before !== undefined && before !== address) moved.add(before);
        now.set(`${peer.node}/${vni}`, address);
      }
    this.peerAddresses = now;
    return moved;
  }

  /** Publishes in the background: a slow API never holds a round (the next round publishes what is current then). */
  private publish(vteps: ReadonlyMap<number, string>): void {
    if (this.publishing) return;
    this.publishing = this.options.cluster.directory
      .publish(vteps)
      .catch((e: unknown) => this.options.log.warn({ err: errorMessage(e) }, 'publishing the VTEPs failed'))
      .finally(() => {
        this.publishing = undefined;
      });
  }

  private problem(network: string, message: string): void {
    if (this.problems.get(network) === message) return;
    this.problems.set(network, message);
    this.options.log.warn({ network }, message);
  }
}
