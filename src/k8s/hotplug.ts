/**
 * Hot-plug: when the k8s.v1.cni.cncf.io/networks annotation of a running pod on this node changes, its networks are
 * made to match (AttachmentEngine.changeNetworks: one journaled transaction, additions first, a failure leaves the pod
 * as it was). Changes that arrive while one is being applied are coalesced: the pod is compared once more with its
 * newest annotation when the running change ends. A failure is a Warning event on the pod; success is reported by the
 * engine like any change (network-status, AddedInterface and RemovedInterface events).
 *
 * Besides annotation changes, a pod is compared again after its ADD committed (a change that raced the ADD) and, for
 * every pod, when plexusd starts (changes made while it was down, or a change a crash interrupted).
 */
import type { Logger } from 'pino';
import type { CniError, Result } from '../cni/errors';
import type { AttachmentRecord, AttachmentTag } from '../engine/journal';
import type { StatusSink } from '../engine/status-sink';
import { SELECTION_ANNOTATION } from '../networks/selection';
import type { CachedPod } from './pod-source';
import { errorMessage } from '../common/error-message';

/** What the controller needs of the engine. */
export interface NetworkChanger {
  records(): Promise<AttachmentRecord[]>;
  /** The records of one container (cheaper than every record, after each ADD). */
  recordsOf(containerId: string): Promise<AttachmentRecord[]>;
  changeNetworks(
    containerId: string,
    runtimeIfname: string,
    annotations: Readonly<Record<string, string>>,
  ): Promise<Result<{ readonly added: readonly AttachmentTag[]; readonly removed: readonly AttachmentTag[] }>>;
}

/** What the controller needs of the pod cache. */
export interface PodCache {
  cachedPod(namespace: string, name: string): CachedPod | undefined;
  list(): CachedPod[];
  onChange(watcher: (pod: CachedPod, previous: CachedPod | undefined) => void): void;
}

const podKey = (namespace: string, name: string): string => `${namespace}/${name}`;
/**
 * The annotation whose change matters to a running pod's networks. (The default network never changes while a pod
 * runs: a changed v1.multus-cni.io/default-network applies to the pod's next sandbox.)
 */
const WATCHED = [SELECTION_ANNOTATION];

export class HotplugController {
  private readonly running = new Map<string, Promise<void>>();
  private readonly again = new Set<string>();
  /**
   * The sandboxes that hold attachments, by pod: an annotation change reads only its pod's records, not the whole
   * journal. Built at resyncAll, kept by the ADD and DEL reports; a pod not in it (or a sandbox gone without a DEL
   * report, e.g. by GC) falls back to, or is dropped by, a read of the journal.
   */
  private readonly sandboxes = new Map<string, Set<string>>();
  private indexed = false;
  private stopped = false;

  constructor(
    private readonly engine: NetworkChanger,
    private readonly pods: PodCache,
    /** Where a failed change is reported (the pod's events). */
    private readonly sink: StatusSink,
    private readonly log: Logger,
  ) {
    pods.onChange((pod, previous) => {
      if (previous && WATCHED.every((k) => previous.annotations[k] === pod.annotations[k])) return;
      if (previous) this.enqueue(pod.namespace, pod.name);
    });
  }

  /** Compares every cached pod that has networks on this node with its annotation (at start). */
  async resyncAll(): Promise<void> {
    this.sandboxes.clear();
    for (const r of await this.engine.records())
      if (r.result && !r.deleting)
        this.remember(podKey(r.meta.pod.namespace ?? '', r.meta.pod.name ?? ''), r.meta.containerId);
    this.indexed = true;
    for (const pod of this.pods.list())
      if (this.sandboxes.has(podKey(pod.namespace, pod.name))) this.enqueue(pod.namespace, pod.name);
  }

  /** A StatusSink hook: after a pod's ADD, compare it once more (its annotation may have changed meanwhile). */
  readonly afterAdd: StatusSink = {
    attached: (pod, containerId, status, added) => {
      if (!pod.namespace || !pod.name) return;
      this.remember(podKey(pod.namespace, pod.name), containerId);
      if (added.length === status.length) this.enqueue(pod.namespace, pod.name, containerId);
    },
    detached: (pod, containerId) => {
      if (pod.namespace && pod.name) this.forget(podKey(pod.namespace, pod.name), containerId);
    },
    failed: () => undefined,
  };

  /**
   * Compares the pod with its annotation now, or after the change under way for it ends. `containerId`: the sandbox
   * just added, whose record is read alone (every record otherwise).
   */
  enqueue(namespace: string, name: string, containerId?: string): void {
    if (this.stopped) return;
    const key = podKey(namespace, name);
    if (this.running.has(key)) {
      this.again.add(key);
      return;
    }
    const run = (async () => {
      let sandbox = containerId;
      do {
        this.again.delete(key);
        await this.apply(namespace, name, sandbox).catch((e: unknown) =>
          this.log.error({ pod: key, err: errorMessage(e) }, 'hot-plug failed unexpectedly'),
        );
        sandbox = undefined;
      } while (this.again.has(key) && !this.stopped);
    })().finally(() => this.running.delete(key));
    this.running.set(key, run);
  }

  private remember(key: string, containerId: string): void {
    let set = this.sandboxes.get(key);
    if (!set) this.sandboxes.set(key, (set = new Set()));
    set.add(containerId);
  }

  private forget(key: string, containerId: string): void {
    const set = this.sandboxes.get(key);
    if (!set) return;
    set.delete(containerId);
    if (set.size === 0) this.sandboxes.delete(key);
  }

  /** Resolves when no change is under way (for shutdown and tests). */
  async settled(): Promise<void> {
    while (this.running.size) await Promise.all([...this.running.values()]);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await this.settled();
  }

  private async apply(namespace: string, name: string, containerId: string | undefined): Promise<void> {
    const pod = this.pods.cachedPod(namespace, name);
    if (!pod) return; // deleted: its DEL removes everything
    const key = podKey(namespace, name);
    const known = containerId ? [containerId] : this.indexed ? [...(this.sandboxes.get(key) ?? [])] : undefined;
    const candidates = known
      ? (await Promise.all(known.map((cid) => this.engine.recordsOf(cid)))).flat()
      : await this.engine.records();
    for (const cid of known ?? [])
      if (!candidates.some((r) => r.meta.containerId === cid && !r.deleting)) this.forget(key, cid);
    const records = candidates.filter(
      (r) =>
        r.result &&
        !r.deleting &&
        r.meta.pod.namespace === namespace &&
        r.meta.pod.name === name &&
        (!r.meta.pod.uid || r.meta.pod.uid === pod.sandboxUid),
    );
    for (const record of records) {
      const { containerId, ifname } = record.meta;
      const started = performance.now();
      const r = await this.engine.changeNetworks(containerId, ifname, pod.annotations);
      if (!r.ok) {
        this.log.warn(
          { pod: podKey(namespace, name), containerId, err: r.error.message },
          'changing the networks of a running pod failed; it keeps the networks it had',
        );
        this.sink.failed({ namespace, name, uid: pod.uid }, containerId, withChangeContext(r.error));
        continue;
      }
      if (r.value.added.length || r.value.removed.length) {
        const describe = (keys: readonly AttachmentTag[]): string[] => keys.map((k) => `${k.network} as ${k.ifname}`);
        this.log.info(
          {
            pod: podKey(namespace, name),
            containerId,
            added: describe(r.value.added),
            removed: describe(r.value.removed),
            ms: Math.round(performance.now() - started),
          },
          'changed the networks of a running pod',
        );
      }
    }
  }
}

const withChangeContext = (e: CniError): CniError => e.withContext('changing the networks of the running pod');
