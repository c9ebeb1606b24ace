/**
 * The NPWG network-status document (k8s.v1.cni.cncf.io/network-status) for one pod, computed from the
 * results of its attachments. Exactly one entry is `default: true`: the cluster default network.
 */
import { definedFields } from '../common/defined-fields';
import type { CniResult } from '../cni/types';

export interface NetworkStatusEntry {
  readonly name: string;
  readonly interface: string;
  readonly ips: readonly string[];
  readonly mac?: string;
  readonly mtu?: number;
  readonly default: boolean;
  readonly dns: Readonly<Record<string, unknown>>;
  readonly 'device-info'?: Readonly<Record<string, unknown>>;
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

export function networkStatus(outcomes: readonly AttachmentOutcome[]): NetworkStatusEntry[] {
  return outcomes.map((o) => {
    // The pod's interface: a link in its netns, or (memif) a socket the pod connects to.
    const index = o.result.interfaces.findIndex(
      (i) => (i.sandbox !== undefined || i.socketPath !== undefined) && i.name === o.ifname,
    );
    const iface = index >= 0 ? o.result.interfaces[index] : undefined;
    const ips = o.result.ips
      .filter((ip) => index < 0 || ip.interface === undefined || ip.interface === index)
      .map((ip) => ip.address.split('/')[0] ?? ip.address);
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
      ips,
      mac: iface?.mac || undefined,
      mtu: iface?.mtu || undefined,
      default: o.isDefault,
      dns: { ...(o.result.dns ?? {}) },
      'device-info': deviceInfo,
    });
  });
}

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
  return { interfaces, ips, routes, ...(dns ? { dns } : {}) };
}
