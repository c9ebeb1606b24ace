/**
 * Plexus is the writer of its pods' k8s.v1.cni.cncf.io/network-status; others only read it. When someone else
 * rewrites or removes it on a pod whose networks this node attached, the pod informer shows the change, and the status
 * the journal holds for the pod (its newest committed record of that UID) is written again. Plexus's own writes are
 * told apart by value (what the engine last reported for the pod), so they cost no journal read. At start every cached
 * pod is compared once (changes made while plexusd was away, or a status never written before a crash). Another
 * writer that keeps rewriting is not fought forever: a pod is restored at most RESTORES times per WINDOW_MS, then a
 * warning names it.
 */
import { isDeepStrictEqual } from 'node:util';
import type { Logger } from 'pino';
import type { AttachmentRecord } from '../engine/journal';
import type { StatusSink } from '../engine/status-sink';
import type { NetworkStatusEntry } from '../networks/status';
import type { CachedPod } from './pod-source';
import { NETWORK_STATUS_ANNOTATION } from './status-writer';
import type { PodIdentity } from '../cni/types';
import { errorMessage } from '../common/error-message';

/** What the keeper reads of the engine: the journal's records. */
export interface StatusRecords {
  records(): Promise<AttachmentRecord[]>;
}

/** What the keeper needs of the pod cache. */
export interface WatchedPods {
  list(): CachedPod[];
  onChange(watcher: (pod: CachedPod, previous: CachedPod | undefined) => void): void;
}

/** Where a restored status is written (ApiStatusWriter). */
export interface StatusWrite {
  attached(pod: PodIdentity, containerId: string, status: readonly NetworkStatusEntry[]): void;
}

const RESTORES = 5;
const WINDOW_MS = 10 * 60_000;

const podKey = (namespace: string, name: string): string => `${namespace}/${name}`;

/** Whether an annotation value says what `status` says (any formatting). */
function says(value: string | undefined, status: readonly NetworkStatusEntry[]): boolean {
  if (value === undefined) return false;
  try {
    // Through JSON both: the engine's entries may hold undefined fields, which a written annotation does not.
    return isDeepStrictEqual(JSON.parse(value), JSON.parse(JSON.stringify(status)));
  } catch {
    return false;
  }
}

/** The status of the pod's newest committed record of its UID, with its container; undefined when it has none. */
function journaled(
  records: readonly AttachmentRecord[],
  pod: CachedPod,
): { containerId: string; status: readonly NetworkStatusEntry[] } | undefined {
  const committedAt = (r: AttachmentRecord): string => r.events.filter((e) => e.what === 'committed').at(-1)?.at ?? '';
  const mine = records.filter(
    (r) =>
      r.result &&
      r.details &&
      !r.deleting &&
      !r.changing &&
      r.meta.pod.namespace === pod.namespace &&
      r.meta.pod.name === pod.name &&
      (!r.meta.pod.uid || r.meta.pod.uid === pod.sandboxUid),
  );
  const newest = mine.sort((a, b) => (committedAt(a) < committedAt(b) ? -1 : 1)).at(-1);
  return newest?.details ? { containerId: newest.meta.containerId, status: newest.details.networkStatus } : undefined;
}

export class NetworkStatusKeeper {
  /** What the engine last reported for each pod (what Plexus writes): a change to that value is Plexus's own. */
  private readonly reported = new Map<string, readonly NetworkStatusEntry[]>();
  private readonly restores = new Map<string, number[]>();
  private readonly checking = new Set<string>();

  constructor(
    private readonly journal: StatusRecords,
    private readonly pods: WatchedPods,
    private readonly writer: StatusWrite,
    private readonly log: Logger,
  ) {
    pods.onChange((pod, previous) => {
      if (!previous) return; // first sight: the ADD's own write, or resyncAll, covers it
      const value = pod.annotations[NETWORK_STATUS_ANNOTATION];
      if (previous.annotations[NETWORK_STATUS_ANNOTATION] === value) return;
      const reported = this.reported.get(podKey(pod.namespace, pod.name));
      if (reported && says(value, reported)) return;
      void this.check(pod);
    });
  }

  /** A StatusSink: remembers what the engine reported for each pod, which is what the writer writes. */
  readonly sink: StatusSink = {
    attached: (pod, _containerId, status) => {
      if (pod.namespace && pod.name) this.reported.set(podKey(pod.namespace, pod.name), status);
    },
    detached: (pod) => {
      if (!pod.namespace || !pod.name) return;
      this.reported.delete(podKey(pod.namespace, pod.name));
      this.restores.delete(podKey(pod.namespace, pod.name));
    },
    failed: () => undefined,
  };

  /** Compares every cached pod's annotation with the journal (at start). */
  async resyncAll(): Promise<void> {
    const records = await this.journal.records();
    for (const pod of this.pods.list()) this.restoreIfChanged(pod, records);
  }

  private async check(pod: CachedPod): Promise<void> {
    const key = podKey(pod.namespace, pod.name);
    if (this.checking.has(key)) return;
    this.checking.add(key);
    try {
      this.restoreIfChanged(pod, await this.journal.records());
    } catch (e) {
      this.log.warn({ pod: key, err: errorMessage(e) }, 'could not read the journal to check network-status');
    } finally {
      this.checking.delete(key);
    }
  }

  private restoreIfChanged(pod: CachedPod, records: readonly AttachmentRecord[]): void {
    const key = podKey(pod.namespace, pod.name);
    const held = journaled(records, pod);
    if (!held) return; // no networks of this node: not Plexus's status to keep
    this.reported.set(key, held.status);
    const value = pod.annotations[NETWORK_STATUS_ANNOTATION];
    if (says(value, held.status)) return;
    const now = Date.now();
    const recent = (this.restores.get(key) ?? []).filter((t) => now - t < WINDOW_MS);
    if (recent.length >= RESTORES) {
      if (recent.length === RESTORES)
        this.log.warn(
          { pod: key, restores: RESTORES, minutes: WINDOW_MS / 60_000 },
          "another writer keeps changing the pod's network-status; not restored again for now",
        );
      this.restores.set(key, [...recent, now]);
      return;
    }
    this.restores.set(key, [...recent, now]);
    this.log.warn(
      { pod: key, containerId: held.containerId, found: value === undefined ? 'removed' : value.slice(0, 200) },
      'network-status was changed by another writer; writing back what the journal holds',
    );
    this.writer.attached({ namespace: pod.namespace, name: pod.name, uid: pod.uid }, held.containerId, held.status);
  }
}
