/**
 * The kubelet's pod-resources API (v1 List on /var/lib/kubelet/pod-resources/kubelet.sock): which devices the
 * kubelet allocated to which pod. List answers for every pod on the node, so its answer grows with the node: the
 * gRPC default of 4 MiB per message is raised. (`Get`, one pod, is feature-gated off before Kubernetes 1.34.)
 */
import { serviceOf, unary, unixTarget } from '../kubelet/grpc';
import * as grpc from '@grpc/grpc-js';
import { CniCode, CniError, err, ok, type Result } from '../cni/errors';
import { podResourcesPackage, type ListPodResourcesResponse, type PodResources } from './api';
import { errorMessage } from '../common/error-message';

export const DEFAULT_POD_RESOURCES_SOCKET = '/var/lib/kubelet/pod-resources/kubelet.sock';
export const MAX_GRPC_MESSAGE_BYTES = 64 * 1024 * 1024;

/** Device IDs per resource name, every container's in container order. */
export type PodDevices = ReadonlyMap<string, readonly string[]>;

export function devicesOfPod(pod: PodResources): PodDevices {
  const out = new Map<string, string[]>();
  for (const c of pod.containers ?? []) {
    for (const d of c.devices ?? []) {
      const list = out.get(d.resource_name) ?? [];
      list.push(...(d.device_ids ?? []));
      out.set(d.resource_name, list);
    }
  }
  return out;
}

/** The kubelet rate-limits pod-resources (100/s, a burst of 10): a refused List is retried after these waits. */
const RETRY_MS = [50, 100, 200, 400, 800];
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

export interface PodResourcesOptions {
  /** The deadline of each List. */
  readonly timeoutMs?: number;
  /**
   * How long devicesOf asks again for a pod the kubelet does not list. A restarted kubelet serves pod-resources
   * before its pod sources have synced: for about a second (1.32 and 1.35 alike, measured) its socket is missing, then its List
   * answers no pods at all, while the pods and their devices live on.
   */
  readonly podListedWithinMs?: number;
  /** The pause between those Lists. */
  readonly relistMs?: number;
}

interface NotListed {
  readonly namespace: string;
  readonly name: string;
  readonly socket: string;
  readonly waitedMs: number;
  /** The last List's error, when it failed. */
  readonly last: CniError | undefined;
}

const podNotListed = ({ namespace, name, socket, waitedMs, last }: NotListed): CniError =>
  new CniError(
    CniCode.TryAgainLater,
    `the kubelet does not list pod ${namespace}/${name} in pod-resources ` +
      `(List on ${socket}, asked for ${waitedMs / 1000} s)${last ? `: ${last.message}` : ''}`,
    'a kubelet that has just restarted lists its pods once its pod sources have synced; the runtime retries the ADD. ' +
      'A pod the kubelet never lists is not one of its pods: its devices cannot be known',
  );

export class PodResourcesClient {
  private client: grpc.Client | undefined;
  /** The List running now, and when it started; callers that arrived before that start share it. */
  private inflight: { startedAt: number; answer: Promise<Result<PodResources[]>> } | undefined;
  /** The one List queued behind it, shared by every caller that arrived while it waits. */
  private queued: Promise<Result<PodResources[]>> | undefined;

  private readonly timeoutMs: number;
  private readonly podListedWithinMs: number;
  private readonly relistMs: number;

  constructor(
    private readonly socket: string = DEFAULT_POD_RESOURCES_SOCKET,
    options: PodResourcesOptions = {},
  ) {
    this.timeoutMs = options.timeoutMs ?? 5000;
    this.podListedWithinMs = options.podListedWithinMs ?? 5000;
    this.relistMs = options.relistMs ?? 100;
  }

  private connection(): grpc.Client {
    if (!this.client) {
      const Lister = serviceOf(podResourcesPackage(), 'PodResourcesLister');
      this.client = new Lister(unixTarget(this.socket), grpc.credentials.createInsecure(), {
        'grpc.max_receive_message_length': MAX_GRPC_MESSAGE_BYTES,
        'grpc.max_send_message_length': MAX_GRPC_MESSAGE_BYTES,
        // A local socket: when the kubelet restarts, connect again soon (gRPC's default first wait is 1 s).
        'grpc.initial_reconnect_backoff_ms': 100,
        'grpc.max_reconnect_backoff_ms': 1000,
      });
    }
    return this.client;
  }

  /**
   * Every pod's resources, from a List that started no earlier than `since` (performance.now(); default: now), so a
   * device allocated before the call is in it. Concurrent callers share Lists: a burst of ADDs makes at most two at a
   * time, not one each, which the kubelet's rate limit would refuse.
   */
  list(since = performance.now()): Promise<Result<PodResources[]>> {
    if (this.inflight && this.inflight.startedAt >= since) return this.inflight.answer;
    if (!this.inflight) return this.start();
    this.queued ??= this.inflight.answer.then(() => {
      this.queued = undefined;
      return this.start();
    });
    return this.queued;
  }

  private start(): Promise<Result<PodResources[]>> {
    const answer = this.listOnce().finally(() => {
      if (this.inflight?.answer === answer) this.inflight = undefined;
    });
    this.inflight = { startedAt: performance.now(), answer };
    return answer;
  }

  private async listOnce(): Promise<Result<PodResources[]>> {
    for (let attempt = 0; ; attempt++) {
      try {
        const reply = await unary<Record<string, never>, ListPodResourcesResponse>(
          this.connection(),
          'List',
          {},
          this.timeoutMs,
        );
        return ok(reply.pod_resources ?? []);
      } catch (e) {
        const code = (e as { code?: number }).code;
        if (code === grpc.status.RESOURCE_EXHAUSTED && attempt < RETRY_MS.length) {
          await sleep(RETRY_MS[attempt]!);
          continue;
        }
        return err(
          new CniError(
            CniCode.TryAgainLater,
            `cannot ask the kubelet which devices pods have (pod-resources List on ${this.socket}): ${errorMessage(e)}`,
          ),
        );
      }
    }
  }

  /**
   * The devices the kubelet allocated to one pod. A pod the kubelet does not list (or a kubelet that does not answer)
   * is asked for again until podListedWithinMs (a kubelet restarting); then it is an error (11), never "no devices".
   */
  async devicesOf(namespace: string, name: string): Promise<Result<PodDevices>> {
    const startedAt = performance.now();
    for (let since = startedAt; ; since = performance.now()) {
      const all = await this.list(since);
      const pod = all.ok ? all.value.find((p) => p.namespace === namespace && p.name === name) : undefined;
      if (pod) return ok(devicesOfPod(pod));
      const waited = performance.now() - startedAt;
      if (waited >= this.podListedWithinMs) {
        const last = all.ok ? undefined : all.error;
        return err(podNotListed({ namespace, name, socket: this.socket, waitedMs: Math.round(waited), last }));
      }
      await sleep(Math.min(this.relistMs, this.podListedWithinMs - waited));
    }
  }

  /** Whether any pod has this device of this resource now. */
  async inUse(resourceName: string, deviceID: string): Promise<boolean> {
    const all = await this.list(performance.now() - 2000); // health polls may share a List up to 2 s old
    if (!all.ok) return false;
    return all.value.some((p) => devicesOfPod(p).get(resourceName)?.includes(deviceID));
  }

  close(): void {
    this.client?.close();
    this.client = undefined;
  }
}
