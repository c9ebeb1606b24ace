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
import { attachBridgePort } from '../common/bridge-port';
import { nodeBridge, pinBridgeMac } from '../common/node-bridge';
import { onePlugin, type AttachRequest, type Driver, type DriverEnv } from '../driver';
import { type BridgeConfig, parseBridgeConfig } from './config';
import { gatewayAddressOps } from './gateway';

export { hostVethName } from '../common/bridge-port';

/** Bridges a driver has ensured, with the gateway addresses it put on them (so later ADDs skip the kernel). */
interface KnownBridges {
  readonly locks: KeyedMutex;
  readonly bridges: Map<string, { mac?: string; gateways: Set<string> }>;
}

/** A bridge driver; it remembers the bridges it has ensured. */
export function createBridgeDriver(): Driver<BridgeConfig> {
  const known: KnownBridges = { locks: new KeyedMutex(), bridges: new Map() };
  return {
    type: 'bridge',
    capabilities: ['ips', 'mac', 'dns'],
    parse: onePlugin(parseBridgeConfig),
    attach: (req, conf, env) => attachBridge(req, conf, env, known),
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
  return attachBridgePort(req, env, {
    bridge: conf.bridge,
    ...(conf.mtu ? { mtu: conf.mtu } : {}),
    hairpin: conf.hairpinMode,
    ipam: ipam.value,
    routes: podRoutes(ipam.value, { defaultGateway: conf.isDefaultGateway }),
    ensureBridge: (again) => {
      if (again) knownBridges.bridges.delete(conf.bridge);
      return ensureBridge(conf, ipam.value, env, knownBridges);
    },
  });
}

/**
 * Creates the bridge once (it is shared by every pod of the network and never deleted) with its MAC pinned, pins the
 * MAC of one that existed, and puts its gateway addresses on. Later ADDs are answered from memory.
 */
async function ensureBridge(
  conf: BridgeConfig,
  ipam: IpamResult | undefined,
  env: DriverEnv,
  { locks: bridgeLocks, bridges: knownBridges }: KnownBridges,
): Promise<Result<{ mac?: string }>> {
  const wanted = conf.isGateway
    ? (ipam?.ips ?? []).flatMap((ip) => (ip.gateway ? [`${ip.gateway}/${ip.address.split('/')[1]}`] : []))
    : [];
  const known = knownBridges.get(conf.bridge);
  if (known && wanted.every((g) => known.gateways.has(g))) return ok(known.mac ? { mac: known.mac } : {});
  return bridgeLocks.run(conf.bridge, async () => {
    const made = nodeBridge(conf.bridge, conf.mtu ? { mtu: conf.mtu } : {});
    const r = await env.kernel.batch(undefined, [
      made.create,
      { op: 'linkGet', name: conf.bridge },
      { op: 'addrList', name: conf.bridge },
    ]);
    if (!r.ok) return err(kernelError(r.error, `creating bridge ${conf.bridge}`));
    const [, link, present] = r.value;
    if (!link || link.kind !== 'bridge') return err(notABridge(conf.bridge, link?.kind));
    const gateways = gatewayAddressOps({ bridge: conf.bridge, present, wanted, forceAddress: conf.forceAddress });
    if (!gateways.ok) return gateways;
    const fixes: BatchOp[] = [...pinBridgeMac(link, made), ...gateways.value];
    if (!link.up) fixes.push({ op: 'linkSet', name: conf.bridge, up: true });
    if (conf.promiscMode && !link.promisc) fixes.push({ op: 'linkSet', name: conf.bridge, promisc: true });
    if (fixes.length) {
      const f = await env.kernel.batch(undefined, fixes);
      if (!f.ok) return err(kernelError(f.error, `configuring bridge ${conf.bridge}`));
    }
    const onBridge = knownBridges.get(conf.bridge)?.gateways ?? new Set<string>();
    for (const op of gateways.value) if (op.op === 'addrDel') onBridge.delete(op.address);
    for (const g of wanted) onBridge.add(g);
    knownBridges.set(conf.bridge, { ...(link.mac ? { mac: link.mac } : {}), gateways: onBridge });
    return ok(link.mac ? { mac: link.mac } : {});
  });
}

const notABridge = (name: string, kind: string | undefined): CniError =>
  new CniError(
    CniCode.InvalidNetworkConfig,
    `${name} exists on the host but is not a bridge (it is ${kind ?? 'unknown'})`,
    'choose another "bridge" name',
  );
