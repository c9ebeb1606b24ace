/**
 * A pod attached to a bridge on the node through a veth whose peer is born in the pod netns with its final
 * name: the bridge driver's way, and the vxlan overlay's (whose bridge also holds the VXLAN device).
 */
import { createHash } from 'node:crypto';
import { CniCode, CniError, Result, ok } from '../../cni/errors';
import type { CniInterface, CniResult, CniRoute } from '../../cni/types';
import type { IpamResult } from '../../ipam';
import type { LinkInfo } from '../../kernel/types';
import type { AttachRequest, DriverEnv } from '../driver';
import { isMissingLink } from './host-links';
import { plumbPodInterface, podResult } from './pod-interface';

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
  const plumb = () =>
    plumbPodInterface(req, env, {
      ...(port.node ? { node: port.node } : {}),
      create: [
        {
          op: 'linkAdd',
          link: {
            kind: 'veth', name: host, up: true, bridge: port.bridge,
            ...(port.mtu ? { mtu: port.mtu } : {}),
            ...(env.hostLinkGroup !== undefined ? { group: env.hostLinkGroup } : {}),
            peer: { name: req.ifname, netns: req.netns, ...(req.mac ? { mac: req.mac } : {}) },
          },
        },
        ...(port.hairpin ? [{ op: 'linkSet' as const, name: host, hairpin: true }] : []),
        { op: 'linkGet', name: host },
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
  const hostLink = plumbed.value.created[plumbed.value.created.length - 1] as LinkInfo | null;
  const hostInterfaces: CniInterface[] = [
    { name: port.bridge, ...(bridge.value.mac ? { mac: bridge.value.mac } : {}) },
    { name: host, ...(hostLink?.mac ? { mac: hostLink.mac } : {}) },
  ];
  return ok(podResult({ hostInterfaces, ifname: req.ifname, netns: req.netns, link: plumbed.value.link, ipam: port.ipam, routes: plumbed.value.routes }));
}
