/**
 * Pods on the test cluster through its API: pause pods (the only image the nodes have), placed by the scheduler or
 * bound to a node; their phase, node and network-status as the API has them.
 */
import type { KubeApiFixture } from '../k8s';
import { PAUSE_IMAGE } from '../kube-node';

export const NETWORKS = 'k8s.v1.cni.cncf.io/networks';
export const NETWORK_STATUS = 'k8s.v1.cni.cncf.io/network-status';

export interface PodPlacement {
  /** Binds the pod to this node (no scheduler); else the scheduler places it. */
  readonly nodeName?: string;
  readonly annotations?: Readonly<Record<string, string>>;
  readonly labels?: Readonly<Record<string, string>>;
}

/** The pod template's spec: pause, never pulled, no token, quick to stop. */
export const pauseSpec = (nodeName?: string): Record<string, unknown> => ({
  ...(nodeName ? { nodeName } : {}),
  automountServiceAccountToken: false,
  enableServiceLinks: false,
  terminationGracePeriodSeconds: 1,
  containers: [{ name: 'c', image: PAUSE_IMAGE, imagePullPolicy: 'Never' }],
});

export interface ApiPod {
  metadata: {
    name: string;
    uid: string;
    annotations?: Record<string, string>;
    labels?: Record<string, string>;
    deletionTimestamp?: string;
  };
  spec: { nodeName?: string };
  status?: { phase?: string };
}

export interface StatusEntry {
  name: string;
  interface?: string;
  ips?: string[];
  default?: boolean;
}

export async function ensureNamespace(api: KubeApiFixture, namespace: string): Promise<void> {
  const r = await api.request('POST', '/api/v1/namespaces', {
    apiVersion: 'v1',
    kind: 'Namespace',
    metadata: { name: namespace },
  });
  if (r.status !== 201 && r.status !== 409) throw new Error(`namespace ${namespace}: ${r.status}`);
  // The controller-manager makes sa/default a moment after the namespace; a pod created before it is refused by the
  // ServiceAccount admission ("serviceaccount default not found"), so it is made here (409 once the controller did).
  const sa = await api.request('POST', `/api/v1/namespaces/${namespace}/serviceaccounts`, {
    apiVersion: 'v1',
    kind: 'ServiceAccount',
    metadata: { name: 'default' },
  });
  if (sa.status !== 201 && sa.status !== 409) throw new Error(`sa/default in ${namespace}: ${sa.status}`);
}

export async function createPod(api: KubeApiFixture, namespace: string, name: string, p: PodPlacement): Promise<void> {
  const r = await api.request('POST', `/api/v1/namespaces/${namespace}/pods`, {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, annotations: p.annotations ?? {}, labels: p.labels ?? {} },
    spec: pauseSpec(p.nodeName),
  });
  if (r.status !== 201) throw new Error(`creating pod ${namespace}/${name}: ${r.status} ${JSON.stringify(r.body)}`);
}

export async function listPods(api: KubeApiFixture, namespace: string, selector?: string): Promise<ApiPod[]> {
  const query = selector ? `?labelSelector=${encodeURIComponent(selector)}` : '';
  const r = await api.request('GET', `/api/v1/namespaces/${namespace}/pods${query}`);
  if (r.status !== 200) throw new Error(`listing pods of ${namespace}: ${r.status}`);
  return (r.body as { items: ApiPod[] }).items;
}

/** The pod's network-status annotation, parsed; [] while there is none. */
export const networkStatus = (pod: ApiPod): StatusEntry[] => {
  const text = pod.metadata.annotations?.[NETWORK_STATUS];
  return text ? (JSON.parse(text) as StatusEntry[]) : [];
};

/** The addresses (no prefix) the network-status gives the pod on `network` ("default/lan"). */
export const addressesOn = (pod: ApiPod, network: string): string[] =>
  networkStatus(pod)
    .filter((s) => s.name === network)
    .flatMap((s) => s.ips ?? []);

/** Waits until each named pod is Running with its network-status written; answers them. */
export async function waitRunning(
  api: KubeApiFixture,
  namespace: string,
  names: readonly string[],
  timeoutMs = 120000,
): Promise<ApiPod[]> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const pods = await listPods(api, namespace);
    const ready = names.map((n) => pods.find((p) => p.metadata.name === n));
    const pending = ready.filter((p) => p?.status?.phase !== 'Running' || networkStatus(p).length === 0);
    if (pending.length === 0) return ready as ApiPod[];
    if (Date.now() > deadline) {
      const events = await api.request('GET', `/api/v1/namespaces/${namespace}/events`);
      const items = (events.body as { items?: { involvedObject: { name: string }; message: string }[] }).items ?? [];
      throw new Error(
        `${pending.length} of ${names.length} pods not Running with a network-status after ${timeoutMs} ms; ` +
          `last events: ${items
            .slice(-5)
            .map((e) => `${e.involvedObject.name}: ${e.message.slice(0, 300)}`)
            .join(' | ')}`,
      );
    }
    await new Promise((r) => setTimeout(r, 250));
  }
}

/** Sets (or, with undefined, removes) a label of a Node object, as an operator would. */
export async function labelNode(api: KubeApiFixture, node: string, key: string, value?: string): Promise<void> {
  const patch = { metadata: { labels: { [key]: value ?? null } } };
  const r = await api.request('PATCH', `/api/v1/nodes/${node}`, patch, 'application/merge-patch+json');
  if (r.status !== 200) throw new Error(`labelling node ${node}: ${r.status} ${JSON.stringify(r.body)}`);
}

export interface ReplicaSetPlan {
  readonly name: string;
  readonly replicas: number;
  /** The pods' `app` label, which the ReplicaSet selects. */
  readonly app: string;
  readonly annotations?: Readonly<Record<string, string>>;
  readonly nodeSelector?: Readonly<Record<string, string>>;
}

/** A ReplicaSet of pause pods, placed by the scheduler. */
export async function createReplicaSet(api: KubeApiFixture, namespace: string, plan: ReplicaSetPlan): Promise<void> {
  const template = {
    metadata: { labels: { app: plan.app }, annotations: plan.annotations ?? {} },
    spec: { ...pauseSpec(), ...(plan.nodeSelector ? { nodeSelector: plan.nodeSelector } : {}) },
  };
  const rs = {
    apiVersion: 'apps/v1',
    kind: 'ReplicaSet',
    metadata: { name: plan.name },
    spec: { replicas: plan.replicas, selector: { matchLabels: { app: plan.app } }, template },
  };
  const r = await api.request('POST', `/apis/apps/v1/namespaces/${namespace}/replicasets`, rs);
  if (r.status !== 201)
    throw new Error(`creating replicaset ${namespace}/${plan.name}: ${r.status} ${JSON.stringify(r.body)}`);
}

/** Messages of the FailedCreatePodSandBox events in a namespace: each a sandbox the kubelet had to retry. */
export async function sandboxFailures(api: KubeApiFixture, namespace: string): Promise<string[]> {
  const query = `fieldSelector=${encodeURIComponent('reason=FailedCreatePodSandBox')}`;
  const r = await api.request('GET', `/api/v1/namespaces/${namespace}/events?${query}`);
  const items = (r.body as { items?: { involvedObject: { name: string }; message: string; count?: number }[] }).items;
  return (items ?? []).flatMap((e) =>
    Array.from({ length: e.count ?? 1 }, () => `${e.involvedObject.name}: ${e.message.slice(0, 300)}`),
  );
}

/** Deletes every pod of a namespace and waits until the API has none left (their kubelets tore them down). */
export async function deleteAllPods(api: KubeApiFixture, namespace: string, timeoutMs = 120000): Promise<void> {
  const r = await api.request('DELETE', `/api/v1/namespaces/${namespace}/pods`);
  if (r.status !== 200) throw new Error(`deleting the pods of ${namespace}: ${r.status}`);
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const left = await listPods(api, namespace);
    if (left.length === 0) return;
    if (Date.now() > deadline)
      throw new Error(`${left.length} pods of ${namespace} left after ${timeoutMs} ms: ${left[0]!.metadata.name}`);
    await new Promise((r) => setTimeout(r, 250));
  }
}
