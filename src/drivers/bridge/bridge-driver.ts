/**
 * The native `bridge` driver: the reference bridge plugin's behaviour, run in-process. The pod's interface is
 * the peer of a veth that is created directly inside the pod netns with its final name (no create-move-rename).
 */
import { kernelError } from '../common/kernel-error';
import { CniCode, CniError, type Result, err, ok } from '../../cni/errors';
import type { CniResult } from '../../cni/types';
import type { IpamResult } from '../../ipam';
import { KeyedMutex } from '../../common/keyed-mutex';
import type { BatchOp } from '../../kernel/types';
import { allocatePodIps, podRoutes } from '../common';
import { attachBridgePort, type EnsuredBridge } from '../common/bridge-port';
import { checkBridgePort } from '../common/bridge-port-check';
import { createNodeBridge, healBridgesAtStart, pinBridgeMac } from '../common/node-bridge';
import { onePlugin, type AttachRequest, type Driver, type DriverEnv } from '../driver';
import { type BridgeConfig, parseBridgeConfig } from './config';
import { hasIpv6Gateway, settleAddresses } from '../common/dad';
import { gatewayAddressOps } from './gateway';
import { bridgeSysctls, podSysctls, reportedRoutes } from './reference-setup';
import { definedFields } from '../../common/defined-fields';

/** Bridges a driver has ensured, with the gateway addresses it put on them (so later ADDs skip the kernel). */
interface KnownBridges {
  /** The netns that is the node, where the bridges live: the daemon's own when undefined (tests stand a netns in). */
  readonly node: string | undefined;
  readonly locks: KeyedMutex;
  readonly bridges: Map<string, { mac?: string; gateways: Set<string> }>;
}

export interface BridgeDriverOptions {
  readonly node?: string;
}

/** A bridge driver; it remembers the bridges it has ensured. */
export function createBridgeDriver(options: BridgeDriverOptions = {}): Driver<BridgeConfig> {
  const known: KnownBridges = { node: options.node, locks: new KeyedMutex(), bridges: new Map() };
  return {
    type: 'bridge',
    capabilities: ['ips', 'mac', 'dns'],
    parse: onePlugin(parseBridgeConfig),
    attach: (req, conf, env) => attachBridge(req, conf, env, known),
    // A bridge an older plexusd made unpinned is pinned before the daemon is ready, not on its network's next ADD.
    check: (attachment, env, conf) => checkBridgePort(env.kernel, known.node, attachment, conf?.promiscMode),
    start: (ctx) => healBridgesAtStart(ctx, known.node, (ports) => !ports.some((p) => p.kind === 'vxlan')),
  };
}

async function attachBridge(
  req: AttachRequest,
  conf: BridgeConfig,
  env: DriverEnv,
  knownBridges: KnownBridges,
): Promise<Result<CniResult>> {
  const ipam = await allocatePodIps(req, env, conf.ipam);
  if (!ipam.ok) return ipam;
  const attached = await attachBridgePort(req, env, {
    bridge: conf.bridge,
    ...definedFields({ mtu: conf.mtu || undefined, node: knownBridges.node || undefined }),
    hairpin: conf.hairpinMode,
    ipam: ipam.value,
    routes: podRoutes(ipam.value, { defaultGateway: conf.isDefaultGateway }),
    resultRoutes: reportedRoutes(conf, ipam.value),
    podSetup: {
      before: podSysctls(conf, req.ifname, ipam.value),
      dadBySysctl: true,
      down: conf.disableContainerInterface,
    },
    ensureBridge: (again) => {
      if (again) knownBridges.bridges.delete(conf.bridge);
      return ensureBridge(conf, ipam.value, env, knownBridges);
    },
    forgetBridge: () => knownBridges.bridges.delete(conf.bridge),
  });
  if (!attached.ok || !conf.enabledad || !hasIpv6Gateway(ipam.value)) return attached;
  const settled = await settleAddresses(env.kernel, req.netns, req.ifname);
  return settled.ok ? attached : err(settled.error.withContext(`network ${req.network.key}`));
}

/**
 * Creates the bridge once (it is shared by every pod of the network and never deleted) and puts its gateway addresses
 * on. Its MAC is pinned at the MAC read here (a new bridge's own, or the one an existing bridge's pods know) once the
 * port of this ADD has joined, in that port's batch, as the reference pins it. Later ADDs are answered from memory.
 */
async function ensureBridge(
  conf: BridgeConfig,
  ipam: IpamResult | undefined,
  env: DriverEnv,
  { node, locks: bridgeLocks, bridges: knownBridges }: KnownBridges,
): Promise<Result<EnsuredBridge>> {
  const wanted = conf.isGateway
    ? (ipam?.ips ?? []).flatMap((ip) => (ip.gateway ? [`${ip.gateway}/${ip.address.split('/')[1]}`] : []))
    : [];
  const knownNow = (): EnsuredBridge | undefined => {
    const known = knownBridges.get(conf.bridge);
    return known && wanted.every((g) => known.gateways.has(g)) ? (known.mac ? { mac: known.mac } : {}) : undefined;
  };
  const known = knownNow();
  if (known) return ok(known);
  return bridgeLocks.run(conf.bridge, async () => {
    const ensured = knownNow();
    if (ensured) return ok(ensured);
    const r = await env.kernel.batch(node, [
      createNodeBridge(conf.bridge, conf.mtu ? { mtu: conf.mtu } : {}),
      { op: 'linkGet', name: conf.bridge },
      { op: 'addrList', name: conf.bridge },
    ]);
    if (!r.ok) return err(kernelError(r.error, `creating bridge ${conf.bridge}`));
    const [, link, present] = r.value;
    if (!link || link.kind !== 'bridge') return err(notABridge(conf.bridge, link?.kind));
    const gateways = gatewayAddressOps({ bridge: conf.bridge, present, wanted, forceAddress: conf.forceAddress });
    if (!gateways.ok) return gateways;
    const fixes: BatchOp[] = [...bridgeSysctls(conf.bridge, wanted), ...gateways.value];
    if (!link.up) fixes.push({ op: 'linkSet', name: conf.bridge, up: true });
    if (conf.promiscMode && !link.promisc) fixes.push({ op: 'linkSet', name: conf.bridge, promisc: true });
    if (fixes.length) {
      const f = await env.kernel.batch(node, fixes);
      if (!f.ok) return err(kernelError(f.error, `configuring bridge ${conf.bridge}`));
    }
    const onBridge = knownBridges.get(conf.bridge)?.gateways ?? new Set<string>();
    for (const op of gateways.value) if (op.op === 'addrDel') onBridge.delete(op.address);
    for (const g of wanted) onBridge.add(g);
    knownBridges.set(conf.bridge, { ...definedFields({ mac: link.mac || undefined }), gateways: onBridge });
    return ok({ ...definedFields({ mac: link.mac || undefined }), pinAfterPort: pinBridgeMac(link) });
  });
}

const notABridge = (name: string, kind: string | undefined): CniError =>
  new CniError(
    CniCode.InvalidNetworkConfig,
    `${name} exists on the host but is not a bridge (it is ${kind ?? 'unknown'})`,
    'choose another "bridge" name',
  );
