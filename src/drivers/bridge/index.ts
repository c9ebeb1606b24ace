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
import { onePlugin, type AttachRequest, type Driver, type DriverEnv } from '../driver';
import { type BridgeConfig, parseBridgeConfig } from './config';

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

/** Creates the bridge once (it is shared by every pod of the network and never deleted), and its gateway addresses. */
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
    const r = await env.kernel.batch(undefined, [
      {
        op: 'linkAdd',
        link: { kind: 'bridge', name: conf.bridge, up: true, ...(conf.mtu ? { mtu: conf.mtu } : {}) },
        ignore: ['EEXIST'],
      },
      { op: 'linkGet', name: conf.bridge },
    ]);
    if (!r.ok) return err(kernelError(r.error, `creating bridge ${conf.bridge}`));
    const link = r.value[1];
    if (!link || link.kind !== 'bridge') {
      return err(
        new CniError(
          CniCode.InvalidNetworkConfig,
          `${conf.bridge} exists on the host but is not a bridge (it is ${link?.kind ?? 'unknown'})`,
          'choose another "bridge" name',
        ),
      );
    }
    const fixes: BatchOp[] = [];
    if (!link.up) fixes.push({ op: 'linkSet', name: conf.bridge, up: true });
    if (conf.promiscMode && !link.promisc) fixes.push({ op: 'linkSet', name: conf.bridge, promisc: true });
    for (const gateway of wanted)
      fixes.push({ op: 'addrAdd', name: conf.bridge, address: gateway, noDad: true, ignore: ['EEXIST'] });
    if (fixes.length) {
      const f = await env.kernel.batch(undefined, fixes);
      if (!f.ok) return err(kernelError(f.error, `configuring bridge ${conf.bridge}`));
    }
    const entry = knownBridges.get(conf.bridge) ?? {
      ...(link.mac ? { mac: link.mac } : {}),
      gateways: new Set<string>(),
    };
    for (const g of wanted) entry.gateways.add(g);
    knownBridges.set(conf.bridge, entry);
    return ok(link.mac ? { mac: link.mac } : {});
  });
}
