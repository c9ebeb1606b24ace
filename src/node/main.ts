/** plexusd: the Plexus node daemon. */
import { mkdir } from 'node:fs/promises';
import { join, dirname } from 'node:path';
import pino from 'pino';
import { builtInDrivers, createMemifDriver, DriverRegistry } from '../drivers/registry';
import { createDelegateDriver, ExecLimits, execPlugin } from '../drivers/delegate';
import { MultusSandboxes } from '../adopt/multus-sandboxes';
import { CallSlots } from '../common/call-slots';
import { Ipam, type IpamConfig, parseIpamConfig } from '../ipam';
import { Kernel } from '../kernel/kernel';
import { NetworkDirectory } from '../networks/directory';
import type { NetworkSource } from '../networks/source';
import { AttachmentEngine } from '../engine/engine';
import { fanOut } from '../engine/status-sink';
import { loadDaemonConfig, USAGE, type DaemonConfig } from './config';
import { loadResources } from '../deviceplugin/config';
import type { KubeApiClient } from '../k8s/api-client';
import { Journal } from '../engine/journal';
import { acquireInstanceLock } from './instance-lock';
import { recover, replaySpooledDels } from '../engine/recovery';
import { daemonTeardownSettings } from '../engine/teardown/background';
import { DaemonServer } from '../api/server';
import { prepareSocketDir } from '../api/socket-dir';
import { DevicePlugins, PodResourcesClient } from '../deviceplugin';
import { conflistForDaemon, replaceFile } from '../install/cni-conf';
import { takeOverFromMultus } from '../install/multus-takeover';
import { DaemonMetrics } from '../metrics/metrics';
import { listenMetrics } from '../metrics/tcp';
import { DaemonHealth } from '../metrics/health';
import type { DraDriver } from '../dra';

async function main(): Promise<number> {
  const outcome = loadDaemonConfig(process.argv.slice(2));
  if (outcome.kind === 'help') {
    process.stdout.write(`${USAGE}\n`);
    return 0;
  }
  if (outcome.kind === 'error') {
    process.stderr.write(`plexusd: ${outcome.message}\n${USAGE}\n`);
    return 2;
  }
  const config = outcome.config;
  const log = pino({ level: config.logLevel, base: { svc: 'plexusd' } }, pino.destination(2));
  // Plexus's conflist for the runtime is made before anything starts (a default network file it cannot read stops
  // plexusd here) and written only once plexusd is ready, so the runtime never sends a pod to a daemon that cannot answer.
  const conflist = config.installCniConfig ? conflistForDaemon(config.defaultNetwork, config.socket) : undefined;
  if (conflist && !conflist.ok) {
    log.fatal({ installCniConfig: config.installCniConfig }, conflist.error.message);
    return 1;
  }

  // A daemon being replaced finishes its calls first; recovering the journal before that would undo them.
  await mkdir(config.stateDir, { recursive: true, mode: 0o700 });
  const lock = await acquireInstanceLock(config.stateDir, (holder) => log.info({ holder }, 'waiting for the previous plexusd to finish its calls'));
  const kernel = new Kernel(config.kernelThreads);
  const hostLocal = await Ipam.open(join(config.stateDir, 'ipam'), {
    sync: config.stateSync,
    onSkipped: (file, reason) => log.warn({ file, reason }, 'lease store: skipped an entry that is not a lease file'),
  });
  const journal = await Journal.open(join(config.stateDir, 'journal'), config.stateSync);
  // With an API, NADs and pods come from it (both caches loaded before the daemon says it is ready), and status and
  // events go to it; standalone, NADs come from the directory and pod annotations from the runtime. The client
  // library is loaded only where an API may be configured: a standalone node does not pay for it.
  const api = config.kubeconfig !== undefined || process.env.KUBERNETES_SERVICE_HOST ? (await import('../k8s/connect')).connectToApi(config, log) : undefined;
  // With an API, this node's Lease says it is alive, and cluster IPAM (types plexus and whereabouts) allocates in blocks
  // this node claims, reclaiming others' only when their Lease has expired; host-local stays local.
  const nodeLease = api ? await import('./node-lease') : undefined;
  const leases = api && nodeLease?.nodeLeaseFor(api.client, api.nodeName, config.stateDir, config.nodeLeaseSeconds, log);
  const cluster = api && leases
    ? await (await import('../ipam/cluster/cluster-ipam')).ClusterIpam.open(hostLocal, config.stateDir, config.stateSync, api.ipamApi, {
        node: api.nodeName, reconcileMs: config.ipamReconcileSeconds * 1000, nodeGraceMs: config.ipamNodeGraceSeconds * 1000, liveness: leases,
        networks: () => clusterNetworksOf(api.networks),
      }, log)
    : undefined;
  const ipam = cluster ?? hostLocal;
  const networks: NetworkSource = api?.networks ?? new NetworkDirectory(config.networksDir, { cniConfDir: config.cniConfDir });
  // On a Kubernetes node, networks naming a resource get their device from the kubelet's pod-resources API.
  const podResources = api || config.devicePluginConfig ? new PodResourcesClient(config.podResourcesSocket) : undefined;
  // ... and from other DRA drivers' claims, as Multus reads them (src/dra/consumer): merged after the kubelet's.
  const consumer = api && podResources ? await import('../dra/consumer') : undefined;
  const claimed = consumer && api && new consumer.ClaimDeviceReader(new consumer.ApiClaimsPort(api.client), {
    log: log.child({ component: 'dra-consumer' }),
  });
  const devices = claimed && podResources ? consumer.withClaimedDevices(podResources, claimed) : podResources;
  // A device prepared for a plexus.io claim is not offered by the device plugin meanwhile (set once DRA runs).
  const draHolds: { check?: (resourceName: string, deviceID: string) => boolean } = {};
  const devicePlugins = config.devicePluginConfig && podResources
    ? DevicePlugins.load(config.devicePluginConfig, {
        devicePluginDir: config.devicePluginDir, deviceInfoDir: config.deviceInfoDir, stateDir: config.stateDir,
        // memif devices may follow the node's switch (healthFromSwitch), through the memif driver's connection to it.
        switchReady: () => memif.switchReady(),
        heldByDra: (resourceName, deviceID) => draHolds.check?.(resourceName, deviceID) ?? false,
      }, podResources, log)
    : undefined;
  if (devicePlugins && !devicePlugins.ok) {
    log.fatal({ devicePluginConfig: config.devicePluginConfig }, devicePlugins.error.message);
    return 1;
  }
  // memif networks: ports on the node's userspace switch, with sockets from plexusd's own memif devices.
  const memif = createMemifDriver({
    defaultOvsdbSocket: config.ovsdbSocket,
    owner: api?.nodeName ?? 'plexus',
    ...(devicePlugins?.ok ? { deviceSocket: (resource: string, id: string) => devicePlugins.value.memifSocket(resource, id) } : {}),
  });
  // CNI calls at once, node-wide; a call waiting on a delegated plugin lends its slot, and each delegated network has
  // its own share of plugin execs, so one hung plugin stalls only its own network.
  const slots = new CallSlots(config.maxConcurrent, config.maxQueued);
  const execLimits = new ExecLimits({
    perNetwork: config.delegateShare, total: config.maxDelegateExecs, maxQueued: config.maxQueued, lendSlot: (wait) => slots.lendWhile(wait),
  });
  const drivers = new DriverRegistry(builtInDrivers(memif), createDelegateDriver({ limits: execLimits }));
  // Sandboxes Multus made before Plexus took the node over: their DEL is run as Multus would have.
  const foreign = config.multusCacheDir
    ? new MultusSandboxes({ cacheDir: config.multusCacheDir, cniBinDir: config.cniBinDir, exec: (call) => execPlugin(call, { limits: execLimits }), log: log.child({ component: 'adopt' }) })
    : undefined;
  // DRA (--dra): the same resources file's `dra` resources as ResourceSlices and a kubelet DRA plugin (docs/dra.md);
  // made before the engine, which reads the pods' claimed devices at ADD, and started once the caches are.
  const attachedPods = async (): Promise<ReadonlySet<string>> => new Set((await engine.records()).flatMap((r) => r.meta.pod.uid ?? []));
  const dra = config.dra ? await createDra(config, api, podResources, attachedPods, log) : undefined;
  const engine = new AttachmentEngine(kernel, ipam, journal, networks, drivers, {
    cniBinDir: config.cniBinDir,
    naming: config.naming,
    selectionAnnotation: config.selectionAnnotation,
    defaultNetworks: config.defaultNetworks,
    limits: { interfacesPerPod: config.maxInterfacesPerPod, annotationBytes: config.maxAnnotationBytes },
    maxNodeAttachments: config.maxNodeAttachments,
    ...(config.defaultNetwork ? { defaultNetwork: config.defaultNetwork } : {}),
    ...(config.hostLinkGroup !== undefined ? { hostLinkGroup: config.hostLinkGroup } : {}),
    namespaceIsolation: config.namespaceIsolation,
    globalNamespaces: config.globalNamespaces,
    systemNamespaces: config.systemNamespaces,
    ...(foreign ? { foreign } : {}),
    ...(config.readinessIndicatorFile ? { readinessIndicatorFile: config.readinessIndicatorFile } : {}),
    ...(api ? { statusSink: dra ? fanOut(api.sink, dra.statusSink) : api.sink, pods: api.pods } : {}),
    ...(dra ? { claims: dra.claimed, claimSink: dra.claimStatus } : {}),
    ...(devices ? { devices, deviceInfoDir: config.deviceInfoDir } : {}),
    // DEL answers before the kernel has deleted the links (docs/performance.md, "DEL").
    teardown: daemonTeardownSettings(),
  }, log);
  api?.plugEngine(engine);
  const state = { ready: false };
  const apiWriteRetries = api ? (await import('../k8s/background-writes')).BackgroundWrites : undefined;
  const metrics: DaemonMetrics = new DaemonMetrics({
    records: () => engine.records(), recordsOf: (cid) => engine.recordsOf(cid), journalDir: join(config.stateDir, 'journal'),
    calls: (): DaemonServer['calls'] => server.calls, ...(apiWriteRetries ? { apiWriteRetries: () => apiWriteRetries.retried } : {}),
    ...(api ? { apiForbidden: () => api.refusals.totals() } : {}),
  });
  if (leases) nodeLease?.leaseMetric(leases, metrics.registry);
  const server = new DaemonServer({ socketPath: config.socket, slots, observer: metrics, metrics }, engine, state, log);

  // Listen first (answering 503 while recovering) so plexus-cni waits instead of spooling or failing.
  const socketDir = prepareSocketDir(config.socket, process.geteuid?.() ?? 0);
  if (!socketDir.ok) {
    log.fatal({ socket: config.socket }, socketDir.error);
    return 1;
  }
  const { spoolDir } = socketDir.value;
  const listening = await server.listen();
  if (!listening.ok) {
    log.fatal({ socket: config.socket }, listening.error);
    return 1;
  }
  const health = new DaemonHealth({
    // A cheap rtnetlink call through the worker: what every CNI call waits for.
    kernelAnswers: async () => {
      const lo = await kernel.getLink(undefined, 'lo');
      if (!lo.ok) throw lo.error;
    },
    ready: () => state.ready,
    journalWritable: () => journal.writable(),
    ...(api ? { problems: () => api.refusals.problems() } : {}),
    ...(config.memoryCeilingMib !== undefined ? { memoryCeilingBytes: config.memoryCeilingMib * 1048576 } : {}),
  });
  const metricsListener = config.metricsAddress ? await listenMetrics(config.metricsAddress, metrics, health) : undefined;
  if (metricsListener) log.info({ address: metricsListener.address }, 'serving /metrics, /healthz and /readyz over TCP');
  const report = await recover(spoolDir, engine, log, journal);
  // Until the caches have synced, CNI calls are answered 503 (plexus-cni waits) and STATUS says not ready.
  await api?.start();
  await leases?.start();
  await cluster?.start();
  // Pools of the cluster-IPAM networks the API has now, read (or created) ahead of their first pods, in name order.
  if (cluster) void cluster.preparePools(clusterNetworksOf(networks));
  await devicePlugins?.value.start();
  await dra?.start();
  if (dra) {
    draHolds.check = (r, id) =>
      dra.prepared.all().some((c) => c.devices.some((d) => d.resourceName === r && d.deviceID === id));
  }
  // Pods gone without a DEL (their netns removed, no pod of that UID left here) lose their attachments.
  const stopOrphans = api && config.orphanSweepSeconds > 0 ? (await import('../k8s/orphans')).sweepOrphans(engine, api.pods, config.orphanSweepSeconds * 1000, log.child({ component: 'orphans' })) : undefined;
  // A switch that restarted without its database gets the pods' ports back from the journal.
  const stopResync = memif.startResync(() => engine.switchPorts(), config.switchResyncSeconds * 1000, log.child({ component: 'memif' }));
  state.ready = true;
  log.info({ socket: config.socket, stateDir: config.stateDir, networksDir: config.networksDir, ...report }, 'plexusd ready');
  if (conflist?.ok && config.installCniConfig) {
    const changed = replaceFile(config.installCniConfig, conflist.value, 0o644);
    log.info({ path: config.installCniConfig, changed }, 'CNI config installed: the runtime sends new pods to plexus-cni');
    takeOverFromMultus(dirname(config.installCniConfig), config.takeOverMultus, log);
  }

  // DELs spooled while the daemon was briefly unreachable (or answering 503) are replayed without a restart.
  let scanning = false;
  const spoolTimer = setInterval(() => {
    if (scanning) return;
    scanning = true;
    replaySpooledDels(spoolDir, engine, log)
      .catch((e: unknown) => log.error({ err: e }, 'spool scan failed'))
      .finally(() => {
        scanning = false;
      });
  }, config.spoolScanSeconds * 1000);

  await new Promise<void>((resolve) => {
    const stop = (signal: string): void => {
      log.info({ signal }, 'stopping');
      resolve();
    };
    process.once('SIGTERM', () => stop('SIGTERM'));
    process.once('SIGINT', () => stop('SIGINT'));
  });
  clearInterval(spoolTimer);
  state.ready = false;
  const cut = await server.close(config.drainSeconds * 1000);
  await metricsListener?.close();
  if (cut) log.warn({ cut, drainSeconds: config.drainSeconds }, 'calls still running after the drain time were cut off; plexus-cni retries them');
  else log.info('drained: every accepted call was answered');
  // Teardowns DELs left to the background are finished now; any left, the next start finishes (their records say so).
  const teardownsLeft = await engine.drainTeardowns(config.drainSeconds * 1000);
  if (teardownsLeft) log.warn({ teardownsLeft }, 'teardowns still pending at the stop; the next start finishes them');
  stopResync();
  stopOrphans?.();
  memif.close();
  await devicePlugins?.value.stop();
  await dra?.stop();
  podResources?.close();
  const ipamStopped = cluster?.stop(); // ends when api.stop() closes the client its watch is on
  await leases?.stop(); // released: the next plexusd of this node takes it at once
  await api?.stop();
  await ipamStopped;
  await kernel.close();
  lock.release();
  return 0;
}

/** The DRA driver (not started), or undefined (with the reason logged) when --dra cannot work here. */
async function createDra(
  config: DaemonConfig, api: { client: KubeApiClient; nodeName: string; networks: NetworkSource } | undefined,
  podResources: PodResourcesClient | undefined, attachedPods: () => Promise<ReadonlySet<string>>, log: pino.Logger,
): Promise<DraDriver | undefined> {
  if (!api || !config.devicePluginConfig) {
    log.warn('--dra needs the Kubernetes API and --device-plugin-config (the resources file): DRA is off');
    return undefined;
  }
  const resources = loadResources(config.devicePluginConfig);
  if (!resources.ok) return undefined; // already reported by the device plugins' load of the same file
  const { DraDriver, DEFAULT_KUBELET_ROOT } = await import('../dra');
  const dra = DraDriver.create(resources.value, api.client, {
    nodeName: api.nodeName, kubeletRoot: config.kubeletRootDir ?? DEFAULT_KUBELET_ROOT, stateDir: config.stateDir,
    networks: api.networks, attachedPods,
    isolation: { namespaceIsolation: config.namespaceIsolation, globalNamespaces: config.globalNamespaces },
    ...(podResources ? { inUseByDevicePlugin: (r: string, id: string) => podResources.inUse(r, id) } : {}),
  }, log);
  if (!dra) log.warn({ devicePluginConfig: config.devicePluginConfig }, '--dra: no resource of the file offers dra');
  return dra;
}

/** The networks of a source with their IPAM configs, in name order (the order pools are created in at start). */
function clusterNetworksOf(networks: NetworkSource): { network: string; config: IpamConfig }[] {
  return [...networks.list().networks].sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0)).flatMap((n) => n.plugins.flatMap((p) => {
    const ipam = p.ipam && typeof p.ipam === 'object' ? parseIpamConfig(p.ipam) : undefined;
    return ipam?.ok ? [{ network: n.cniName, config: ipam.value }] : [];
  }));
}

main().then(
  (code) => process.exit(code),
  (e: unknown) => {
    process.stderr.write(`plexusd: fatal: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
    process.exit(1);
  },
);
