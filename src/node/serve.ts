/**
 * The engine and the socket it answers on. The socket listens before recovery (answering 503 until the daemon is
 * ready) so plexus-cni waits instead of spooling or failing; metrics and the health probes come with it.
 */
import { join } from 'node:path';
import type { Logger } from 'pino';
import { DaemonServer } from '../api/server';
import { prepareSocketDir } from '../api/socket-dir';
import type { DraDriver } from '../dra';
import { AttachmentEngine, type EngineSettings } from '../engine/engine';
import { fanOut } from '../engine/status-sink';
import { daemonTeardownSettings } from '../engine/teardown/background';
import { DaemonHealth, type ExternalProblem } from '../metrics/health';
import type { MultusTakeover } from '../install/multus-takeover';
import { DaemonMetrics } from '../metrics/metrics';
import { listenMetrics } from '../metrics/tcp';
import type { ClusterParts } from './cluster';
import type { DaemonConfig } from './config';
import type { DevicesAndDrivers } from './devices-and-drivers';
import type { NodeState } from './node-state';
import { definedFields } from '../common/defined-fields';

/** What the engine is plugged into: the node's state, the cluster's parts, devices and drivers, DRA. */
export interface EngineParts {
  readonly node: NodeState;
  readonly cluster: ClusterParts;
  readonly plumbing: DevicesAndDrivers;
  readonly dra: DraDriver | undefined;
}

export function makeEngine(config: DaemonConfig, log: Logger, parts: EngineParts): AttachmentEngine {
  const { node, cluster, plumbing, dra } = parts;
  const { api } = cluster;
  const { devices, foreign } = plumbing;
  const engine = new AttachmentEngine({
    ports: {
      kernel: node.kernel,
      ipam: cluster.ipam,
      journal: node.journal,
      networks: cluster.networks,
      drivers: plumbing.drivers,
      ...definedFields({ foreign }),
      ...(api ? { statusSink: dra ? fanOut(api.sink, dra.statusSink) : api.sink, pods: api.pods } : {}),
      ...(dra ? { claims: dra.claimed, claimSink: dra.claimStatus } : {}),
      ...definedFields({ devices }),
    },
    settings: engineSettings(config, devices !== undefined),
    log,
  });
  api?.plugEngine(engine);
  return engine;
}

/** The engine's settings, from plexusd's flags; device-info files are read only where a device source is. */
function engineSettings(config: DaemonConfig, withDevices: boolean): EngineSettings {
  return {
    cniBinDir: config.cniBinDir,
    naming: config.naming,
    selectionAnnotation: config.selectionAnnotation,
    defaultNetworks: config.defaultNetworks,
    limits: { interfacesPerPod: config.maxInterfacesPerPod, annotationBytes: config.maxAnnotationBytes },
    maxNodeAttachments: config.maxNodeAttachments,
    ...definedFields({ defaultNetwork: config.defaultNetwork || undefined, hostLinkGroup: config.hostLinkGroup }),
    namespaceIsolation: config.namespaceIsolation,
    globalNamespaces: config.globalNamespaces,
    systemNamespaces: config.systemNamespaces,
    ...definedFields({
      readinessIndicatorFile: config.readinessIndicatorFile || undefined,
      auxiliaryChain: config.auxiliaryChain || undefined,
    }),
    ...(withDevices ? { deviceInfoDir: config.deviceInfoDir } : {}),
    // DEL answers before the kernel has deleted the links (docs/performance.md, "DEL").
    teardown: daemonTeardownSettings(),
  };
}

const takeoverProblems = (takeover: MultusTakeover | undefined): ExternalProblem[] =>
  (takeover?.problems() ?? []).map((problem) => ({ check: 'multusTakeover', problem, blocksServing: true }));

export interface Served {
  readonly server: DaemonServer;
  readonly state: { ready: boolean };
  readonly spoolDir: string;
  readonly metricsListener?: { close(): Promise<void> };
}

/** Undefined (logged as fatal) when the socket cannot be made or listened on. */
export async function serve(
  config: DaemonConfig,
  log: Logger,
  parts: {
    node: NodeState;
    cluster: ClusterParts;
    slots: DevicesAndDrivers['slots'];
    /** A takeover from Multus that something may block: readiness fails while it does. */
    takeover?: MultusTakeover | undefined;
  },
  engine: AttachmentEngine,
): Promise<Served | undefined> {
  const { node, cluster } = parts;
  const { api } = cluster;
  const state = { ready: false };
  const metrics = await daemonMetrics(config, cluster, engine, () => server.calls);
  const server = new DaemonServer(
    { socketPath: config.socket, slots: parts.slots, observer: metrics, metrics },
    engine,
    state,
    log,
  );
  const socketDir = prepareSocketDir(config.socket, process.geteuid?.() ?? 0);
  if (!socketDir.ok) {
    log.fatal({ socket: config.socket }, socketDir.error);
    return undefined;
  }
  const listening = await server.listen();
  if (!listening.ok) {
    log.fatal({ socket: config.socket }, listening.error);
    return undefined;
  }
  const health = new DaemonHealth({
    // A cheap rtnetlink call through the worker: what every CNI call waits for.
    kernelAnswers: async () => {
      const lo = await node.kernel.getLink(undefined, 'lo');
      if (!lo.ok) throw lo.error;
    },
    ready: () => state.ready,
    journalWritable: () => node.journal.writable(),
    problems: () => [...(api?.refusals.problems() ?? []), ...takeoverProblems(parts.takeover)],
    ...(config.memoryCeilingMib !== undefined ? { memoryCeilingBytes: config.memoryCeilingMib * 1048576 } : {}),
  });
  const metricsListener = config.metricsAddress
    ? await listenMetrics(config.metricsAddress, metrics, health)
    : undefined;
  if (metricsListener)
    log.info({ address: metricsListener.address }, 'serving /metrics, /healthz and /readyz over TCP');
  return { server, state, spoolDir: socketDir.value.spoolDir, ...definedFields({ metricsListener }) };
}

async function daemonMetrics(
  config: DaemonConfig,
  cluster: ClusterParts,
  engine: AttachmentEngine,
  calls: () => DaemonServer['calls'],
): Promise<DaemonMetrics> {
  const { api } = cluster;
  const apiWriteRetries = api ? (await import('../k8s/background-writes')).BackgroundWrites : undefined;
  const metrics = new DaemonMetrics({
    records: () => engine.records(),
    recordOf: (cid, ifname) => engine.recordOf(cid, ifname),
    journalDir: join(config.stateDir, 'journal'),
    calls,
    teardowns: () => engine.teardownStats(),
    ...(apiWriteRetries ? { apiWriteRetries: () => apiWriteRetries.retried } : {}),
    ...(api ? { apiForbidden: () => api.refusals.totals() } : {}),
  });
  cluster.leaseMetric?.(metrics);
  return metrics;
}
