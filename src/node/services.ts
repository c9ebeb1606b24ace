/**
 * What runs beside CNI calls, started once the journal is recovered: the API's caches, the node lease, cluster IPAM,
 * the device plugins, the orphan sweep and the drivers' own work (lifecycle.ts in src/drivers).
 */
import type { Logger } from 'pino';
import type { AttachmentEngine } from '../engine/engine';
import type { Journal } from '../engine/journal';
import type { KernelPort } from '../kernel/kernel';
import { recover } from '../engine/recovery';
import { clusterNetworksOf, type ClusterParts } from './cluster';
import type { DaemonConfig } from './config';
import type { DevicesAndDrivers } from './devices-and-drivers';
import { definedFields } from '../common/defined-fields';

export interface Services {
  readonly recovery: Awaited<ReturnType<typeof recover>>;
  readonly stopOrphans?: () => void;
}

/** What the services run beside: the cluster's parts, devices and drivers, the node's journal and kernel, the engine. */
export interface ServiceParts {
  readonly cluster: ClusterParts;
  readonly plumbing: DevicesAndDrivers;
  readonly journal: Journal;
  readonly kernel: KernelPort;
  readonly engine: AttachmentEngine;
  /** Where plexus-cni spooled the DELs it could not deliver: recovery replays them first. */
  readonly spoolDir: string;
}

export async function startServices(config: DaemonConfig, log: Logger, parts: ServiceParts): Promise<Services> {
  const { cluster, plumbing, engine, spoolDir } = parts;
  const { api, clusterIpam } = cluster;
  const recovery = await recover(spoolDir, engine, log, parts.journal);
  // Until the caches have synced, CNI calls are answered 503 (plexus-cni waits) and STATUS says not ready.
  await api?.start();
  await cluster.leases?.start();
  await clusterIpam?.start();
  // Pools of the cluster-IPAM networks the API has now, read (or created) ahead of their first pods, in name order.
  if (clusterIpam) void clusterIpam.preparePools(clusterNetworksOf(cluster.networks));
  await plumbing.devicePlugins?.start();
  // Pods gone without a DEL (their netns removed, no pod of that UID left here) lose their attachments.
  const orphanMs = config.orphanSweepSeconds * 1000;
  const sweepOrphans = api && orphanMs > 0 ? (await import('../k8s/orphans')).sweepOrphans : undefined;
  const stopOrphans = api && sweepOrphans?.(engine, api.pods, orphanMs, log.child({ component: 'orphans' }));
  // The drivers' own work: bridges an older plexusd left unpinned get their MACs pinned; a switch that restarted without its database gets the pods' ports back from the journal.
  await plumbing.drivers.start({
    log,
    kernel: parts.kernel,
    recordedSteps: () => engine.committedSteps(),
    resyncIntervalMs: config.switchResyncSeconds * 1000,
  });
  return { recovery, ...definedFields({ stopOrphans }) };
}
