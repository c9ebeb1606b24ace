/**
 * The NPWG network-status document (k8s.v1.cni.cncf.io/network-status) for one pod, computed from the
 * results of its attachments, with the fields Multus writes: exactly one entry has `default: true` (the cluster
 * default network; the others leave it out, as Multus does), `ips` only when there are some, and `gateway` (NPWG)
 * with the gateways of the attachment's default routes.
 */
import { definedFields } from '../common/defined-fields';
import type { CniResult } from '../cni/types';
import { isAuxiliaryChain } from './auxiliary-chain';

export interface NetworkStatusEntry {
  readonly name: string;
  readonly interface: string;
  readonly ips?: readonly string[];
  readonly mac?: string;
  readonly mtu?: number;
  readonly default?: true;
  readonly dns: Readonly<Record<string, unknown>>;
  readonly 'device-info'?: Readonly<Record<string, unknown>>;
  readonly gateway?: readonly string[];
}

/** An interface an ADD or a change attached, as its AddedInterface event tells it. */
export interface AddedInterface {
  /** "namespace/name" of the network. */
  readonly network: string;
  readonly ifname: string;
  /** Its addresses with their prefix lengths (10.1.1.21/24). */
  readonly addresses: readonly string[];
}

export interface AttachmentOutcome {
  /** "namespace/name" of the network. */
  readonly network: string;
  readonly ifname: string;
  readonly isDefault: boolean;
  readonly result: CniResult;
  /** The device-info file the device plugin wrote for the attachment's kubelet device (NPWG); wins over the result's. */
  readonly deviceInfo?: Readonly<Record<string, unknown>>;
}

/** The pod's interface in the result (a link in its netns, or a memif socket the pod connects to), by index. */
const podInterfaceIndex = (o: AttachmentOutcome): number =>
  o.result.interfaces.findIndex((i) => (i.sandbox !== undefined || i.socketPath !== undefined) && i.name === o.ifname);

/** The addresses (with prefix length) of the pod's interface: those of its index, or every one without an index. */
const addressesOf = (o: AttachmentOutcome, index: number): string[] =>
  o.result.ips
    .filter((ip) => index < 0 || ip.interface === undefined || ip.interface === index)
    .map((ip) => ip.address);

const isDefaultDst = (dst: string): boolean => dst === '0.0.0.0/0' || dst === '::/0';

/** The gateways of the result's default routes, each once. */
const defaultGateways = (result: CniResult): string[] => [
  ...new Set(result.routes.flatMap((r) => (isDefaultDst(r.dst) && r.gw ? [r.gw] : []))),
];

/** Attachments that are a pod's networks: not the auxiliary chain, which Multus reports nowhere (no interface). */
const ofNetworks = (outcomes: readonly AttachmentOutcome[]): AttachmentOutcome[] =>
  outcomes.filter((o) => !isAuxiliaryChain(o.network));

export function networkStatus(outcomes: readonly AttachmentOutcome[]): NetworkStatusEntry[] {
  return ofNetworks(outcomes).map((o) => {
    const index = podInterfaceIndex(o);
    const iface = index >= 0 ? o.result.interfaces[index] : undefined;
    const ips = addressesOf(o, index).map((address) => address.split('/')[0] ?? address);
    const gateways = defaultGateways(o.result);
    const deviceInfo =
      o.deviceInfo ??
      (iface?.pciID
        ? { type: 'pci', version: '1.1.0', pci: { 'pci-address': iface.pciID } }
        : iface?.socketPath
          ? // The pod is the memif client ("slave" in NPWG's words); the node's switch serves the socket.
            { type: 'memif', version: '1.1.0', memif: { role: 'slave', mode: 'ethernet', path: iface.socketPath } }
          : undefined);
    return definedFields({
      name: o.network,
      interface: o.ifname,
      ips: ips.length ? ips : undefined,
      mac: iface?.mac || undefined,
      mtu: iface?.mtu || undefined,
      default: o.isDefault ? (true as const) : undefined,
      dns: { ...(o.result.dns ?? {}) },
      'device-info': deviceInfo,
      gateway: gateways.length ? gateways : undefined,
    });
  });
}

/** What the AddedInterface events of these attachments say: each pod interface and its addresses. */
export const addedInterfaces = (outcomes: readonly AttachmentOutcome[]): AddedInterface[] =>
  ofNetworks(outcomes).map((o) => ({
    network: o.network,
    ifname: o.ifname,
    addresses: addressesOf(o, podInterfaceIndex(o)),
  }));

/** One CNI result for the whole pod: interfaces concatenated, IP interface indices shifted to match. */
export function mergeResults(results: readonly CniResult[]): CniResult {
  const interfaces: CniResult['interfaces'][number][] = [];
  const ips: CniResult['ips'][number][] = [];
  const routes: CniResult['routes'][number][] = [];
  for (const r of results) {
    const offset = interfaces.length;
    interfaces.push(...r.interfaces);
    ips.push(...r.ips.map((ip) => (ip.interface === undefined ? ip : { ...ip, interface: ip.interface + offset })));
    routes.push(...r.routes);
  }
  const dns = results[0]?.dns;
  return { interfaces, ips, routes, ...definedFields({ dns }) };
}
