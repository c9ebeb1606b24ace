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

export class PodResourcesClient {
  private client: grpc.Client | undefined;

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

  async list(): Promise<Result<PodResources[]>> {
    try {
      const reply = await unary<Record<string, never>, ListPodResourcesResponse>(this.connection(), 'List', {}, this.timeoutMs);
      return ok(reply.pod_resources ?? []);
    } catch (e) {
      return err(new CniError(CniCode.TryAgainLater, `cannot ask the kubelet which devices pods have (pod-resources List on ${this.socket}): ${(e as Error).message}`));
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
    const all = await this.list();
    if (!all.ok) return false;
    return all.value.some((p) => devicesOfPod(p).get(resourceName)?.includes(deviceID));
  }

  close(): void {
    this.client?.close();
    this.client = undefined;
  }
}
