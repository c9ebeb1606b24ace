/**
 * This node's pods from the Kubernetes API, as the engine's PodSource: an informer on `spec.nodeName=<node>` is the
 * cache, so an ADD of a pod the kubelet started costs no request; a pod not in it yet (the watch is a moment behind
 * the scheduler) costs one GET. K8S_POD_UID is checked against the API's UID: a sandbox of an earlier pod of the same
 * name is refused, never given the new pod's networks. A static pod's sandbox is checked against the UID its mirror
 * pod names (mirror-pod.ts).
 */
import { segment } from '../common/api-object';
import { CniCode, CniError, err, ok, type Result } from '../cni/errors';
import type { PodInfo, PodSource } from '../engine/pod-source';
import { type KubeApiClient } from './api-client';
import { type ApiObject, Informer } from './informer';
import { sandboxUidOf } from './mirror-pod';
import { definedFields } from '../common/defined-fields';

/** A pod of this node as the cache has it. */
export interface CachedPod extends PodInfo {
  readonly namespace: string;
  readonly name: string;
  /** The UID its sandboxes carry (K8S_POD_UID): the static pod's for a mirror pod, else `uid`. */
  readonly sandboxUid: string;
}
const cachedPod = (obj: ApiObject): CachedPod | undefined => {
  const m = obj.metadata;
  if (!m?.name || !m.namespace) return undefined;
  const meta = { uid: m.uid ?? '', annotations: m.annotations ?? {} };
  return { namespace: m.namespace, name: m.name, ...meta, sandboxUid: sandboxUidOf(meta) };
};

const staleSandbox = (namespace: string, name: string, info: PodInfo, uid: string): CniError => {
  const mirrored = sandboxUidOf(info);
  const pod =
    mirrored === info.uid
      ? `pod ${namespace}/${name} in the API has UID ${info.uid}`
      : `mirror pod ${namespace}/${name} in the API stands for static pod UID ${mirrored}`;
  return new CniError(
    CniCode.InvalidEnvironment,
    `${pod}, but this sandbox is for UID ${uid} (K8S_POD_UID): it belongs to an earlier pod of that name, so none of the new pod's networks are attached`,
    'the kubelet removes stale sandboxes; nothing was attached',
  );
};

/** The fields of a pod that name its ResourceClaims. */
interface ClaimFields {
  readonly spec?: {
    readonly resourceClaims?: readonly { readonly name: string; readonly resourceClaimName?: string }[];
  };
  readonly status?: {
    readonly resourceClaimStatuses?: readonly { readonly name: string; readonly resourceClaimName?: string }[];
  };
}

/** The names of a pod's ResourceClaims: its own, and those its templates made (status.resourceClaimStatuses). */
const claimNames = (pod: ApiObject & ClaimFields): string[] => [
  ...(pod.spec?.resourceClaims ?? []).flatMap((c) => c.resourceClaimName ?? []),
  ...(pod.status?.resourceClaimStatuses ?? []).flatMap((c) => c.resourceClaimName ?? []),
];

const infoOf = (pod: ApiObject): PodInfo => {
  const claims = claimNames(pod);
  return {
    uid: pod.metadata?.uid ?? '',
    annotations: pod.metadata?.annotations ?? {},
    ...(claims.length ? { claims } : {}),
  };
};
/** What the cache keeps of a pod: the engine reads its UID, annotations and claims, nothing else. */
const metadataOf = (pod: ApiObject & ClaimFields): ApiObject & ClaimFields => {
  const m = pod.metadata ?? {};
  const resourceClaims = pod.spec?.resourceClaims;
  const resourceClaimStatuses = pod.status?.resourceClaimStatuses;
  return {
    metadata: definedFields({
      name: m.name || undefined,
      namespace: m.namespace || undefined,
      uid: m.uid || undefined,
      annotations: m.annotations,
    }),
    ...(resourceClaims?.length ? { spec: { resourceClaims } } : {}),
    ...(resourceClaimStatuses?.length ? { status: { resourceClaimStatuses } } : {}),
  };
};

export class ApiPodSource implements PodSource {
  private readonly informer: Informer<ApiObject>;
  private readonly watchers: ((pod: CachedPod, previous: CachedPod | undefined) => void)[] = [];

  constructor(
    private readonly client: KubeApiClient,
    readonly nodeName: string,
    onError: (message: string) => void = () => undefined,
  ) {
    this.informer = new Informer<ApiObject>(
      client,
      '/api/v1/pods',
      'pods',
      { fieldSelector: `spec.nodeName=${nodeName}` },
      metadataOf,
      {
        error: onError,
        upsert: (obj, previous) => {
          const pod = cachedPod(metadataOf(obj));
          if (pod) for (const w of this.watchers) w(pod, previous && cachedPod(previous));
        },
      },
    );
  }

  /** Calls `watcher` with each pod of this node that appears or changes (its annotations, say), and what it was before. */
  onChange(watcher: (pod: CachedPod, previous: CachedPod | undefined) => void): void {
    this.watchers.push(watcher);
  }

  /** The pods of this node in the cache. */
  list(): CachedPod[] {
    return this.informer.list().flatMap((p) => cachedPod(p) ?? []);
  }

  /**
   * The UID of the API's object for the pod of a sandbox of UID `uid`: the mirror pod's for a static pod's sandbox
   * (where the status is written and events point), `uid` itself when the cache knows no other.
   */
  apiUid(namespace: string, name: string, uid: string): string {
    const pod = this.cachedPod(namespace, name);
    return pod && pod.sandboxUid === uid ? pod.uid : uid;
  }

  /** A pod from the cache only (no request). */
  cachedPod(namespace: string, name: string): CachedPod | undefined {
    const obj = this.informer.get(namespace, name);
    return obj && cachedPod(obj);
  }

  /** Lists this node's pods and watches them; resolves when the first list is in the cache. */
  start(): Promise<void> {
    return this.informer.start();
  }

  stop(): Promise<void> {
    return this.informer.stop();
  }

  get ready(): boolean {
    return this.informer.ready;
  }

  /** Pods in the cache (for plexusctl and tests). */
  get cached(): number {
    return this.informer.list().length;
  }

  async get(namespace: string, name: string, uid: string | undefined): Promise<Result<PodInfo>> {
    const cached = this.informer.get(namespace, name);
    // A cached pod of another UID may be the cache lagging behind a re-created pod: the live GET decides.
    if (cached && (uid === undefined || sandboxUidOf(infoOf(cached)) === uid)) return ok(infoOf(cached));
    const live = await this.client.request(
      'GET',
      `/api/v1/namespaces/${segment(namespace)}/pods/${segment(name)}`,
      'pods',
      { urgent: true },
    );
    if (!live.ok) {
      if (live.error.status === 404) {
        return err(
          new CniError(
            CniCode.InvalidEnvironment,
            `pod ${namespace}/${name} does not exist in the API: it was deleted, or this sandbox is not a Kubernetes pod's`,
            'the kubelet removes the sandbox of a deleted pod; nothing was attached',
          ),
        );
      }
      return err(
        new CniError(
          CniCode.TryAgainLater,
          `cannot read pod ${namespace}/${name} from the Kubernetes API: ${live.error.message}`,
          `HTTP ${live.error.status || 'no answer'}; the runtime retries the sandbox`,
        ),
      );
    }
    const info = infoOf(live.value as ApiObject);
    if (uid !== undefined && sandboxUidOf(info) !== uid) return err(staleSandbox(namespace, name, info, uid));
    return ok(info);
  }
}
