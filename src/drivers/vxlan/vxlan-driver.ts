/**
 * The native `vxlan` driver: an L2 overlay across nodes. The node's share (a bridge and a VTEP enslaved to it,
 * with flood entries to every remote VTEP) is created once per network, under a lock, and never undone per pod,
 * like the bridge driver's bridge. Each pod gets a veth whose peer is born in the pod netns, on that bridge.
 */
import { kernelError } from '../common/kernel-error';
import { CniCode, CniError, type Result, err, ok } from '../../cni/errors';
import type { CniResult } from '../../cni/types';
import { KeyedMutex } from '../../common/keyed-mutex';
import type { KernelPort } from '../../kernel/kernel';
import type { BatchOp, LinkInfo } from '../../kernel/types';
import { onePlugin, type AttachRequest, type Driver, type DriverEnv } from '../driver';
import { allocatePodIps } from '../common';
import { attachBridgePort } from '../common/bridge-port';
import { createNodeBridge, healBridgesAtStart, pinBridgeMac } from '../common/node-bridge';
import { vxlanNetworks } from './cluster-networks';
import { clashError } from '../../networks/exclusive-claims';
import { type VxlanConfig, parseVxlanConfig } from './config';
import { definedFields } from '../../common/defined-fields';
import { ALL_ZERO_MAC, FloodEntries } from './flood-entries';
import { findUnderlay } from './underlay';
import type { VxlanCluster } from './vtep-directory';

interface Overlay {
  readonly bridge: LinkInfo;
  readonly vtep: LinkInfo;
  /** Answered from memory: the links may have been deleted since. */
  readonly cached: boolean;
}
/** How often the flood entries are checked against the peers' leases when no change was announced. */
const FLOOD_INTERVAL_MS = 2000;

export interface VxlanDriverOptions {
  /** The netns that is the node, where the bridge and VTEP live: the daemon's own when undefined (tests stand a netns in for a second node). */
  readonly node?: string;
  /** The other nodes, for cluster-mode networks (docs/drivers.md); without it they flood to no one. */
  readonly cluster?: VxlanCluster;
  /** How often the flood entries are checked when no peer announced a change; default 2 s. */
  readonly floodIntervalMs?: number;
}

/** A vxlan driver; it remembers the overlays it has ensured on its node. */
export function createVxlanDriver(options: VxlanDriverOptions = {}): Driver<VxlanConfig> {
  const overlays = new Overlays(options.node, options.cluster);
  let flood: FloodEntries | undefined;
  return {
    type: 'vxlan',
    capabilities: ['ips', 'mac'],
    parse: onePlugin(parseVxlanConfig),
    attach: async (req, conf, env) => {
      const r = await attachVxlan(req, conf, env, overlays);
      // The new VTEP's entries come from the background, never from this call.
      if (r.ok && conf.cluster) flood?.wake();
      return r;
    },
    start: async (ctx) => {
      // The bridges holding a VTEP are this driver's: those an older plexusd left unpinned are pinned at start.
      await healBridgesAtStart(ctx, options.node, (ports) => ports.some((p) => p.kind === 'vxlan'));
      const { cluster } = options;
      if (!cluster) return;
      const log = ctx.log.child({ component: 'vxlan-peers' });
      const intervalMs = options.floodIntervalMs ?? FLOOD_INTERVAL_MS;
      flood = new FloodEntries({ kernel: ctx.kernel, netns: options.node, cluster, log, intervalMs });
      // The peers' first list is not awaited: a slow API must not hold the daemon's readiness.
      void cluster.directory.start().then(() => flood?.wake());
      flood.start();
    },
    stop: async () => {
      await flood?.stop();
      await options.cluster?.directory.stop();
    },
  };
}

async function attachVxlan(
  req: AttachRequest,
  conf: VxlanConfig,
  env: DriverEnv,
  overlays: Overlays,
): Promise<Result<CniResult>> {
  const node = overlays.node;
  const what = `network ${req.network.key}`;

  const ipam = await allocatePodIps(req, env, conf.ipam);
  if (!ipam.ok) return ipam;

  const network = req.network.key;
  const overlay = await overlays.ensure(conf, env.kernel, { network });
  if (!overlay.ok) return err(overlay.error.withContext(what));
  const mtu = conf.mtu ?? overlay.value.vtep.mtu;
  return attachBridgePort(req, env, {
    bridge: conf.bridge,
    ...definedFields({ mtu: mtu || undefined, node: node || undefined }),
    ipam: ipam.value,
    // Cached after the call above; `again` (the bridge was deleted by hand) rebuilds the whole overlay.
    ensureBridge: async (again) => {
      const o = await overlays.ensure(conf, env.kernel, { network, force: again });
      if (!o.ok) return err(o.error.withContext(what));
      return ok(o.value.bridge.mac ? { mac: o.value.bridge.mac } : {});
    },
  });
}

/** The overlays one driver has ensured on its node, by config, so later attaches skip the kernel round trips. */
class Overlays {
  private readonly locks = new KeyedMutex();
  private readonly known = new Map<string, { bridge: LinkInfo; vtep: LinkInfo }>();

  constructor(
    readonly node: string | undefined,
    private readonly cluster: VxlanCluster | undefined,
  ) {}

  /**
   * Makes sure the node has the network's bridge and VTEP, the VTEP is a port of the bridge and up, and every remote
   * VTEP has a flood entry. Idempotent. Done once per config while the daemon runs (later attaches are answered from
   * memory), and again when an attach finds the bridge gone; remotes removed from the config keep their entries until
   * the VTEP is deleted.
   */
  async ensure(
    conf: VxlanConfig,
    kernel: KernelPort,
    opts: { readonly network: string; readonly force?: boolean },
  ): Promise<Result<Overlay>> {
    const key = JSON.stringify([
      conf.bridge,
      conf.device,
      conf.port,
      conf.local ?? '',
      conf.underlayInterface ?? '',
      conf.mtu ?? 0,
      conf.learning,
      conf.remotes,
    ]);
    const known = this.known.get(key);
    if (known && !opts.force) return ok({ ...known, cached: true });
    return this.locks.run(conf.bridge, async () => {
      const mtu = await this.clusterMtu(opts.network, conf, kernel);
      if (!mtu.ok) return mtu;
      return this.create(mtu.value === undefined ? conf : { ...conf, mtu: mtu.value }, kernel, key);
    });
  }

  /**
   * In cluster mode: refuses a VNI another network holds (code 7) and a node without an underlay address (code 11);
   * answers the VTEP's MTU over the underlay when the network sets none.
   */
  private async clusterMtu(
    network: string,
    conf: VxlanConfig,
    kernel: KernelPort,
  ): Promise<Result<number | undefined>> {
    const cluster = this.cluster;
    if (!conf.cluster || !cluster) return ok(conf.mtu);
    const clash = vxlanNetworks(cluster.networks()).clashes.get(network);
    if (clash) return err(clashError(clash));
    const underlay = await findUnderlay(conf, kernel, { netns: this.node, directory: cluster.directory });
    if (!underlay.ok) return underlay;
    return ok(conf.mtu ?? underlay.value.vtepMtu);
  }

  private async create(conf: VxlanConfig, kernel: KernelPort, key: string): Promise<Result<Overlay>> {
    const node = this.node;
    const r = await kernel.batch(node, [
      createNodeBridge(conf.bridge),
      { op: 'linkGet', name: conf.bridge },
      {
        op: 'linkAdd',
        link: {
          kind: 'vxlan',
          name: conf.device,
          vni: conf.vni,
          port: conf.port,
          learning: conf.learning,
          up: true,
          bridge: conf.bridge,
          ...definedFields({
            local: conf.local || undefined,
            underlay: conf.underlayInterface || undefined,
            mtu: conf.mtu || undefined,
          }),
        },
        ignore: ['EEXIST'],
      },
      { op: 'linkGet', name: conf.device },
    ]);
    if (!r.ok) {
      if (r.error.index === 2 && r.error.failure.op === 'lookup' && r.error.failure.target === conf.underlayInterface) {
        return err(
          new CniError(
            CniCode.InvalidNetworkConfig,
            `underlayInterface ${conf.underlayInterface} not found on the host`,
            'fix "underlayInterface"',
          ),
        );
      }
      return err(
        kernelError(
          r.error,
          `creating bridge ${conf.bridge} and VXLAN device ${conf.device} (VNI ${conf.vni}, port ${conf.port})`,
        ),
      );
    }
    const bridge = r.value[1];
    const vtep = r.value[3];
    if (!bridge || bridge.kind !== 'bridge') {
      return err(
        new CniError(
          CniCode.InvalidNetworkConfig,
          `${conf.bridge} exists on the host but is not a bridge (it is ${bridge?.kind ?? 'unknown'})`,
          'choose another "bridge" name',
        ),
      );
    }
    if (!vtep) return err(await vniInUse(conf, kernel, node));
    if (vtep.vxlan && (vtep.vxlan.vni !== conf.vni || vtep.vxlan.port !== conf.port))
      return err(
        new CniError(
          CniCode.InvalidNetworkConfig,
          `${vtep.name} on the host is a VXLAN device of VNI ${vtep.vxlan.vni} on port ${vtep.vxlan.port}, not VNI ${conf.vni} on port ${conf.port}`,
          'delete that device, or choose another "vni"',
        ),
      );
    if (vtep.kind !== 'vxlan') {
      return err(
        new CniError(
          CniCode.InvalidNetworkConfig,
          `${conf.device} exists on the host but is not a VXLAN device (it is ${vtep.kind ?? 'unknown'})`,
        ),
      );
    }
    const fixes: BatchOp[] = pinBridgeMac(bridge);
    if (!bridge.up) fixes.push({ op: 'linkSet', name: conf.bridge, up: true });
    if (vtep.masterIndex !== bridge.index) fixes.push({ op: 'linkSet', name: conf.device, bridge: conf.bridge });
    if (!vtep.up) fixes.push({ op: 'linkSet', name: conf.device, up: true });
    for (const remote of conf.remotes)
      fixes.push({ op: 'fdbAppend', dev: conf.device, mac: ALL_ZERO_MAC, dst: remote, ignore: ['EEXIST'] });
    if (fixes.length) {
      const f = await kernel.batch(node, fixes);
      if (!f.ok) return err(kernelError(f.error, `configuring VXLAN device ${conf.device} on bridge ${conf.bridge}`));
    }
    this.known.set(key, { bridge, vtep });
    return ok({ bridge, vtep, cached: false });
  }
}

/** EEXIST without a link of the VTEP's name: another VXLAN device already owns this VNI and port; named when found. */
async function vniInUse(conf: VxlanConfig, kernel: KernelPort, node: string | undefined): Promise<CniError> {
  const listed = await kernel.batch(node, [{ op: 'linkList' }]);
  const owner = listed.ok
    ? listed.value[0].find((l) => l.vxlan?.vni === conf.vni && l.vxlan.port === conf.port)?.name
    : undefined;
  return new CniError(
    CniCode.InvalidNetworkConfig,
    `${owner ?? 'another VXLAN device'} on the host already uses VNI ${conf.vni} on port ${conf.port}`,
    'choose another "vni" or "port", or delete that device',
  );
}
