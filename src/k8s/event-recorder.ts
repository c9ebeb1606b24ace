/**
 * Pod events, so `kubectl describe pod` says what Plexus did: Normal AddedInterface for each interface an ADD (or a
 * hot-plug) attached ("Add net1 [10.1.0.5/24] from team-a/blue", as Multus words it), RemovedInterface for each one a
 * hot-plug removed, Warning FailedAttachNetwork with the CNI error's message when an ADD or a hot-plug fails. A failure repeated by the kubelet's retries updates one event's count and last
 * time (as client-go's correlator does) instead of creating one per retry. Written in the background, like status.
 */
import { segment } from '../common/api-object';
import { randomBytes } from 'node:crypto';
import type { Logger } from 'pino';
import type { CniError } from '../cni/errors';
import type { StatusSink } from '../engine/status-sink';
import type { AddedInterface, NetworkStatusEntry } from '../networks/status';
import { type KubeApiClient } from './api-client';
import { BackgroundWrites } from './background-writes';
import type { StatusWriteOptions } from './status-writer';
import type { PodIdentity } from '../cni/types';

export const ADDED_INTERFACE = 'AddedInterface';
export const REMOVED_INTERFACE = 'RemovedInterface';
export const FAILED_ATTACH = 'FailedAttachNetwork';
/** Events' source.component and reportingController. */
export const EVENT_COMPONENT = 'plexus';

/** A repeated event within this window is counted on the first one. */
const CORRELATION_MS = 10 * 60_000;
const MAX_CORRELATED = 4096;
/** core/v1 Event messages are cut by the API at 1 KiB (kubectl shows the start). */
const MAX_MESSAGE = 1024;

interface Counted {
  readonly name: string;
  count: number;
  at: number;
  /** The POST of the first occurrence, which a repeat's PATCH must follow. */
  created: Promise<boolean>;
}

type FullPod = Required<Pick<PodIdentity, 'namespace' | 'name'>> & PodIdentity;

export class EventRecorder implements StatusSink {
  private readonly writes: BackgroundWrites;
  private readonly counted = new Map<string, Counted>();
  private readonly apiUid: NonNullable<StatusWriteOptions['apiUid']>;

  /** `options.apiUid`: events of a static pod's sandbox name its mirror pod, as `kubectl describe` looks them up. */
  constructor(
    private readonly client: KubeApiClient,
    private readonly nodeName: string,
    log: Logger,
    options: StatusWriteOptions = {},
  ) {
    this.writes = new BackgroundWrites(log, { attempts: 5, ...options });
    this.apiUid = options.apiUid ?? ((_namespace, _name, uid) => uid);
  }

  attached(
    pod: PodIdentity,
    _containerId: string,
    _status: readonly NetworkStatusEntry[],
    added: readonly AddedInterface[],
    removed: readonly { readonly network: string; readonly ifname: string }[] = [],
  ): void {
    if (!isFull(pod)) return;
    for (const entry of added) this.emit(pod, 'Normal', ADDED_INTERFACE, addedInterfaceMessage(entry));
    for (const gone of removed)
      this.emit(pod, 'Normal', REMOVED_INTERFACE, `Remove ${gone.ifname} from ${gone.network}`);
  }

  detached(): void {
    // The kubelet reports a sandbox's end itself.
  }

  failed(pod: PodIdentity, _containerId: string, error: CniError): void {
    if (!isFull(pod)) return;
    this.emit(pod, 'Warning', FAILED_ATTACH, `plexus: ${error.message} (CNI error ${error.code})`);
  }

  settled(): Promise<void> {
    return this.writes.settled();
  }

  private emit(pod: FullPod, type: 'Normal' | 'Warning', reason: string, text: string): void {
    const message = text.length > MAX_MESSAGE ? `${text.slice(0, MAX_MESSAGE - 3)}...` : text;
    const now = Date.now();
    const key = `${pod.namespace}\u0000${pod.name}\u0000${pod.uid ?? ''}\u0000${reason}\u0000${message}`;
    this.forgetOld(now);
    const earlier = this.counted.get(key);
    const base = `/api/v1/namespaces/${segment(pod.namespace)}/events`;
    if (earlier && now - earlier.at < CORRELATION_MS) {
      earlier.count += 1;
      earlier.at = now;
      this.counted.delete(key);
      this.counted.set(key, earlier); // kept in order of last use, for forgetOld
      const { name, count } = earlier;
      const after = earlier.created;
      this.writes.start({ event: reason, pod: `${pod.namespace}/${pod.name}` }, async () => {
        if (!(await after)) return { outcome: 'stop', why: 'the first event of the series was not written' };
        if (earlier.count !== count) return { outcome: 'done' }; // a later repeat writes a higher count
        const r = await this.client.request('PATCH', `${base}/${segment(name)}`, 'events', {
          body: { count, lastTimestamp: new Date(now).toISOString() },
          contentType: 'application/merge-patch+json',
        });
        return r.ok
          ? { outcome: 'done' }
          : r.error.status === 404
            ? { outcome: 'stop', why: 'the event expired' }
            : { outcome: 'retry', why: r.error.message };
      });
      return;
    }
    const name = `${pod.name}.${randomBytes(8).toString('hex')}`;
    const body = eventObject({
      name,
      involved: {
        apiVersion: 'v1',
        kind: 'Pod',
        namespace: pod.namespace,
        name: pod.name,
        ...(pod.uid ? { uid: this.apiUid(pod.namespace, pod.name, pod.uid) } : {}),
      },
      type,
      reason,
      message,
      at: now,
      node: this.nodeName,
    });
    let resolveCreated: (written: boolean) => void = () => undefined;
    const created = new Promise<boolean>((r) => (resolveCreated = r));
    this.counted.set(key, { name, count: 1, at: now, created });
    let written = false;
    this.writes.start(
      { event: reason, pod: `${pod.namespace}/${pod.name}` },
      async () => {
        const r = await this.client.request('POST', base, 'events', { body });
        if (r.ok || r.error.status === 409) {
          written = true;
          return { outcome: 'done' };
        }
        // 403/404/422: the namespace is going away or the event is refused; retrying will not change it.
        if ([403, 404, 422].includes(r.error.status))
          return { outcome: 'stop', why: `refused (HTTP ${r.error.status}): ${r.error.message}` };
        return { outcome: 'retry', why: r.error.message };
      },
      () => resolveCreated(written),
    );
  }

  /** Drops series older than the correlation window, and the oldest when too many are kept. */
  private forgetOld(now: number): void {
    for (const [key, c] of this.counted) {
      if (now - c.at >= CORRELATION_MS || this.counted.size > MAX_CORRELATED) this.counted.delete(key);
      else break; // insertion order is roughly age order; stop at the first young one
    }
  }
}

/** The AddedInterface event's message, as Multus words it: addresses with their prefix, as Go prints a list. */
export const addedInterfaceMessage = (added: AddedInterface): string =>
  `Add ${added.ifname} [${added.addresses.join(' ')}] from ${added.network}`;

const isFull = (pod: PodIdentity): pod is FullPod => Boolean(pod.namespace && pod.name);

/** The object an Event is about, as core/v1 names it. */
export interface InvolvedObject {
  readonly apiVersion: string;
  readonly kind: string;
  readonly namespace: string;
  readonly name: string;
  readonly uid?: string;
}

/** A core/v1 Event's body, the first of its series, written by plexus on `node`. */
export function eventObject(e: {
  readonly name: string;
  readonly involved: InvolvedObject;
  readonly type: 'Normal' | 'Warning';
  readonly reason: string;
  readonly message: string;
  readonly at: number;
  readonly node: string;
}): Record<string, unknown> {
  const time = new Date(e.at).toISOString();
  return {
    apiVersion: 'v1',
    kind: 'Event',
    metadata: { name: e.name, namespace: e.involved.namespace },
    involvedObject: e.involved,
    type: e.type,
    reason: e.reason,
    message: e.message.length > MAX_MESSAGE ? `${e.message.slice(0, MAX_MESSAGE - 3)}...` : e.message,
    count: 1,
    firstTimestamp: time,
    lastTimestamp: time,
    source: { component: EVENT_COMPONENT, host: e.node },
    reportingComponent: EVENT_COMPONENT,
    reportingInstance: e.node,
  };
}
