/**
 * The kubelet's pod-resources API (v1 List on /var/lib/kubelet/pod-resources/kubelet.sock): which devices the
 * kubelet allocated to which pod. List answers for every pod on the node, so its answer grows with the node: the
 * gRPC default of 4 MiB per message is raised. (`Get`, one pod, is feature-gated off before Kubernetes 1.34.)
 */
import * as grpc from '@grpc/grpc-js';
import { CniCode, CniError, err, ok, type Result } from '../cni/errors';
import { podResourcesPackage, serviceOf, unary, unixTarget, type ListPodResourcesResponse, type PodResources } from './api';

export const DEFAULT_POD_RESOURCES_SOCKET = '/var/lib/kubelet/pod-resources/kubelet.sock';
export const MAX_MESSAGE_BYTES = 64 * 1024 * 1024;

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

export class PodResourcesClient {
  private client: grpc.Client | undefined;
  /** The List running now, and when it started; callers that arrived before that start share it. */
  private inflight: { startedAt: number; answer: Promise<Result<PodResources[]>> } | undefined;
  /** The one List queued behind it, shared by every caller that arrived while it waits. */
  private queued: Promise<Result<PodResources[]>> | undefined;

  constructor(private readonly socket: string = DEFAULT_POD_RESOURCES_SOCKET, private readonly timeoutMs = 5000) {}

  private connection(): grpc.Client {
    if (!this.client) {
      const Lister = serviceOf(podResourcesPackage(), 'PodResourcesLister');
      this.client = new Lister(unixTarget(this.socket), grpc.credentials.createInsecure(), {
        'grpc.max_receive_message_length': MAX_MESSAGE_BYTES,
        'grpc.max_send_message_length': MAX_MESSAGE_BYTES,
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
        const reply = await unary<Record<string, never>, ListPodResourcesResponse>(this.connection(), 'List', {}, this.timeoutMs);
        return ok(reply.pod_resources ?? []);
      } catch (e) {
        const code = (e as { code?: number }).code;
        if (code === grpc.status.RESOURCE_EXHAUSTED && attempt < RETRY_MS.length) {
          await sleep(RETRY_MS[attempt]!);
          continue;
        }
        return err(new CniError(CniCode.TryAgainLater, `cannot ask the kubelet which devices pods have (pod-resources List on ${this.socket}): ${(e as Error).message}`));
      }
    }
  }

  /** The devices the kubelet allocated to one pod (none when the kubelet does not list the pod). */
  async devicesOf(namespace: string, name: string): Promise<Result<PodDevices>> {
    const all = await this.list();
    if (!all.ok) return all;
    const pod = all.value.find((p) => p.namespace === namespace && p.name === name);
    return ok(pod ? devicesOfPod(pod) : new Map());
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
