/**
 * Pods made for one node through the API and followed to Running: pause pods bound to the node (spec.nodeName), the
 * time each took from its creation to Running (a watch, not polling: listing 110 pods every few ms would load the
 * cores being measured), why stragglers wait, and deleting them all until CRI has no ready sandbox left. What a
 * single-node test or benchmark counts on (single-node.ts).
 */
import { request as httpsRequest } from 'node:https';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { KubeApiFixture } from '../k8s';
import { CriRuntime, PAUSE_IMAGE } from '../kube-node';

export interface CreatePodsOptions {
  readonly namespace?: string;
  readonly annotations?: Readonly<Record<string, string>>;
  readonly namePrefix?: string;
  /** Pods created at once (default 10). */
  readonly concurrency?: number;
  /** The container's resources.limits (e.g. extended resources of device plugins: { 'plexus.io/memif': '1' }). */
  readonly limits?: Readonly<Record<string, string>>;
}

export interface RunningTimings {
  readonly pods: number;
  /** From the first create request to the last pod seen Running. */
  readonly totalMs: number;
  /** From the first create request to the last one answered, and to the first pod seen Running. */
  readonly createMs: number;
  readonly firstRunningMs: number;
  /** Each pod's create request to its first Running event, in the order of the names asked for. */
  readonly perPodMs: readonly number[];
  readonly p50Ms: number;
  readonly p95Ms: number;
  /** FailedCreatePodSandBox events (a sandbox the kubelet had to retry) in the pods' namespaces. */
  readonly sandboxFailures: number;
  readonly failureMessages: readonly string[];
}

/** Nearest-rank percentile. */
export const percentile = (samples: readonly number[], p: number): number => {
  const sorted = [...samples].sort((a, b) => a - b);
  return sorted[Math.max(0, Math.ceil((p / 100) * sorted.length) - 1)] ?? NaN;
};

interface PodRecord {
  createdAt?: number;
  acceptedAt?: number;
  runningAt?: number;
  phase?: string;
}

export class NodePods {
  private readonly pods = new Map<string, PodRecord>();
  private readonly watches = new Map<string, () => void>();

  /** `nodeDown` says why the node can run no pod now (its kubelet or runtime gone), else undefined. */
  constructor(
    private readonly api: KubeApiFixture,
    private readonly nodeName: string,
    private readonly containerdSocket: string,
    private readonly nodeDown: () => string | undefined,
  ) {}

  /** Whether pods made here may still exist. */
  get any(): boolean {
    return this.pods.size > 0;
  }

  /** Stops following the namespaces' pods. */
  close(): void {
    for (const close of this.watches.values()) close();
    this.watches.clear();
  }

  private adminTls(): { ca: Buffer; cert: Buffer; key: Buffer } {
    const certs = join(this.api.dir, 'certs');
    return {
      ca: readFileSync(join(certs, 'ca.crt')),
      cert: readFileSync(join(certs, 'admin.crt')),
      key: readFileSync(join(certs, 'admin.key')),
    };
  }

  private async ensureNamespace(namespace: string): Promise<void> {
    if (namespace !== 'default') {
      const ns = await this.api.request('POST', '/api/v1/namespaces', {
        apiVersion: 'v1',
        kind: 'Namespace',
        metadata: { name: namespace },
      });
      if (ns.status !== 201 && ns.status !== 409)
        throw new Error(`creating namespace ${namespace}: ${ns.status} ${JSON.stringify(ns.body)}`);
    }
    // The controller-manager makes sa/default a moment after the namespace; the ServiceAccount admission wants it.
    const sa = await this.api.request('POST', `/api/v1/namespaces/${namespace}/serviceaccounts`, {
      apiVersion: 'v1',
      kind: 'ServiceAccount',
      metadata: { name: 'default' },
    });
    if (sa.status !== 201 && sa.status !== 409)
      throw new Error(`creating sa/default in ${namespace}: ${sa.status} ${JSON.stringify(sa.body)}`);
  }

  /**
   * Follows the namespace's pods from now on, noting when each is first seen Running; resolves once the watch is open.
   * (Watching rather than listing: a list of 110 pods every few ms would load the 2 cores being measured.)
   */
  private async watchPods(namespace: string): Promise<void> {
    if (this.watches.has(namespace)) return;
    const list = await this.api.request('GET', `/api/v1/namespaces/${namespace}/pods?limit=1`);
    const rv = (list.body as { metadata?: { resourceVersion?: string } }).metadata?.resourceVersion;
    if (list.status !== 200 || !rv) throw new Error(`listing pods in ${namespace}: ${list.status}`);
    await new Promise<void>((opened, fail) => {
      const req = httpsRequest(
        {
          host: '127.0.0.1',
          port: this.api.apiPort,
          method: 'GET',
          agent: false,
          ...this.adminTls(),
          path: `/api/v1/namespaces/${namespace}/pods?watch=true&resourceVersion=${rv}&timeoutSeconds=3600`,
        },
        (res) => {
          if (res.statusCode !== 200) return fail(new Error(`watching pods in ${namespace}: ${res.statusCode}`));
          opened();
          let buffered = '';
          res.setEncoding('utf8').on('data', (chunk: string) => {
            buffered += chunk;
            let nl: number;
            while ((nl = buffered.indexOf('\n')) >= 0) {
              const line = buffered.slice(0, nl);
              buffered = buffered.slice(nl + 1);
              if (line.trim()) this.onPodEvent(namespace, line);
            }
          });
          res.on('end', () => this.watches.delete(namespace));
        },
      );
      req.on('error', (e) => {
        this.watches.delete(namespace);
        fail(e);
      });
      this.watches.set(namespace, () => req.destroy());
      req.end();
    });
  }

  private onPodEvent(namespace: string, line: string): void {
    const now = performance.now();
    let event: { type?: string; object?: { metadata?: { name?: string }; status?: { phase?: string } } };
    try {
      event = JSON.parse(line) as typeof event;
    } catch {
      return;
    }
    const name = event.object?.metadata?.name;
    if (!name || event.type === 'DELETED' || event.type === 'ERROR') return;
    const record = this.pods.get(`${namespace}/${name}`) ?? {};
    record.phase = event.object?.status?.phase;
    if (record.phase === 'Running' && record.runningAt === undefined) record.runningAt = now;
    this.pods.set(`${namespace}/${name}`, record);
  }

  /**
   * Creates n pods bound to this node (spec.nodeName), each a pause container with a local image and no token volume,
   * `concurrency` requests at a time; answers their names. Times are kept for waitAllRunning().
   */
  async createPods(n: number, options: CreatePodsOptions = {}): Promise<string[]> {
    const namespace = options.namespace ?? 'default';
    const prefix = options.namePrefix ?? 'pod-';
    await this.ensureNamespace(namespace);
    await this.watchPods(namespace);
    const names = Array.from({ length: n }, (_, i) => `${prefix}${i}`);
    const errors: string[] = [];
    let next = 0;
    const worker = async (): Promise<void> => {
      for (let i = next++; i < names.length; i = next++) {
        const name = names[i]!;
        const record = this.pods.get(`${namespace}/${name}`) ?? {};
        record.createdAt = performance.now();
        this.pods.set(`${namespace}/${name}`, record);
        const made = await this.api.request(
          'POST',
          `/api/v1/namespaces/${namespace}/pods`,
          podObject(name, this.nodeName, options.annotations ?? {}, options.limits),
        );
        if (made.status !== 201) errors.push(`${name}: ${made.status} ${JSON.stringify(made.body).slice(0, 300)}`);
        record.acceptedAt = performance.now();
      }
    };
    await Promise.all(Array.from({ length: Math.min(options.concurrency ?? 10, n) }, worker));
    if (errors.length)
      throw new Error(`creating pods: ${errors.length} refused, e.g. ${errors.slice(0, 3).join('; ')}`);
    return names;
  }

  /** Waits until every named pod (made by createPods) was seen Running; throws with what the stragglers wait for. */
  async waitAllRunning(names: readonly string[], timeoutMs: number, namespace = 'default'): Promise<RunningTimings> {
    const key = (name: string): string => `${namespace}/${name}`;
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const pending = names.filter((n) => this.pods.get(key(n))?.runningAt === undefined);
      if (pending.length === 0) break;
      if (!this.watches.has(namespace)) await this.catchUp(namespace, pending); // a watch that ended
      const down = this.nodeDown();
      if (Date.now() > deadline || down) {
        throw new Error(
          `${pending.length} of ${names.length} pods not Running after ${timeoutMs} ms${down ? ` (${down})` : ''}: ${await this.describePods(namespace, pending.slice(0, 5))}`,
        );
      }
      await sleep(50);
    }
    const records = names.map((n) => this.pods.get(key(n))!);
    const perPodMs = records.map((r) => r.runningAt! - r.createdAt!);
    const first = Math.min(...records.map((r) => r.createdAt!));
    const last = Math.max(...records.map((r) => r.runningAt!));
    const failures = await this.sandboxFailures(namespace);
    return {
      pods: names.length,
      totalMs: last - first,
      perPodMs,
      createMs: Math.max(...records.map((r) => r.acceptedAt ?? NaN)) - first,
      firstRunningMs: Math.min(...records.map((r) => r.runningAt!)) - first,
      p50Ms: percentile(perPodMs, 50),
      p95Ms: percentile(perPodMs, 95),
      sandboxFailures: failures.length,
      failureMessages: failures.slice(0, 5),
    };
  }

  private async catchUp(namespace: string, pending: readonly string[]): Promise<void> {
    const list = await this.api.request('GET', `/api/v1/namespaces/${namespace}/pods`);
    const items = (list.body as { items?: { metadata: { name: string }; status?: { phase?: string } }[] }).items ?? [];
    const now = performance.now();
    for (const pod of items) {
      const record = this.pods.get(`${namespace}/${pod.metadata.name}`);
      if (record && pending.includes(pod.metadata.name) && pod.status?.phase === 'Running') record.runningAt ??= now;
    }
  }

  /** Phase, container waiting reasons and the latest events of some pods: why they are not Running. */
  async describePods(namespace: string, names: readonly string[]): Promise<string> {
    const out: string[] = [];
    const events = await this.api.request('GET', `/api/v1/namespaces/${namespace}/events`).catch(() => undefined);
    const items =
      (events?.body as { items?: { involvedObject: { name: string }; reason: string; message: string }[] } | undefined)
        ?.items ?? [];
    for (const name of names) {
      const pod = await this.api.request('GET', `/api/v1/namespaces/${namespace}/pods/${name}`).catch(() => undefined);
      const status = (
        pod?.body as
          | { status?: { phase?: string; containerStatuses?: { state?: { waiting?: { reason?: string } } }[] } }
          | undefined
      )?.status;
      const waiting = (status?.containerStatuses ?? [])
        .map((c) => c.state?.waiting?.reason)
        .filter(Boolean)
        .join(',');
      const last = items
        .filter((e) => e.involvedObject.name === name)
        .slice(-2)
        .map((e) => `${e.reason}: ${e.message.slice(0, 300)}`);
      out.push(
        `${name} ${status?.phase ?? '?'}${waiting ? ` (${waiting})` : ''}${last.length ? ` [${last.join(' | ')}]` : ''}`,
      );
    }
    return out.join('; ');
  }

  /** Messages of the FailedCreatePodSandBox events in a namespace. */
  async sandboxFailures(namespace: string): Promise<string[]> {
    const events = await this.api.request(
      'GET',
      `/api/v1/namespaces/${namespace}/events?fieldSelector=reason%3DFailedCreatePodSandBox`,
    );
    const items =
      (events.body as { items?: { involvedObject: { name: string }; message: string; count?: number }[] }).items ?? [];
    return items.flatMap((e) => Array.from({ length: e.count ?? 1 }, () => `${e.involvedObject.name}: ${e.message}`));
  }

  /** A pod as the API has it now (metadata, spec, status). */
  async pod(
    namespace: string,
    name: string,
  ): Promise<{
    metadata: { uid: string; annotations?: Record<string, string> };
    status?: { phase?: string; podIP?: string; podIPs?: { ip: string }[] };
  }> {
    const got = await this.api.request('GET', `/api/v1/namespaces/${namespace}/pods/${name}`);
    if (got.status !== 200) throw new Error(`GET pod ${namespace}/${name}: ${got.status}`);
    return got.body as never;
  }

  /**
   * Deletes every pod of the namespaces createPods used and waits until the API has none left: the kubelet lets a pod
   * go only after it stopped its sandbox, which is when containerd runs CNI DEL. Then waits until CRI reports no ready
   * sandbox. Answers the milliseconds it took.
   */
  async deleteAllPods(timeoutMs = 120000): Promise<number> {
    const started = performance.now();
    const namespaces = [...new Set([...this.pods.keys()].map((k) => k.split('/')[0]!))];
    for (const ns of namespaces) {
      const r = await this.api.request('DELETE', `/api/v1/namespaces/${ns}/pods`);
      if (r.status !== 200)
        throw new Error(`deleting the pods of ${ns}: ${r.status} ${JSON.stringify(r.body).slice(0, 300)}`);
    }
    const deadline = Date.now() + timeoutMs;
    for (const ns of namespaces) {
      for (;;) {
        const list = await this.api.request('GET', `/api/v1/namespaces/${ns}/pods`);
        const left = ((list.body as { items?: { metadata: { name: string } }[] }).items ?? []).map(
          (p) => p.metadata.name,
        );
        if (left.length === 0) break;
        if (Date.now() > deadline || this.nodeDown())
          throw new Error(
            `${left.length} pods of ${ns} still in the API after ${timeoutMs} ms: ${await this.describePods(ns, left.slice(0, 3))}`,
          );
        await sleep(200);
      }
    }
    for (const key of [...this.pods.keys()]) if (namespaces.includes(key.split('/')[0]!)) this.pods.delete(key);
    const cri = new CriRuntime(this.containerdSocket);
    for (;;) {
      const ready = (await cri.listSandboxes()).filter((s) => s.ready);
      if (ready.length === 0) break;
      if (Date.now() > deadline)
        throw new Error(
          `sandboxes still ready after their pods were deleted: ${ready.map((s) => `${s.namespace}/${s.name}`).join(', ')}`,
        );
      await sleep(200);
    }
    return performance.now() - started;
  }
}

/** A pause pod bound to `nodeName`: a local image, no token volume, nothing to wait for at deletion. */
export const podObject = (
  name: string,
  nodeName: string,
  annotations: Readonly<Record<string, string>>,
  limits?: Readonly<Record<string, string>>,
): unknown => ({
  apiVersion: 'v1',
  kind: 'Pod',
  metadata: { name, ...(Object.keys(annotations).length ? { annotations } : {}) },
  spec: {
    nodeName,
    automountServiceAccountToken: false,
    enableServiceLinks: false,
    terminationGracePeriodSeconds: 1,
    containers: [
      { name: 'c', image: PAUSE_IMAGE, imagePullPolicy: 'Never', ...(limits ? { resources: { limits } } : {}) },
    ],
  },
});
