/**
 * The pod's k8s.v1.cni.cncf.io/network-status annotation (NPWG v1.3), written back as a StatusSink. A merge PATCH of
 * that one annotation, never a read-modify-write of the whole map, carrying the pod's UID as a precondition so a new
 * pod of the same name is never written to. The CNI call never waits for it: writes run in the background and are
 * retried with backoff while the API is slow or down, until written, or the pod is gone, or it was superseded by a
 * newer status of the same pod.
 */
import { CoreV1Api, type KubeConfig, PatchStrategy, setHeaderOptions } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import type { PodIdentity } from '../drivers/driver';
import type { StatusSink } from '../engine/status-sink';
import type { NetworkStatusEntry } from '../networks/status';

export const NETWORK_STATUS_ANNOTATION = 'k8s.v1.cni.cncf.io/network-status';

export interface StatusWriterOptions {
  /** First retry delay, doubled each time up to maxDelayMs. */
  readonly firstDelayMs?: number;
  readonly maxDelayMs?: number;
  /** Attempts before a status is given up (the pod keeps running; the log says so). */
  readonly attempts?: number;
}

export class ApiStatusWriter implements StatusSink {
  private readonly api: CoreV1Api;
  /** The newest write per pod: an older one still retrying stops when a newer one is queued. */
  private readonly latest = new Map<string, number>();
  private sequence = 0;
  private readonly pending = new Set<Promise<void>>();

  constructor(
    kubeconfig: KubeConfig,
    private readonly log: Logger,
    private readonly options: StatusWriterOptions = {},
  ) {
    this.api = kubeconfig.makeApiClient(CoreV1Api);
  }

  attached(pod: PodIdentity, containerId: string, status: readonly NetworkStatusEntry[]): void {
    if (!pod.namespace || !pod.name) return; // a sandbox without a pod (podman, a test): nothing to write to
    this.write({ namespace: pod.namespace, name: pod.name, ...(pod.uid ? { uid: pod.uid } : {}) }, containerId, JSON.stringify(status, null, 2));
  }

  detached(): void {
    // A deleted sandbox's pod is going away or gets a new sandbox whose ADD writes its own status.
  }

  /** Resolves when every write started so far has finished (written or given up): for shutdown and tests. */
  async settled(): Promise<void> {
    while (this.pending.size) await Promise.all([...this.pending]);
  }

  private write(pod: { namespace: string; name: string; uid?: string }, containerId: string, value: string): void {
    const key = `${pod.namespace}/${pod.name}`;
    const mine = ++this.sequence;
    this.latest.set(key, mine);
    const body = { metadata: { ...(pod.uid ? { uid: pod.uid } : {}), annotations: { [NETWORK_STATUS_ANNOTATION]: value } } };
    const run = (async (): Promise<void> => {
      let delay = this.options.firstDelayMs ?? 200;
      const attempts = this.options.attempts ?? 12;
      for (let attempt = 1; attempt <= attempts; attempt++) {
        if (this.latest.get(key) !== mine) return; // superseded by a newer status of this pod
        try {
          await this.api.patchNamespacedPod({ name: pod.name, namespace: pod.namespace, body }, setHeaderOptions('Content-Type', PatchStrategy.MergePatch));
          this.log.debug({ pod: key, containerId }, 'network-status written');
          return;
        } catch (e) {
          const code = (e as { code?: number }).code;
          // 404: the pod is gone; 422: the name is another pod's now (its UID differs: immutable); 409: a conflict of
          // the same kind. None of them gets better by retrying.
          if (code === 404 || code === 409 || code === 422) {
            this.log.info({ pod: key, containerId, code }, 'network-status not written: the pod is gone or was replaced');
            return;
          }
          if (attempt === attempts) {
            this.log.warn({ pod: key, containerId, err: (e as Error).message }, 'network-status not written after retries; the pod runs without it');
            return;
          }
          await new Promise((r) => setTimeout(r, delay));
          delay = Math.min(delay * 2, this.options.maxDelayMs ?? 10_000);
        }
      }
    })().finally(() => {
      this.pending.delete(run);
      if (this.latest.get(key) === mine) this.latest.delete(key);
    });
    this.pending.add(run);
  }
}
