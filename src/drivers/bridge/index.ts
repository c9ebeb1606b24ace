/**
 * The native `bridge` driver: the reference bridge plugin's behaviour, run in-process. The pod's interface is
 * the peer of a veth that is created directly inside the pod netns with its final name (no create-move-rename).
 */
import { createHash } from 'node:crypto';
import { CniCode, CniError, Result, err, ok } from '../../cni/errors';
import type { CniInterface, CniIp, CniResult, CniRoute } from '../../cni/types';
import type { IpamResult } from '../../ipam';
import { KeyedMutex } from '../../common/keyed-mutex';
import type { BatchOp } from '../../kernel/types';
import type { AttachRequest, Driver, DriverEnv } from '../driver';
import { BridgeConfig, parseBridgeConfig } from './config';

/** A stable host-side name per attachment, so a retry or recovery finds the same link. */
export const hostVethName = (containerId: string, ifname: string): string =>
  `veth${createHash('sha256').update(`${containerId}/${ifname}`).digest('hex').slice(0, 11)}`;

const bridgeLocks = new KeyedMutex();
/** Bridges this daemon has ensured, with the gateway addresses it put on them (so later ADDs skip the kernel). */
const knownBridges = new Map<string, { mac?: string; gateways: Set<string> }>();

export const bridgeDriver: Driver = {
  type: 'bridge',
  capabilities: ['ips', 'mac', 'dns'],
  validate: parseBridgeConfig,

  async attach(req: AttachRequest, env: DriverEnv): Promise<Result<CniResult>> {
    const parsed = parseBridgeConfig(req.plugin);
    if (!parsed.ok) return parsed;
    const conf = parsed.value;

    let ipam: IpamResult | undefined;
    if (conf.ipam) {
      await env.record({ kind: 'releaseIpam', network: req.network.cniName, containerId: req.containerId, ifname: req.ifname });
      const allocated = await env.ipam.allocate({ network: req.network.cniName, containerId: req.containerId, ifname: req.ifname, config: conf.ipam, requestedIps: req.ips });
      if (!allocated.ok) return allocated;
      ipam = allocated.value;
    } else if (req.ips.length) {
      return err(new CniError(CniCode.InvalidNetworkConfig, `network ${req.network.key} has no IPAM, so static IPs ${req.ips.join(', ')} cannot be assigned`));
    }

    const host = hostVethName(req.containerId, req.ifname);
    await env.record({ kind: 'deleteLink', name: host });

    const routes: CniRoute[] = [];
    const gateways = new Map<4 | 6, string>();
    for (const ip of ipam?.ips ?? []) if (ip.gateway && !gateways.has(family(ip.address))) gateways.set(family(ip.address), ip.gateway);
    if (conf.isDefaultGateway) {
      for (const [fam, gw] of gateways) routes.push({ dst: fam === 4 ? '0.0.0.0/0' : '::/0', gw });
    }
    for (const r of ipam?.routes ?? []) {
      const gw = r.gw ?? gateways.get(family(r.dst));
      if (conf.isDefaultGateway && /^(0\.0\.0\.0|::)\/0$/.test(r.dst)) continue; // already added via the gateway
      routes.push({ dst: r.dst, ...(gw ? { gw } : {}) });
    }
    // Host side and pod side in one trip to the kernel worker; the veth's peer is born in the pod netns.
    const pod = req.netns;
    const ops: BatchOp[] = [
      {
        op: 'linkAdd',
        link: {
          kind: 'veth', name: host, up: true, bridge: conf.bridge,
          ...(conf.mtu ? { mtu: conf.mtu } : {}),
          ...(env.hostLinkGroup !== undefined ? { group: env.hostLinkGroup } : {}),
          peer: { name: req.ifname, netns: pod, ...(req.mac ? { mac: req.mac } : {}) },
        },
      },
      ...(conf.hairpinMode ? [{ op: 'linkSet' as const, name: host, hairpin: true }] : []),
      { op: 'linkGet', name: host },
      { op: 'linkSet', name: req.ifname, up: true, at: pod },
      ...(ipam?.ips ?? []).map((ip): BatchOp => ({ op: 'addrAdd', name: req.ifname, address: ip.address, noDad: true, at: pod })),
      ...routes.map((r): BatchOp => ({ op: 'routeAdd', route: { dst: r.dst, ...(r.gw ? { gw: r.gw } : { dev: req.ifname }) }, ignore: ['EEXIST'], at: pod })),
      { op: 'linkGet', name: req.ifname, at: pod },
    ];
    let bridge = await ensureBridge(conf, ipam, env);
    if (!bridge.ok) return bridge;
    let plumbed = await env.kernel.batch(undefined, ops);
    if (!plumbed.ok && plumbed.error.index === 0 && plumbed.error.failure.op === 'lookup' && plumbed.error.failure.target === conf.bridge) {
      // The bridge vanished since it was last ensured (deleted by hand): make it again, once.
      knownBridges.delete(conf.bridge);
      bridge = await ensureBridge(conf, ipam, env);
      if (!bridge.ok) return bridge;
      plumbed = await env.kernel.batch(undefined, ops);
    }
    if (!plumbed.ok) {
      if (plumbed.error.index === 0 && plumbed.error.is('EEXIST')) return err(new CniError(CniCode.Internal, `interface ${req.ifname} already exists in ${req.netns} or host link ${host} exists`, plumbed.error.details));
      const where = plumbed.error.index === 0 ? `creating veth ${host} <-> ${req.ifname}` : `configuring ${req.ifname} in ${req.netns}`;
      return err(plumbed.error.withContext(`network ${req.network.key}: ${where}`));
    }
    const hostLink = plumbed.value[conf.hairpinMode ? 2 : 1] as { mac?: string } | null;
    const podLink = plumbed.value[plumbed.value.length - 1] as { mac?: string; mtu?: number } | null;

    const interfaces: CniInterface[] = [
      { name: conf.bridge, ...(bridge.value.mac ? { mac: bridge.value.mac } : {}) },
      { name: host, ...(hostLink?.mac ? { mac: hostLink.mac } : {}) },
      { name: req.ifname, ...(podLink?.mac ? { mac: podLink.mac } : {}), ...(podLink?.mtu ? { mtu: podLink.mtu } : {}), sandbox: req.netns },
    ];
    const ips: CniIp[] = (ipam?.ips ?? []).map((ip) => ({ address: ip.address, ...(ip.gateway ? { gateway: ip.gateway } : {}), interface: 2 }));
    return ok({ interfaces, ips, routes, ...(ipam?.dns ? { dns: ipam.dns } : {}) });
  },
};

const family = (addr: string): 4 | 6 => (addr.includes(':') ? 6 : 4);

/** Creates the bridge once (it is shared by every pod of the network and never deleted), and its gateway addresses. */
async function ensureBridge(conf: BridgeConfig, ipam: IpamResult | undefined, env: DriverEnv): Promise<Result<{ mac?: string }>> {
  const wanted = conf.isGateway ? (ipam?.ips ?? []).flatMap((ip) => (ip.gateway ? [`${ip.gateway}/${ip.address.split('/')[1]}`] : [])) : [];
  const known = knownBridges.get(conf.bridge);
  if (known && wanted.every((g) => known.gateways.has(g))) return ok(known.mac ? { mac: known.mac } : {});
  return bridgeLocks.run(conf.bridge, async () => {
    const ops: BatchOp[] = [
      { op: 'linkAdd', link: { kind: 'bridge', name: conf.bridge, up: true, ...(conf.mtu ? { mtu: conf.mtu } : {}) }, ignore: ['EEXIST'] },
      { op: 'linkGet', name: conf.bridge },
    ];
    const r = await env.kernel.batch(undefined, ops);
    if (!r.ok) return err(r.error.withContext(`creating bridge ${conf.bridge}`));
    const link = r.value[1] as { kind?: string; mac?: string; up?: boolean; promisc?: boolean } | null;
    if (!link || link.kind !== 'bridge') {
      return err(new CniError(CniCode.InvalidNetworkConfig, `${conf.bridge} exists on the host but is not a bridge (it is ${link?.kind ?? 'unknown'})`, 'choose another "bridge" name'));
    }
    const fixes: BatchOp[] = [];
    if (!link.up) fixes.push({ op: 'linkSet', name: conf.bridge, up: true });
    if (conf.promiscMode && !link.promisc) fixes.push({ op: 'linkSet', name: conf.bridge, promisc: true });
    for (const gateway of wanted) fixes.push({ op: 'addrAdd', name: conf.bridge, address: gateway, noDad: true, ignore: ['EEXIST'] });
    if (fixes.length) {
      const f = await env.kernel.batch(undefined, fixes);
      if (!f.ok) return err(f.error.withContext(`configuring bridge ${conf.bridge}`));
    }
    const entry = knownBridges.get(conf.bridge) ?? { ...(link.mac ? { mac: link.mac } : {}), gateways: new Set<string>() };
    for (const g of wanted) entry.gateways.add(g);
    knownBridges.set(conf.bridge, entry);
    return ok(link.mac ? { mac: link.mac } : {});
  });
}
