/**
 * A Lease per node (coordination.k8s.io/v1, `plexus-node-<node>` in plexusd's namespace) that the node's plexusd holds
 * under an identity of its own process and renews: what other nodes take as proof that a node is alive (a Node object
 * says only what the kubelet or an autoscaler did), and what shows a second plexusd started under the same node name.
 *
 * - Renewal: every third of --node-lease-seconds, a GET and a PUT guarded by the resourceVersion read.
 * - Another node's liveness is judged by this process's own clock (no two nodes' clocks are compared): the time since
 *   the lease's resourceVersion last changed, less its duration; a released lease (holder "") is expired from its
 *   release, an absent one from when this process first found it absent.
 * - A lease renewed by another identity is a second plexusd with this node's name, unless it is the identity this
 *   state directory's previous process used (dead: this process holds the state directory's lock). While that lasts,
 *   this process refuses cluster-IPAM allocations, logs an error, counts it in a metric and writes a Warning event
 *   on the Lease. It takes the lease over once the other stops renewing it for the lease's duration.
 */
import { segment } from '../common/api-object';
import type { Logger } from 'pino';
import type { NodeLiveness } from '../ipam/cluster/node-liveness';
import { type KubeApiClient } from './api-client';

export interface NodeLeaseOptions {
  readonly node: string;
  readonly namespace: string;
  /** This process's holderIdentity. */
  readonly identity: string;
  /** The identity the previous plexusd on this state directory held the lease under (it is gone). */
  readonly predecessor?: string;
  readonly durationMs: number;
}

interface LeaseObject {
  readonly metadata?: { readonly name?: string; readonly uid?: string; readonly resourceVersion?: string };
  readonly spec?: {
    readonly holderIdentity?: string;
    readonly leaseDurationSeconds?: number;
    readonly acquireTime?: string;
    readonly renewTime?: string;
    readonly leaseTransitions?: number;
  };
}

/** What this process last saw of a lease: its version and when that version was first seen (this clock). */
interface Observed {
  readonly version: string;
  readonly since: number;
  readonly durationMs: number;
}

export const NODE_LEASE_CONFLICT = 'NodeLeaseConflict';
const ABSENT = '\u0000absent';

/** The Lease's name for a node: `plexus-node-<node>`, shortened with a hash if that is over 253 characters. */
export function leaseNameOf(node: string): string {
  const name = `plexus-node-${node}`;
  if (name.length <= 253) return name;
  let hash = 0x811c9dc5;
  for (const ch of node) hash = Math.imul(hash ^ ch.charCodeAt(0), 0x01000193) >>> 0;
  return `${name.slice(0, 240).replace(/[.-]+$/, '')}-${hash.toString(16).padStart(8, '0')}`;
}

/** A MicroTime: RFC 3339 with six fractional digits, as the API server parses it. */
const microTime = (ms: number): string => new Date(ms).toISOString().replace(/\.(\d{3})Z$/, '.$1000Z');

export class NodeLeases implements NodeLiveness {
  private readonly observed = new Map<string, Observed>();
  /** When this process last renewed (or took) its lease; undefined until it first has. */
  private renewedAt: number | undefined;
  /** Another process renewing this node's lease: its identity and when this process first saw it. */
  private conflict: { readonly holder: string; readonly since: number } | undefined;
  private timer: NodeJS.Timeout | undefined;
  private renewing: Promise<void> | undefined;
  /** Conflicts seen since start (a metric). */
  conflicts = 0;

  constructor(
    private readonly client: KubeApiClient,
    private readonly options: NodeLeaseOptions,
    private readonly log: Logger,
  ) {}

  private get path(): string {
    return `/apis/coordination.k8s.io/v1/namespaces/${segment(this.options.namespace)}/leases`;
  }

  /** Takes (or renews) the lease once, then keeps renewing it every third of its duration. */
  async start(): Promise<void> {
    await this.renew();
    this.timer = setInterval(() => void this.renew(), Math.max(100, Math.floor(this.options.durationMs / 3)));
    this.timer.unref();
  }

  /** Stops renewing and releases the lease (holder ""), so the next plexusd of this node takes it at once. */
  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    await this.renewing;
    if (this.renewedAt === undefined || this.conflict !== undefined) return;
    const got = await this.get(this.options.node);
    if (!got.ok || got.value?.spec?.holderIdentity !== this.options.identity) return;
    await this.put(got.value, { ...got.value.spec, holderIdentity: '', leaseDurationSeconds: 1 });
  }

  /** Whether another process holds this node's lease now (for /metrics). */
  get contested(): boolean {
    return this.conflict !== undefined;
  }

  refusal(graceMs: number): string | undefined {
    if (this.conflict !== undefined) {
      const { holder } = this.conflict;
      return `another plexusd (identity ${holder}) holds the lease of node ${this.options.node}: two daemons under one node name would hand out the same blocks' addresses; stop one of them (check --node-name and NODE_NAME)`;
    }
    // Others may take this node's blocks once its lease has been expired for the grace, timed from when they saw its
    // last renewal: stopping halfway through the grace leaves that half as the margin (the whole duration if it is 0).
    const silent = this.renewedAt === undefined ? 0 : Date.now() - this.renewedAt;
    if (silent > this.options.durationMs + graceMs / 2) {
      void this.renew(); // the API may be back: the next call need not wait for the timer
      return `this node could not renew its lease for ${Math.round(silent / 1000)} s: other nodes may by now take its blocks back, so it stops allocating until the API answers`;
    }
    return undefined;
  }

  async expiredForMs(node: string): Promise<number | undefined> {
    const got = await this.get(node);
    if (!got.ok) return undefined;
    const lease = got.value;
    const now = Date.now();
    const released = lease !== undefined && !lease.spec?.holderIdentity;
    const version = lease === undefined ? ABSENT : `${lease.metadata?.uid}/${lease.metadata?.resourceVersion}`;
    const durationMs = lease === undefined || released ? 0 : (lease.spec?.leaseDurationSeconds ?? 0) * 1000;
    const seen = this.observed.get(node);
    if (seen === undefined || seen.version !== version) {
      this.observed.set(node, { version, since: now, durationMs });
      return 0;
    }
    return Math.max(0, now - seen.since - seen.durationMs);
  }

  /** One renewal; renewals never overlap. */
  private renew(): Promise<void> {
    this.renewing ??= this.renewOnce()
      .catch((e: unknown) => this.log.warn({ err: e }, 'renewing the node lease failed; retrying'))
      .finally(() => {
        this.renewing = undefined;
      });
    return this.renewing;
  }

  private async renewOnce(): Promise<void> {
    const { node, identity, predecessor } = this.options;
    const got = await this.get(node);
    if (!got.ok) return;
    const now = Date.now();
    const lease = got.value;
    if (lease === undefined) {
      const created = await this.client.request('POST', this.path, 'leases', {
        urgent: true,
        body: this.body(undefined, now),
      });
      if (created.ok) this.held(now);
      else this.refused('create', created.error);
      return;
    }
    const holder = lease.spec?.holderIdentity ?? '';
    if (holder !== identity && holder !== '' && holder !== predecessor && !this.expiredSince(node, lease, now)) {
      this.contestedBy(holder, lease);
      return;
    }
    const put = await this.put(lease, this.body(lease, now).spec);
    if (put.ok) this.held(now);
    else if (put.status !== 409) this.refused('update', { status: put.status, message: put.message });
  }

  /** A failed write of the lease: a 403 (the Role of deploy/10-rbac.yaml not applied) does not go away by itself. */
  private refused(verb: string, failure: { readonly status: number; readonly message: string }): void {
    const fields = {
      lease: leaseNameOf(this.options.node),
      namespace: this.options.namespace,
      verb,
      status: failure.status,
      err: failure.message,
    };
    if (failure.status === 403)
      this.log.error(
        fields,
        'plexusd may not write its node lease (apply the Role in deploy/10-rbac.yaml): other nodes cannot tell it is alive',
      );
    else this.log.warn(fields, 'could not write the node lease; retrying');
  }

  /** Whether a lease another process holds has gone unrenewed for its duration, by this process's clock. */
  private expiredSince(node: string, lease: LeaseObject, now: number): boolean {
    const version = `${lease.metadata?.uid}/${lease.metadata?.resourceVersion}`;
    const durationMs = (lease.spec?.leaseDurationSeconds ?? 0) * 1000;
    const seen = this.observed.get(node);
    if (seen === undefined || seen.version !== version) {
      this.observed.set(node, { version, since: now, durationMs });
      return false;
    }
    return now - seen.since > durationMs;
  }

  private held(now: number): void {
    if (this.conflict !== undefined) {
      this.log.warn(
        { lease: leaseNameOf(this.options.node), previous: this.conflict.holder },
        "took this node's lease back: the other plexusd stopped renewing it",
      );
    } else if (this.renewedAt === undefined) {
      this.log.info(
        { lease: leaseNameOf(this.options.node), namespace: this.options.namespace, identity: this.options.identity },
        "holding this node's lease",
      );
    }
    this.conflict = undefined;
    this.renewedAt = now;
  }

  private contestedBy(holder: string, lease: LeaseObject): void {
    const first = this.conflict?.holder !== holder;
    if (first) {
      this.conflict = { holder, since: Date.now() };
      this.conflicts++;
      this.event(lease, holder);
    }
    this.log.error(
      {
        lease: leaseNameOf(this.options.node),
        namespace: this.options.namespace,
        holder,
        identity: this.options.identity,
      },
      "another plexusd renews this node's lease (two daemons with one node name): this one refuses cluster-IPAM allocations until it stops",
    );
  }

  private event(lease: LeaseObject, holder: string): void {
    const { namespace, node, identity } = this.options;
    const now = new Date().toISOString();
    const message = `plexusd ${identity} found node ${node}'s lease held and renewed by ${holder}: two plexusd run with node name ${node}; the later one refuses cluster IPAM`;
    void this.client
      .request('POST', `/api/v1/namespaces/${segment(namespace)}/events`, 'events', {
        body: {
          apiVersion: 'v1',
          kind: 'Event',
          metadata: { generateName: `${leaseNameOf(node).slice(0, 200)}.`, namespace },
          involvedObject: {
            apiVersion: 'coordination.k8s.io/v1',
            kind: 'Lease',
            namespace,
            name: leaseNameOf(node),
            uid: lease.metadata?.uid,
          },
          reason: NODE_LEASE_CONFLICT,
          message,
          type: 'Warning',
          count: 1,
          firstTimestamp: now,
          lastTimestamp: now,
          source: { component: 'plexus', host: node },
          reportingComponent: 'plexus',
          reportingInstance: identity,
        },
      })
      .then((r) => {
        if (!r.ok) this.log.warn({ err: r.error.message }, `could not write the ${NODE_LEASE_CONFLICT} event`);
      });
  }

  private body(lease: LeaseObject | undefined, now: number) {
    const spec = lease?.spec;
    const taking = spec?.holderIdentity !== this.options.identity;
    return {
      apiVersion: 'coordination.k8s.io/v1',
      kind: 'Lease',
      metadata: { ...(lease?.metadata ?? {}), name: leaseNameOf(this.options.node), namespace: this.options.namespace },
      spec: {
        holderIdentity: this.options.identity,
        leaseDurationSeconds: Math.max(1, Math.round(this.options.durationMs / 1000)),
        acquireTime: taking || !spec?.acquireTime ? microTime(now) : spec.acquireTime,
        renewTime: microTime(now),
        leaseTransitions:
          (spec?.leaseTransitions ?? 0) + (lease !== undefined && taking && spec?.holderIdentity ? 1 : 0),
      },
    };
  }

  private async get(node: string): Promise<{ ok: true; value: LeaseObject | undefined } | { ok: false }> {
    const got = await this.client.request('GET', `${this.path}/${segment(leaseNameOf(node))}`, 'leases', {
      urgent: true,
    });
    if (got.ok) return { ok: true, value: got.value as LeaseObject };
    if (got.error.status === 404) return { ok: true, value: undefined };
    return { ok: false };
  }

  private async put(
    lease: LeaseObject,
    spec: LeaseObject['spec'],
  ): Promise<{ ok: true } | { ok: false; status: number; message: string }> {
    const name = leaseNameOf(this.options.node);
    const r = await this.client.request('PUT', `${this.path}/${segment(name)}`, 'leases', {
      urgent: true,
      body: {
        apiVersion: 'coordination.k8s.io/v1',
        kind: 'Lease',
        metadata: { ...lease.metadata, name, namespace: this.options.namespace },
        spec,
      },
    });
    return r.ok ? { ok: true } : { ok: false, status: r.error.status, message: r.error.message };
  }
}
