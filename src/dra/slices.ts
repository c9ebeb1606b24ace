/**
 * ResourceSlices (resource.k8s.io/v1) of this node: one slice per pool, kept equal to the pools offered now. Each
 * reconcile lists the node's plexus.io slices, creates the missing, replaces the changed (the pool's generation goes
 * up) and deletes those of pools no longer offered: with none offered (the kubelet does not know the driver, or
 * plexusd stops) it withdraws them all. It runs at start, on demand (a claim prepared or freed, the kubelet's
 * registration changed) and on a timer, which also brings back slices the kubelet wiped (it deletes every slice of
 * its node when it starts, and a driver's slices while the driver is unregistered).
 */
import { createHash } from 'node:crypto';
import type { Logger } from 'pino';
import type { KubeApiClient } from '../k8s/api-client';
import { DRIVER_NAME } from './api';
import type { DraPool } from './devices';
import { definedFields } from '../common/defined-fields';

const SLICES = '/apis/resource.k8s.io/v1/resourceslices';

export interface ResourceSlice {
  apiVersion: 'resource.k8s.io/v1';
  kind: 'ResourceSlice';
  metadata: { name: string; resourceVersion?: string; labels?: Record<string, string> };
  spec: {
    driver: string;
    nodeName: string;
    pool: { name: string; generation: number; resourceSliceCount: number };
    devices: { name: string; attributes: Record<string, unknown> }[];
  };
}

/** A slice's name: readable, unique per node and pool (a hash, since names have fewer characters than pools). */
export function sliceName(nodeName: string, pool: string): string {
  const hash = createHash('sha256').update(`${nodeName}\n${pool}`).digest('hex').slice(0, 8);
  const readable = `plexus-${nodeName}-${pool.split('/').pop() ?? ''}`.toLowerCase().replace(/[^a-z0-9.-]/g, '-');
  return `${readable.slice(0, 200)}-${hash}`;
}

/** The slice a pool should have (generation filled in by the caller). */
export function sliceFor(nodeName: string, pool: DraPool, generation: number): ResourceSlice {
  return {
    apiVersion: 'resource.k8s.io/v1',
    kind: 'ResourceSlice',
    metadata: { name: sliceName(nodeName, pool.name), labels: { 'app.kubernetes.io/managed-by': 'plexusd' } },
    spec: {
      driver: DRIVER_NAME,
      nodeName,
      pool: { name: pool.name, generation, resourceSliceCount: 1 },
      devices: pool.devices.map((d) => ({ name: d.name, attributes: { ...d.attributes } })),
    },
  };
}

/** Whether two slices publish the same devices (generation and metadata aside). */
const sameDevices = (a: ResourceSlice, b: ResourceSlice): boolean =>
  JSON.stringify(a.spec.devices) === JSON.stringify(b.spec.devices) &&
  a.spec.pool.resourceSliceCount === b.spec.pool.resourceSliceCount;

export interface SliceChanges {
  readonly created: string[];
  readonly updated: string[];
  readonly deleted: string[];
  /** Requests the API refused (status and message), each naming the slice. */
  readonly failed: string[];
}

type Answer = { ok: true } | { ok: false; error: { status: number; message: string } };

export class SlicePublisher {
  /** The pass under way or last done; the next one starts after it. */
  private last: Promise<unknown> = Promise.resolve();
  /** A pass asked for that has not started: later asks join it (it reads the pools when it starts). */
  private queued: Promise<SliceChanges> | undefined;
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly api: KubeApiClient,
    private readonly nodeName: string,
    private readonly pools: () => DraPool[],
    private readonly log: Logger,
  ) {}

  /** Reconciles now and then every `intervalMs`. */
  async start(intervalMs: number): Promise<SliceChanges> {
    const first = await this.reconcile();
    this.timer = setInterval(() => void this.reconcile(), intervalMs);
    this.timer.unref();
    return first;
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
  }

  /**
   * One reconcile at a time; what it answers is a pass that started after the call, so it saw the pools as they
   * were at the call or later (calls during a pass share the one pass after it).
   */
  reconcile(): Promise<SliceChanges> {
    if (this.queued) return this.queued;
    const queued = this.last.then(() => {
      this.queued = undefined;
      return this.pass();
    });
    this.queued = queued;
    this.last = queued.catch(() => undefined);
    return queued;
  }

  private async pass(): Promise<SliceChanges> {
    const changes: SliceChanges = { created: [], updated: [], deleted: [], failed: [] };
    const selector = encodeURIComponent(`spec.nodeName=${this.nodeName},spec.driver=${DRIVER_NAME}`);
    const listed = await this.api.request('GET', `${SLICES}?fieldSelector=${selector}`, 'resourceslices');
    if (!listed.ok) {
      changes.failed.push(`list: ${listed.error.status} ${listed.error.message}`);
      this.log.warn(
        { err: listed.error.message, status: listed.error.status },
        "cannot list this node's ResourceSlices",
      );
      return changes;
    }
    const existing = (listed.value as { items?: ResourceSlice[] }).items ?? [];
    const byPool = new Map(existing.map((s) => [s.spec.pool.name, s]));
    const wanted = this.pools();
    for (const pool of wanted) {
      const have = byPool.get(pool.name);
      if (!have) {
        const made = await this.api.request('POST', SLICES, 'resourceslices', {
          body: sliceFor(this.nodeName, pool, 1),
        });
        this.note(changes, made, 'created', sliceName(this.nodeName, pool.name));
        continue;
      }
      const want = sliceFor(this.nodeName, pool, have.spec.pool.generation);
      if (sameDevices(have, want) && have.metadata.name === want.metadata.name) continue;
      want.spec.pool.generation = have.spec.pool.generation + 1;
      const { resourceVersion } = have.metadata;
      want.metadata = {
        ...want.metadata,
        name: have.metadata.name,
        ...definedFields({ resourceVersion: resourceVersion || undefined }),
      };
      const put = await this.api.request(
        'PUT',
        `${SLICES}/${encodeURIComponent(have.metadata.name)}`,
        'resourceslices',
        { body: want },
      );
      this.note(changes, put, 'updated', have.metadata.name);
    }
    const pools = new Set(wanted.map((p) => p.name));
    for (const slice of existing.filter((s) => !pools.has(s.spec.pool.name))) {
      const gone = await this.api.request(
        'DELETE',
        `${SLICES}/${encodeURIComponent(slice.metadata.name)}`,
        'resourceslices',
      );
      this.note(
        changes,
        gone.ok || gone.error.status !== 404 ? gone : { ok: true, value: undefined },
        'deleted',
        slice.metadata.name,
      );
    }
    if (changes.created.length + changes.updated.length + changes.deleted.length)
      this.log.info(changes, 'ResourceSlices published');
    return changes;
  }

  private note(changes: SliceChanges, r: Answer, what: 'created' | 'updated' | 'deleted', name: string): void {
    if (r.ok) {
      changes[what].push(name);
      return;
    }
    // A conflict (someone else wrote the slice meanwhile) is settled by the next pass.
    changes.failed.push(`${name}: ${r.error.status} ${r.error.message}`);
    this.log.warn({ slice: name, status: r.error.status, err: r.error.message }, `ResourceSlice not ${what}`);
  }
}
