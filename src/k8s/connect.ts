/**
 * plexusd on the Kubernetes API: loads the kubeconfig and builds what the engine uses from it (NADs and this node's
 * pods from informers; network-status and events written back; hot-plug; cluster IPAM's port), started and stopped
 * together.
 */
import type { Logger } from 'pino';
import type { ClusterApi } from '../ipam/cluster/api-port';
import { CniConfDir } from '../networks/conf-dir';
import { fanOut, type StatusSink } from '../engine/status-sink';
import { KubeApiClient } from './api-client';
import { type ApiEngine, EnginePlug } from './engine-plug';
import { EventRecorder } from './event-recorder';
import { HotplugController } from './hotplug';
import { clusterIpamApi } from './ipam-api';
import { loadKubeConfig, nodeNameOf } from './kubeconfig';
import { ApiNetworkSource } from './nad-source';
import { NadRefusals } from './nad-refusals';
import type { ClaimsOf } from '../networks/exclusive-claims';
import { ApiPodSource } from './pod-source';
import { ApiStatusWriter } from './status-writer';
import { RbacRefusals } from './rbac-refusals';
import { NetworkStatusKeeper } from './status-keeper';

/** How long shutdown waits for status and event writes still retrying: the next daemon's ADDs write their own. */
const SETTLE_MS = 2000;

/** The daemon's settings the connection uses (plexusd's flags of the same names). */
export interface ApiSettings {
  /** The kubeconfig file; without it, the service account's when plexusd runs in a pod. */
  readonly kubeconfig?: string | undefined;
  readonly nodeName?: string | undefined;
  readonly kubeApiQps: number;
  readonly kubeApiBurst: number;
  /** Seconds. */
  readonly kubeApiTimeout: number;
  /** Where a NAD without a config of its own finds its conf file. */
  readonly cniConfDir: string;
  /** Change running pods' networks when their annotation changes. */
  readonly hotPlug: boolean;
}

export interface ApiConnection {
  readonly networks: ApiNetworkSource;
  readonly pods: ApiPodSource;
  readonly sink: StatusSink;
  readonly client: KubeApiClient;
  /** Cluster IPAM's way to the API. */
  readonly ipamApi: ClusterApi;
  /** Permissions the API refused plexusd (for /readyz and metrics). */
  readonly refusals: RbacRefusals;
  readonly nodeName: string;
  /**
   * Gives hot-plug (changes running pods' networks when their annotation changes) and the network-status keeper
   * (writes back the journal's status when another writer changes it) the engine; once, before start().
   */
  plugEngine(engine: ApiEngine): void;
  /** Resolves when both caches have synced (retrying while the API is away). */
  start(): Promise<void>;
  stop(): Promise<void>;
}

/** `claims`: what networks hold exclusively (the drivers say); a NAD claiming what an older one holds is refused. */
export function connectToApi(settings: ApiSettings, log: Logger, claims?: ClaimsOf): ApiConnection | undefined {
  const endpoint = loadKubeConfig(settings.kubeconfig);
  if (!endpoint.ok) throw new Error(endpoint.error.message);
  if (!endpoint.value) return undefined;
  const nodeName = nodeNameOf(settings.nodeName);
  const refusals = new RbacRefusals(log.child({ component: 'rbac' }));
  const client = new KubeApiClient(endpoint.value, {
    qps: settings.kubeApiQps,
    burst: settings.kubeApiBurst,
    timeoutMs: settings.kubeApiTimeout * 1000,
    permissions: refusals,
  });
  const warn = (what: string) => (message: string) => log.warn({ err: message }, `${what} failed; retrying`);
  const conf = new CniConfDir(settings.cniConfDir);
  const refused = new NadRefusals(client, nodeName, log.child({ component: 'networks' }));
  const networks = new ApiNetworkSource(
    client,
    conf,
    warn('watching NetworkAttachmentDefinitions'),
    claims ? { of: claims, changed: refused.changed } : undefined,
  );
  const pods = new ApiPodSource(client, nodeName, warn(`watching the pods of node ${nodeName}`));
  const apiUid = (namespace: string, name: string, uid: string): string => pods.apiUid(namespace, name, uid);
  const status = new ApiStatusWriter(client, log, { apiUid });
  const events = new EventRecorder(client, nodeName, log, { apiUid });
  const engine = new EnginePlug();
  const hotplug = settings.hotPlug ? new HotplugController(engine, pods, events, log) : undefined;
  const keeper = new NetworkStatusKeeper(engine, pods, status, log.child({ component: 'network-status' }));
  const sinks = [keeper.sink, status, events, ...(hotplug ? [hotplug.afterAdd] : [])];
  const source = { server: client.server, kubeconfig: endpoint.value.source, node: nodeName };
  log.info(source, 'NetworkAttachmentDefinitions and pods come from the Kubernetes API');
  return {
    networks,
    pods,
    client,
    ipamApi: clusterIpamApi(client),
    refusals,
    nodeName,
    sink: fanOut(...sinks),
    plugEngine: (plugged) => engine.plug(plugged),
    async start() {
      await Promise.all([networks.start(), pods.start()]);
      log.info({ networks: networks.list().networks.length, pods: pods.cached }, 'API caches synced');
      await hotplug?.resyncAll();
      await keeper.resyncAll();
    },
    async stop() {
      await hotplug?.stop();
      const settled = Promise.all([status.settled(), events.settled(), refused.settled()]);
      await Promise.race([settled, new Promise((r) => setTimeout(r, SETTLE_MS))]);
      await Promise.all([networks.stop(), pods.stop()]);
      client.close();
    },
  };
}
