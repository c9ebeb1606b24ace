/**
 * What runs beside CNI calls, started once the journal is recovered: the API's caches, the node lease, cluster IPAM,
 * the device plugins, DRA, the orphan sweep and the drivers' own work (lifecycle.ts in src/drivers).
 */
import type { Logger } from 'pino';
import type { PodResourcesClient } from '../deviceplugin';
import { loadResources } from '../deviceplugin/config';
import type { AttachmentEngine } from '../engine/engine';
import type { Journal } from '../engine/journal';
import { recover } from '../engine/recovery';
import type { KubeApiClient } from '../k8s/api-client';
import { clusterNetworksOf, type ClusterParts } from './cluster';
import type { DaemonConfig } from './config';
import type { DevicesAndDrivers } from './devices-and-drivers';

export interface Services {
  readonly recovery: Awaited<ReturnType<typeof recover>>;
  readonly dra?: { stop(): Promise<void> };
  readonly stopOrphans?: () => void;
}

export async function startServices(
  config: DaemonConfig, log: Logger, parts: { cluster: ClusterParts; plumbing: DevicesAndDrivers; journal: Journal },
  engine: AttachmentEngine, spoolDir: string,
): Promise<Services> {
  const { cluster, plumbing } = parts;
  const { api, clusterIpam } = cluster;
  const recovery = await recover(spoolDir, engine, log, parts.journal);
  // Until the caches have synced, CNI calls are answered 503 (plexus-cni waits) and STATUS says not ready.
  await api?.start();
  await cluster.leases?.start();
  await clusterIpam?.start();
  // Pools of the cluster-IPAM networks the API has now, read (or created) ahead of their first pods, in name order.
  if (clusterIpam) void clusterIpam.preparePools(clusterNetworksOf(cluster.networks));
  await plumbing.devicePlugins?.start();
  // DRA (--dra): the same resources file's `dra` resources as ResourceSlices and a kubelet DRA plugin (docs/dra.md).
  const dra = config.dra ? await startDra(config, api, plumbing.podResources, log) : undefined;
  // Pods gone without a DEL (their netns removed, no pod of that UID left here) lose their attachments.
  const orphanMs = config.orphanSweepSeconds * 1000;
  const sweepOrphans = api && orphanMs > 0 ? (await import('../k8s/orphans')).sweepOrphans : undefined;
  const stopOrphans = api && sweepOrphans?.(engine, api.pods, orphanMs, log.child({ component: 'orphans' }));
  // The drivers' own work: a switch that restarted without its database gets the pods' ports back from the journal.
  await plumbing.drivers.start({
    log, recordedSteps: () => engine.committedSteps(), resyncIntervalMs: config.switchResyncSeconds * 1000,
  });
  return { recovery, ...(dra ? { dra } : {}), ...(stopOrphans ? { stopOrphans } : {}) };
}

/** The DRA driver, or undefined (with the reason logged) when --dra cannot work here. */
async function startDra(
  config: DaemonConfig, api: { client: KubeApiClient; nodeName: string } | undefined,
  podResources: PodResourcesClient | undefined, log: Logger,
): Promise<{ stop(): Promise<void> } | undefined> {
  if (!api || !config.devicePluginConfig) {
    log.warn('--dra needs the Kubernetes API and --device-plugin-config (the resources file): DRA is off');
    return undefined;
  }
  const resources = loadResources(config.devicePluginConfig);
  if (!resources.ok) return undefined; // already reported by the device plugins' load of the same file
  const { DraDriver, DEFAULT_KUBELET_ROOT } = await import('../dra');
  const dra = DraDriver.create(resources.value, api.client, {
    nodeName: api.nodeName, kubeletRoot: config.kubeletRootDir ?? DEFAULT_KUBELET_ROOT, stateDir: config.stateDir,
    ...(podResources ? { inUseByDevicePlugin: (r: string, id: string) => podResources.inUse(r, id) } : {}),
  }, log);
  if (!dra) log.warn({ devicePluginConfig: config.devicePluginConfig }, '--dra: no resource of the file offers dra');
  await dra?.start();
  return dra;
}
