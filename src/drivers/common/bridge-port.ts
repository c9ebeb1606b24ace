/**
 * A pod attached to a bridge on the node through a veth whose peer is born in the pod netns with its final
 * name: the bridge driver's way, and the vxlan overlay's (whose bridge also holds the VXLAN device).
 */
import { type Result, ok } from '../../cni/errors';
import type { CniInterface, CniResult, CniRoute } from '../../cni/types';
import type { IpamResult } from '../../ipam';
import type { AttachRequest, DriverEnv } from '../driver';
import { isMissingLink } from './host-links';
import { prepareHostVeth } from './host-veth';
import { plumbPodInterface, podResult } from './pod-interface';

export { hostVethName } from './host-veth';

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

export async function attachBridgePort(
  req: AttachRequest,
  env: DriverEnv,
  port: BridgePort,
): Promise<Result<CniResult>> {
  let bridge = await port.ensureBridge(false);
  if (!bridge.ok) return bridge;
  const veth = await prepareHostVeth(req, env, {
    bridge: port.bridge,
    ...(port.mtu ? { mtu: port.mtu } : {}),
    ...(port.node ? { node: port.node } : {}),
  });
  let bridgeMissing = false;
  const plumb = () =>
    plumbPodInterface(req, env, {
      ...(port.node ? { node: port.node } : {}),
      create: [veth.create, ...(port.hairpin ? [{ op: 'linkSet' as const, name: veth.name, hairpin: true }] : [])],
      createFailed: (e) => {
        bridgeMissing = isMissingLink(e, port.bridge);
        return veth.createFailed(e);
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
  const hostInterfaces: CniInterface[] = [
    { name: port.bridge, ...(bridge.value.mac ? { mac: bridge.value.mac } : {}) },
    { name: veth.name, mac: veth.mac },
  ];
  return ok(
    podResult({
      hostInterfaces,
      ifname: req.ifname,
      netns: req.netns,
      link: plumbed.value.link,
      ipam: port.ipam,
      routes: plumbed.value.routes,
    }),
  );
}
