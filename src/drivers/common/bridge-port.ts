/**
 * A pod attached to a bridge on the node through a veth whose peer is born in the pod netns with its final
 * name: the bridge driver's way, and the vxlan overlay's (whose bridge also holds the VXLAN device).
 */
import { createHash, randomBytes } from 'node:crypto';
import { CniCode, CniError, Result, ok } from '../../cni/errors';
import type { CniInterface, CniResult, CniRoute } from '../../cni/types';
import type { IpamResult } from '../../ipam';
import type { AttachRequest, DriverEnv } from '../driver';
import { isMissingLink } from './host-links';
import { plumbPodInterface, podResult } from './pod-interface';

/**
 * A random unicast, locally administered MAC, as the kernel would pick. Choosing it here means the result needs
 * no read-back of the host link, and a MAC that was set (not random) is one udev's MACAddressPolicy leaves alone,
 * so the MAC in the result stays true.
 */
export function randomMac(): string {
  const b = randomBytes(6);
  b[0] = (b[0]! & 0xfe) | 0x02;
  return [...b].map((x) => x.toString(16).padStart(2, '0')).join(':');
}

/** A stable host-side name per attachment, so a retry or recovery finds the same link. */
export const hostVethName = (containerId: string, ifname: string): string =>
  `veth${createHash('sha256').update(`${containerId}/${ifname}`).digest('hex').slice(0, 11)}`;

export interface BridgePort {
  readonly bridge: string;
  readonly mtu?: number;
  readonly hairpin?: boolean;
  /** The netns standing in for the node (tests); the daemon's own when undefined. */
  readonly node?: string;
  readonly ipam: IpamResult | undefined;
  readonly routes?: readonly CniRoute[];
  /**
   * Makes sure the bridge exists and answers its MAC; `again` is set after the bridge was found missing
   * (deleted by hand since it was last ensured), and must then recreate it rather than trust a cache.
   */
  readonly ensureBridge: (again: boolean) => Promise<Result<{ readonly mac?: string }>>;
}

export async function attachBridgePort(req: AttachRequest, env: DriverEnv, port: BridgePort): Promise<Result<CniResult>> {
  const what = `network ${req.network.key}`;
  let bridge = await port.ensureBridge(false);
  if (!bridge.ok) return bridge;
  const host = hostVethName(req.containerId, req.ifname);
  await env.record({ kind: 'deleteLink', ...(port.node ? { netns: port.node } : {}), name: host });
  let bridgeMissing = false;
  const hostMac = randomMac();
  const plumb = () =>
    plumbPodInterface(req, env, {
      ...(port.node ? { node: port.node } : {}),
      create: [
        {
          op: 'linkAdd',
          link: {
            kind: 'veth', name: host, mac: hostMac, up: true, bridge: port.bridge,
            ...(port.mtu ? { mtu: port.mtu } : {}),
            ...(env.hostLinkGroup !== undefined ? { group: env.hostLinkGroup } : {}),
            peer: { name: req.ifname, netns: req.netns, ...(req.mac ? { mac: req.mac } : {}) },
          },
        },
        ...(port.hairpin ? [{ op: 'linkSet' as const, name: host, hairpin: true }] : []),
      ],
      createFailed: (e) => {
        bridgeMissing = isMissingLink(e, port.bridge);
        return e.is('EEXIST')
          ? new CniError(CniCode.Internal, `${what}: interface ${req.ifname} already exists in ${req.netns} or host link ${host} exists`, e.details)
          : e.withContext(`${what}: creating veth ${host} <-> ${req.ifname}`);
      },
      ipam: port.ipam,
      ...(port.routes ? { routes: port.routes } : {}),
    });
  let plumbed = await plumb();
  if (!plumbed.ok && bridgeMissing) {
    bridge = await port.ensureBridge(true);
    if (!bridge.ok) return bridge;
    plumbed = await plumb();
  }
  if (!plumbed.ok) return plumbed;
  const hostInterfaces: CniInterface[] = [{ name: port.bridge, ...(bridge.value.mac ? { mac: bridge.value.mac } : {}) }, { name: host, mac: hostMac }];
  return ok(podResult({ hostInterfaces, ifname: req.ifname, netns: req.netns, link: plumbed.value.link, ipam: port.ipam, routes: plumbed.value.routes }));
}
