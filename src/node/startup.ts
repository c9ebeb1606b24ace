/**
 * plexusd's startup, one step per module, in the order they run: the node's state (node-state.ts), the Kubernetes API
 * and cluster IPAM (cluster.ts), devices, drivers and the process-wide limits (devices-and-drivers.ts), the engine, the
 * DRA plugin (dra.ts) and the engine's socket (serve.ts), then what runs beside CNI calls (services.ts). The daemon it
 * answers stops them again within one budget, the last started first (shutdown.ts).
 */
import { dirname } from 'node:path';
import type { Logger } from 'pino';
import type { AttachmentEngine } from '../engine/engine';
import { replaySpooledDels } from '../engine/recovery';
import { MultusTakeover } from '../install/multus-takeover';
import { hostLocalStoreProblems } from '../ipam/host-local-audit';
import { conflistWriter, planConflist } from './cni-config-install';
import { clusterNetworksOf, connectCluster, type ClusterParts } from './cluster';
import type { DaemonConfig } from './config';
import { devicesAndDrivers, kubeletPodResources } from './devices-and-drivers';
import { createDra } from './dra';
import { openNodeState, type NodeState } from './node-state';
import { makeEngine, serve } from './serve';
import { startServices } from './services';
import { StopBudget, stopDaemon } from './shutdown';

/** A running plexusd: `stop` drains its calls and stops what startup started, within --drain-seconds. */
export interface Daemon {
  stop(): Promise<void>;
}

/** Starts plexusd; undefined (with the reason logged as fatal) when it cannot start. */
export async function startDaemon(config: DaemonConfig, log: Logger): Promise<Daemon | undefined> {
  const conflist = planConflist(config, log);
  if (conflist === false) return undefined;
  const node = await openNodeState(config, log);
  const cluster = await connectCluster(config, log, node.hostLocal);
  const { api } = cluster;
  const podResources = kubeletPodResources(config, api);
  // DRA's stale-claim check asks which pods have attachments here: the engine's records, once it exists.
  const attachedPods = async (): Promise<ReadonlySet<string>> =>
    new Set((await engine.records()).flatMap((r) => r.meta.pod.uid ?? []));
  const dra = await createDra(config, log, { api, podResources, attachedPods });
  const plumbing = await devicesAndDrivers(config, log, { slots: node.slots, api, podResources, dra });
  if (!plumbing) return undefined;
  const engine = makeEngine(config, log, { node, cluster, plumbing, dra });
  // The kubelet's Prepare needs only DRA's records and the API client, and a Prepare it cannot make costs the pod a
  // resync of 60-90 s (docs/dra.md): the plugin is served before the journal's recovery and the API's caches.
  await dra?.start();
  const takeover = multusTakeover(config, log, cluster);
  const served = await serve(config, log, { node, cluster, slots: plumbing.slots, takeover }, engine);
  if (!served) return undefined;
  const { journal, kernel } = node;
  const services = await startServices(config, log, {
    cluster,
    plumbing,
    journal,
    kernel,
    engine,
    spoolDir: served.spoolDir,
  });
  await shareHostLocalLeases(node, cluster, log);
  // The takeover's first attempt, at once, must find what Whereabouts holds read.
  if (takeover) await cluster.clusterIpam?.readWhereabouts(clusterNetworksOf(cluster.networks));
  const writeConflist = conflist ? await conflistWriter(config, conflist, cluster.api, log) : undefined;
  served.state.ready = true;
  const where = { socket: config.socket, stateDir: config.stateDir, networksDir: config.networksDir };
  log.info({ ...where, ...services.recovery }, 'plexusd ready');
  writeConflist?.();
  const takingOver = conflist ? takeOverWhenReady(takeover) : undefined;
  const spool = replaySpoolEvery(config.spoolScanSeconds * 1000, served.spoolDir, engine, log);
  const running = { log, node, cluster, plumbing, engine, served, services, dra };
  return {
    stop: async () => {
      const budget = new StopBudget(config.drainSeconds * 1000);
      clearInterval(spool);
      if (takingOver) clearInterval(takingOver);
      await stopDaemon(running, budget);
    },
  };
}

/**
 * Native host-local leases go into host-local's store of their network before the first call, not at the network's
 * first allocation: a delegated host-local (Multus's pods, plexus.io/delegate) must never find one missing.
 */
async function shareHostLocalLeases(node: NodeState, cluster: ClusterParts, log: Logger): Promise<void> {
  for (const problem of await node.hostLocal.shareHeld(clusterNetworksOf(cluster.networks)))
    log.warn({ problem }, "leases of a host-local network could not be written into host-local's store");
}

/** How often a takeover from Multus that something blocks is tried again. */
const TAKEOVER_RETRY_MS = 5000;

/**
 * With takeOverMultus: the takeover, blocked while a host-local network's store (which the pods Multus made may hold
 * addresses in) cannot be read in full, or what Whereabouts holds while a network uses it (docs/migrate-from-multus.md).
 */
function multusTakeover(config: DaemonConfig, log: Logger, cluster: ClusterParts): MultusTakeover | undefined {
  if (!config.installCniConfig || !config.takeOverMultus) return undefined;
  const blockers = (): string[] => {
    const networks = clusterNetworksOf(cluster.networks);
    const whereabouts = cluster.clusterIpam?.takeoverProblems(networks) ?? [];
    return [...hostLocalStoreProblems(networks, config.hostLocalDataDir), ...whereabouts];
  };
  return new MultusTakeover(dirname(config.installCniConfig), log, blockers);
}

/** Takes the node over once plexusd is ready, trying again while it is blocked; the timer to clear at stop. */
function takeOverWhenReady(takeover: MultusTakeover | undefined): NodeJS.Timeout | undefined {
  if (!takeover || takeover.attempt()) return undefined;
  const timer = setInterval(() => {
    if (takeover.attempt()) clearInterval(timer);
  }, TAKEOVER_RETRY_MS);
  return timer;
}

/** DELs spooled while the daemon was briefly unreachable (or answering 503) are replayed without a restart. */
function replaySpoolEvery(intervalMs: number, spoolDir: string, engine: AttachmentEngine, log: Logger): NodeJS.Timeout {
  let scanning = false;
  return setInterval(() => {
    if (scanning) return;
    scanning = true;
    replaySpooledDels(spoolDir, engine, log)
      .catch((e: unknown) => log.error({ err: e }, 'spool scan failed'))
      .finally(() => {
        scanning = false;
      });
  }, intervalMs);
}
