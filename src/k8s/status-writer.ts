/**
 * The pod's k8s.v1.cni.cncf.io/network-status annotation (NPWG v1.3), written back as a StatusSink. A merge PATCH of
 * that one annotation, never a read-modify-write of the whole map, carrying the pod's UID as a precondition so a new
 * pod of the same name is never written to (a static pod's status goes to its mirror pod, under the mirror pod's UID:
 * `apiUid`). The CNI call never waits for it: writes run in the background and are
 * retried with backoff while the API is slow or down, until written, or the pod is gone, or it was superseded by a
 * newer status of the same pod.
 */
import { segment } from '../common/api-object';
import type { Logger } from 'pino';
import type { StatusSink } from '../engine/status-sink';
import type { NetworkStatusEntry } from '../networks/status';
import { type KubeApiClient } from './api-client';
import { BackgroundWrites, type RetryOptions } from './background-writes';
import type { ApiUidOf } from './mirror-pod';
import type { PodIdentity } from '../cni/types';
import { definedFields } from '../common/defined-fields';

export interface StatusWriteOptions extends RetryOptions {
  /** The pod's UID in the API for a sandbox's K8S_POD_UID; the same UID where not given. */
  readonly apiUid?: ApiUidOf;
}

export const NETWORK_STATUS_ANNOTATION = 'k8s.v1.cni.cncf.io/network-status';

export class ApiStatusWriter implements StatusSink {
  /** The newest write per pod: an older one still retrying stops when a newer one is queued. */
  private readonly latest = new Map<string, number>();
  private sequence = 0;
  private readonly writes: BackgroundWrites;
  private readonly apiUid: ApiUidOf;

  constructor(
    private readonly client: KubeApiClient,
    log: Logger,
    options: StatusWriteOptions = {},
  ) {
    this.writes = new BackgroundWrites(log, options);
    this.apiUid = options.apiUid ?? ((_namespace, _name, uid) => uid);
  }

  attached(pod: PodIdentity, containerId: string, status: readonly NetworkStatusEntry[]): void {
    if (!pod.namespace || !pod.name) return; // a sandbox without a pod (podman, a test): nothing to write to
    this.write(
      { namespace: pod.namespace, name: pod.name, ...definedFields({ uid: pod.uid || undefined }) },
      containerId,
      JSON.stringify(status, null, 2),
    );
  }

  detached(): void {
    // A deleted sandbox's pod is going away or gets a new sandbox whose ADD writes its own status.
  }

  failed(): void {
    // A failed ADD changed nothing: the status written by the last successful one (if any) still holds.
  }

  /** Resolves when every write started so far has finished (written or given up): for shutdown and tests. */
  settled(): Promise<void> {
    return this.writes.settled();
  }

  private write(pod: { namespace: string; name: string; uid?: string }, containerId: string, value: string): void {
    const key = `${pod.namespace}/${pod.name}`;
    const mine = ++this.sequence;
    this.latest.set(key, mine);
    const path = `/api/v1/namespaces/${segment(pod.namespace)}/pods/${segment(pod.name)}`;
    this.writes.start(
      { write: 'network-status', pod: key, containerId },
      async () => {
        if (this.latest.get(key) !== mine) return { outcome: 'stop', why: 'superseded by a newer status of the pod' };
        // Resolved at each attempt: a mirror pod the cache did not have yet may be there on the next.
        const uid = pod.uid ? { uid: this.apiUid(pod.namespace, pod.name, pod.uid) } : {};
        const body = { metadata: { ...uid, annotations: { [NETWORK_STATUS_ANNOTATION]: value } } };
        const r = await this.client.request('PATCH', path, 'pods', {
          body,
          contentType: 'application/merge-patch+json',
        });
        if (r.ok) return { outcome: 'done' };
        // 404: the pod is gone; 422: the name is another pod's now (its UID differs: immutable); 409: a conflict of
        // the same kind. None of them gets better by retrying.
        if ([404, 409, 422].includes(r.error.status))
          return { outcome: 'stop', why: `the pod is gone or was replaced (HTTP ${r.error.status})` };
        // 403 is retried too: the API client has reported it loudly, and a restarting API server refuses for a moment
        // until its RBAC cache has loaded.
        return { outcome: 'retry', why: r.error.message };
      },
      () => {
        if (this.latest.get(key) === mine) this.latest.delete(key);
      },
    );
  }
}
