/**
 * A pod attached to a bridge on the node through a veth whose peer is born in the pod netns with its final
 * name: the bridge driver's way, and the vxlan overlay's (whose bridge also holds the VXLAN device).
 */
import { type Result, ok } from '../../cni/errors';
import type { BatchOp } from '../../kernel/types';
import type { CniInterface, CniResult, CniRoute } from '../../cni/types';
import type { IpamResult } from '../../ipam';
import type { AttachRequest, DriverEnv } from '../driver';
import { isMissingLink } from './host-links';
import { prepareHostVeth } from './host-veth';
import { plumbPodInterface, podResult, type Plumbing } from './pod-interface';
import { definedFields } from '../../common/defined-fields';

export { hostVethName } from './host-veth';

export interface BridgePort {
  readonly bridge: string;
  readonly mtu?: number;
  readonly hairpin?: boolean;
  /** The netns standing in for the node (tests); the daemon's own when undefined. */
  readonly node?: string;
  readonly ipam: IpamResult | undefined;
  readonly routes?: readonly CniRoute[];
  /** The routes the result reports, when they are not those added (the reference reports IPAM's as IPAM gave them). */
  readonly resultRoutes?: readonly CniRoute[];
  /** How the pod side is set up besides its addresses and routes: sysctls before it is up, DAD, left down. */
  readonly podSetup?: Pick<Plumbing, 'before' | 'dadBySysctl' | 'down'>;
  /**
   * Makes sure the bridge exists and answers its MAC; `again` is set after the bridge was found missing
   * (deleted by hand since it was last ensured), and must then recreate it rather than trust a cache.
   */
  readonly ensureBridge: (again: boolean) => Promise<Result<EnsuredBridge>>;
  /** Forgets that the bridge was ensured (its pinning, left to this port's creation, did not happen). */
  readonly forgetBridge?: () => void;
}

export interface EnsuredBridge {
  readonly mac?: string;
  /** Ops that pin the bridge's MAC, run once this ADD's port has joined (the first ADD after the bridge was ensured). */
  readonly pinAfterPort?: readonly BatchOp[];
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
    ...definedFields({ mtu: port.mtu || undefined, node: port.node || undefined }),
  });
  let bridgeMissing = false;
  const plumb = () =>
    plumbPodInterface(req, env, {
      ...definedFields({ node: port.node || undefined }),
      create: [
        veth.create,
        ...(port.hairpin ? [{ op: 'linkSet' as const, name: veth.name, hairpin: true }] : []),
        ...(bridge.ok ? (bridge.value.pinAfterPort ?? []) : []),
      ],
      createFailed: (e) => {
        bridgeMissing = isMissingLink(e, port.bridge);
        return veth.createFailed(e);
      },
      ipam: port.ipam,
      ...definedFields({ routes: port.routes }),
      ...port.podSetup,
    });
  let plumbed = await plumb();
  if (!plumbed.ok && bridgeMissing) {
    bridge = await port.ensureBridge(true);
    if (!bridge.ok) return bridge;
    plumbed = await plumb();
  }
  if (!plumbed.ok) {
    if (bridge.ok && bridge.value.pinAfterPort?.length) port.forgetBridge?.();
    return plumbed;
  }
  const hostInterfaces: CniInterface[] = [
    { name: port.bridge, ...definedFields({ mac: bridge.value.mac || undefined }) },
    { name: veth.name, mac: veth.mac },
  ];
  return ok(
    podResult({
      hostInterfaces,
      ifname: req.ifname,
      netns: req.netns,
      link: plumbed.value.link,
      ipam: port.ipam,
      routes: port.resultRoutes ?? plumbed.value.routes,
    }),
  );
}
