/**
 * plexusd on the Kubernetes API: loads the kubeconfig and builds what the engine uses from it (NADs and this node's
 * pods from informers; network-status and events written back), started and stopped together.
 */
import type { Logger } from 'pino';
import { CniConfDir } from '../networks/conf-dir';
import { fanOut, type StatusSink } from '../engine/status-sink';
import type { DaemonConfig } from '../node/config';
import { KubeApiClient } from './api-client';
import { EventRecorder } from './event-recorder';
import { loadKubeConfig, nodeNameOf } from './kubeconfig';
import { ApiNetworkSource } from './nad-source';
import { ApiPodSource } from './pod-source';
import { ApiStatusWriter } from './status-writer';
import { RbacRefusals } from './rbac-refusals';
import { NetworkStatusKeeper, type StatusRecords } from './status-keeper';
import { HotplugController, type NetworkChanger } from './hotplug';

/** How long shutdown waits for status and event writes still retrying: the next daemon's ADDs write their own. */
const SETTLE_MS = 2000;

export interface ApiConnection {
  readonly networks: ApiNetworkSource;
  /** Changes running pods' networks when their annotation changes (--hot-plug), through `engine`. */
  enableHotplug(engine: NetworkChanger): void;
  /** Writes back the journal's network-status of a pod when another writer changes it. */
  keepStatus(journal: StatusRecords): void;
  readonly pods: ApiPodSource;
  readonly sink: StatusSink;
  readonly client: KubeApiClient;
  /** Permissions the API refused plexusd (for /readyz and metrics). */
  readonly refusals: RbacRefusals;
  readonly nodeName: string;
  /** Resolves when both caches have synced (retrying while the API is away). */
  start(): Promise<void>;
  stop(): Promise<void>;
}

export async function connectToApi(config: DaemonConfig, log: Logger): Promise<ApiConnection | undefined> {
  const endpoint = loadKubeConfig(config.kubeconfig);
  if (!endpoint.ok) throw new Error(endpoint.error.message);
  if (!endpoint.value) return undefined;
  const nodeName = nodeNameOf(config.nodeName);
  const refusals = new RbacRefusals(log.child({ component: 'rbac' }));
  const client = new KubeApiClient(endpoint.value, {
    qps: config.kubeApiQps, burst: config.kubeApiBurst, timeoutMs: config.kubeApiTimeout * 1000, permissions: refusals,
  });
  const warn = (what: string) => (message: string) => log.warn({ err: message }, `${what} failed; retrying`);
  const networks = new ApiNetworkSource(client, new CniConfDir(config.cniConfDir), warn('watching NetworkAttachmentDefinitions'));
  const pods = new ApiPodSource(client, nodeName, warn(`watching the pods of node ${nodeName}`));
  const status = new ApiStatusWriter(client, log);
  const events = new EventRecorder(client, nodeName, log);
  let hotplug: HotplugController | undefined;
  let keeper: NetworkStatusKeeper | undefined;
  // The engine is built after this (it takes the sink): the hot-plug hook is bound when it exists.
  const afterAdd: StatusSink = { attached: (...a) => hotplug?.afterAdd.attached(...a), detached: (...a) => hotplug?.afterAdd.detached(...a), failed: () => undefined };
  const kept: StatusSink = { attached: (...a) => keeper?.sink.attached(...a), detached: (...a) => keeper?.sink.detached(...a), failed: () => undefined };
  log.info({ server: client.server, kubeconfig: endpoint.value.source, node: nodeName }, 'NetworkAttachmentDefinitions and pods come from the Kubernetes API');
  return {
    networks, pods, client, refusals, nodeName, sink: fanOut(kept, status, events, afterAdd),
    enableHotplug(engine) {
      hotplug = new HotplugController(engine, pods, events, log);
    },
    keepStatus(journal) {
      keeper = new NetworkStatusKeeper(journal, pods, status, log.child({ component: 'network-status' }));
    },
    async start() {
      await Promise.all([networks.start(), pods.start()]);
      log.info({ networks: networks.list().networks.length, pods: pods.cached }, 'API caches synced');
      await hotplug?.resyncAll();
      await keeper?.resyncAll();
    },
    async stop() {
      await hotplug?.stop();
      await Promise.race([Promise.all([status.settled(), events.settled()]), new Promise((r) => setTimeout(r, SETTLE_MS))]);
      await Promise.all([networks.stop(), pods.stop()]);
      client.close();
    },
  };
}
