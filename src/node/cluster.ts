/**
 * plexusd and the cluster. With an API, NADs and pods come from it (both caches loaded before the daemon says it is
 * ready), and status and events go to it; standalone, NADs come from the directory and pod annotations from the
 * runtime. The client library is loaded only where an API may be configured: a standalone node does not pay for it.
 * With an API, this node's Lease says it is alive, and cluster IPAM (types plexus and whereabouts) allocates in blocks
 * this node claims, reclaiming others' only when their Lease has expired; host-local stays local.
 */
import type { Logger } from 'pino';
import { networkClaims } from '../drivers/registry';
import type { IpamBackend, Ipam, IpamConfig } from '../ipam';
import { parseIpamConfig } from '../ipam';
import type { ClusterIpam } from '../ipam/cluster/cluster-ipam';
import type { ApiConnection } from '../k8s/connect';
import type { NodeLeases } from '../k8s/node-lease';
import type { DaemonMetrics } from '../metrics/metrics';
import { NetworkDirectory } from '../networks/directory';
import type { NetworkSource } from '../networks/source';
import type { DaemonConfig } from './config';

export interface ClusterParts {
  readonly api?: ApiConnection;
  readonly leases?: NodeLeases;
  readonly clusterIpam?: ClusterIpam;
  readonly ipam: IpamBackend;
  readonly networks: NetworkSource;
  /** plexus_node_lease_conflict on /metrics, when there is a node lease. */
  readonly leaseMetric?: (metrics: DaemonMetrics) => void;
}

export async function connectCluster(config: DaemonConfig, log: Logger, hostLocal: Ipam): Promise<ClusterParts> {
  const mayHaveApi = config.kubeconfig !== undefined || process.env.KUBERNETES_SERVICE_HOST;
  const api = mayHaveApi ? (await import('../k8s/connect')).connectToApi(config, log, networkClaims) : undefined;
  if (!api) {
    const networks = new NetworkDirectory(config.networksDir, { cniConfDir: config.cniConfDir });
    return { ipam: hostLocal, networks };
  }
  const nodeLease = await import('./node-lease');
  const leases = nodeLease.nodeLeaseFor(api.client, api.nodeName, config.stateDir, config.nodeLeaseSeconds, log);
  const { ClusterIpam } = await import('../ipam/cluster/cluster-ipam');
  const clusterIpam = await ClusterIpam.open(
    hostLocal,
    config.stateDir,
    config.stateSync,
    api.ipamApi,
    {
      node: api.nodeName,
      reconcileMs: config.ipamReconcileSeconds * 1000,
      nodeGraceMs: config.ipamNodeGraceSeconds * 1000,
      liveness: leases,
      networks: () => clusterNetworksOf(api.networks),
    },
    log,
  );
  const leaseMetric = (metrics: DaemonMetrics): void => nodeLease.leaseMetric(leases, metrics.registry);
  return { api, leases, clusterIpam, ipam: clusterIpam, networks: api.networks, leaseMetric };
}

/** The networks of a source with their IPAM configs, in name order (the order pools are created in at start). */
export function clusterNetworksOf(networks: NetworkSource): { network: string; config: IpamConfig }[] {
  const sorted = [...networks.list().networks].sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
  return sorted.flatMap((n) =>
    n.plugins.flatMap((p) => {
      const ipam = p.ipam && typeof p.ipam === 'object' ? parseIpamConfig(p.ipam) : undefined;
      return ipam?.ok ? [{ network: n.cniName, config: ipam.value }] : [];
    }),
  );
}
