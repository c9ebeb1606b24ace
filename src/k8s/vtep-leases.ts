/**
 * Where the nodes of a cluster-mode vxlan network find each other (docs/drivers.md, "Cluster mode"): each node's
 * plexusd writes the VTEPs it serves into an annotation of the node Lease it already renews (node-lease.ts),
 * `plexus.io/vteps: {"<vni>": "<underlay address>"}`, by a merge PATCH only when that changes; it reads the others'
 * from one watch on the Leases of its namespace, started when it first serves a network. A peer is live while its
 * lease is held and was renewed within its duration, by this process's clock (as node-lease.ts judges liveness).
 * Renewals keep the annotation: they PUT the metadata they read. The Node's InternalIP is read at start and every
 * minute. The shape matches the vxlan driver's VtepDirectory port (src/drivers/vxlan/vtep-directory.ts), which this
 * floor may not import; src/node plugs it in.
 */
import type { Logger } from 'pino';
import { z } from 'zod';
import { isIP } from 'node:net';
import type { KubeApiClient } from './api-client';
import { segment } from '../common/api-object';
import { type ApiObject, Informer } from './informer';
import { leaseNameOf } from './node-lease';

export const VTEPS_ANNOTATION = 'plexus.io/vteps';
const LEASE_PREFIX = 'plexus-node-';
const NODE_ADDRESS_REFRESH_MS = 60_000;

interface LeaseRecord extends ApiObject {
  readonly spec?: { readonly holderIdentity?: string; readonly leaseDurationSeconds?: number };
}

/** When this process first saw a lease's current version, and for how long that version keeps the node live. */
interface Seen {
  readonly version: string;
  readonly since: number;
  readonly durationMs: number;
}

/** What a peer publishes: VNI (decimal) → an IP address. Anything else is ignored as a whole. */
const VtepsSchema = z.record(
  z.string().regex(/^[1-9][0-9]{0,7}$/),
  z.string().refine((a) => isIP(a) !== 0),
);

const NodeSchema = z.object({
  status: z.object({ addresses: z.array(z.object({ type: z.string(), address: z.string() })).optional() }).optional(),
});

const OwnLeaseSchema = z.object({
  metadata: z.object({ annotations: z.record(z.string(), z.string()).optional() }).optional(),
});

export interface VtepLeasesOptions {
  readonly node: string;
  readonly namespace: string;
}

export class VtepLeases {
  private readonly informer: Informer<LeaseRecord>;
  private readonly seen = new Map<string, Seen>();
  private readonly listeners: (() => void)[] = [];
  private address: string | undefined;
  /** This node's VTEPs as its record said at start (a previous plexusd's); undefined until read. */
  private before: ReadonlyMap<number, string> | undefined;
  private timer: NodeJS.Timeout | undefined;
  private watching = false;

  constructor(
    private readonly client: KubeApiClient,
    private readonly options: VtepLeasesOptions,
    private readonly log: Logger,
  ) {
    const keep = (l: LeaseRecord): LeaseRecord => {
      const vteps = l.metadata?.annotations?.[VTEPS_ANNOTATION];
      return {
        metadata: { ...l.metadata, annotations: vteps === undefined ? {} : { [VTEPS_ANNOTATION]: vteps } },
        ...(l.spec ? { spec: { ...l.spec } } : {}),
      };
    };
    this.informer = new Informer<LeaseRecord>(client, this.leasesPath, 'leases', {}, keep, {
      upsert: (l, previous) => this.observe(l, previous),
      remove: (l) => {
        this.seen.delete(l.metadata?.name ?? '');
        this.changed();
      },
      error: (message) => log.warn({ err: message }, 'watching the node leases failed; retrying'),
    });
  }

  get node(): string {
    return this.options.node;
  }

  private get leasesPath(): string {
    return `/apis/coordination.k8s.io/v1/namespaces/${segment(this.options.namespace)}/leases`;
  }

  /**
   * Reads the Node's address now and every minute, and this node's own record once (again each minute until read); the
   * leases are watched from the first VTEP published, or retracted.
   */
  async start(): Promise<void> {
    const refresh = async (): Promise<void> => {
      await this.readNodeAddress();
      if (!this.before) await this.readOwnRecord();
    };
    this.timer = setInterval(() => void refresh(), NODE_ADDRESS_REFRESH_MS);
    this.timer.unref();
    await refresh();
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    if (this.watching) await this.informer.stop();
  }

  nodeAddress(): string | undefined {
    return this.address;
  }

  publishedBefore(): ReadonlyMap<number, string> | undefined {
    return this.before;
  }

  onChange(listener: () => void): void {
    this.listeners.push(listener);
  }

  async publish(vteps: ReadonlyMap<number, string>): Promise<void> {
    // Nothing to publish and nothing a previous plexusd published to retract: no watch, no write.
    if (vteps.size === 0 && !this.watching && !this.before?.size) return;
    if (!this.watching) {
      this.watching = true;
      await this.informer.start();
    }
    const text = vteps.size ? JSON.stringify(Object.fromEntries([...vteps].sort(([a], [b]) => a - b))) : undefined;
    const own = this.informer.get(this.options.namespace, leaseNameOf(this.options.node));
    // The lease is made by node-lease.ts: until it exists there is nothing to annotate (the next round tries again).
    if (!own) return;
    const current = own.metadata?.annotations?.[VTEPS_ANNOTATION];
    if (current === text) return;
    // An address of this node moved: connections opened from the old one are dead; the write and the watches (these
    // leases', the NADs') must not wait on one.
    if (moved(parseVteps(current), vteps)) this.client.reconnect();
    const r = await this.client.request(
      'PATCH',
      `${this.leasesPath}/${segment(leaseNameOf(this.options.node))}`,
      'leases',
      {
        contentType: 'application/merge-patch+json',
        body: { metadata: { annotations: { [VTEPS_ANNOTATION]: text ?? null } } },
      },
    );
    if (!r.ok)
      this.log.warn(
        { status: r.error.status, err: r.error.message },
        "could not publish this node's VTEPs on its lease",
      );
  }

  /** Undefined until the watch has listed the leases once. */
  livePeers(): { node: string; vteps: Map<number, string> }[] | undefined {
    if (!this.informer.ready) return undefined;
    const own = leaseNameOf(this.options.node);
    const now = Date.now();
    const peers: { node: string; vteps: Map<number, string> }[] = [];
    for (const lease of this.informer.list()) {
      const name = lease.metadata?.name ?? '';
      if (name === own || !name.startsWith(LEASE_PREFIX) || !lease.spec?.holderIdentity) continue;
      const seen = this.seen.get(name);
      if (!seen || now - seen.since > seen.durationMs) continue;
      const vteps = parseVteps(lease.metadata?.annotations?.[VTEPS_ANNOTATION]);
      if (vteps.size) peers.push({ node: name.slice(LEASE_PREFIX.length), vteps });
    }
    return peers;
  }

  /** A lease's new version restarts its clock; a change of holder or annotation is announced at once. */
  private observe(lease: LeaseRecord, previous: LeaseRecord | undefined): void {
    const name = lease.metadata?.name ?? '';
    if (!name.startsWith(LEASE_PREFIX)) return;
    const version = `${lease.metadata?.uid}/${lease.metadata?.resourceVersion}`;
    if (this.seen.get(name)?.version !== version)
      this.seen.set(name, { version, since: Date.now(), durationMs: (lease.spec?.leaseDurationSeconds ?? 0) * 1000 });
    const vteps = (l: LeaseRecord | undefined): string | undefined => l?.metadata?.annotations?.[VTEPS_ANNOTATION];
    const held = (l: LeaseRecord | undefined): boolean => Boolean(l?.spec?.holderIdentity);
    if (!previous || vteps(previous) !== vteps(lease) || held(previous) !== held(lease)) this.changed();
  }

  private changed(): void {
    for (const listener of this.listeners) listener();
  }

  /** The VTEPs this node's lease names now; none when it does not exist yet. */
  private async readOwnRecord(): Promise<void> {
    const path = `${this.leasesPath}/${segment(leaseNameOf(this.options.node))}`;
    const got = await this.client.request('GET', path, 'leases');
    if (!got.ok) {
      if (got.error.status === 404) this.before = new Map();
      else this.log.warn({ status: got.error.status, err: got.error.message }, "could not read this node's lease");
      return;
    }
    const lease = OwnLeaseSchema.safeParse(got.value);
    this.before = parseVteps(lease.success ? lease.data.metadata?.annotations?.[VTEPS_ANNOTATION] : undefined);
  }

  private async readNodeAddress(): Promise<void> {
    const got = await this.client.request('GET', `/api/v1/nodes/${segment(this.options.node)}`, 'nodes');
    if (!got.ok) {
      this.log.warn({ status: got.error.status, err: got.error.message }, "could not read this Node's addresses");
      return;
    }
    const node = NodeSchema.safeParse(got.value);
    const internal = (node.success ? (node.data.status?.addresses ?? []) : []).filter(
      (a) => a.type === 'InternalIP' && isIP(a.address) !== 0,
    );
    const address = (internal.find((a) => isIP(a.address) === 4) ?? internal[0])?.address;
    if (address !== this.address) {
      this.address = address;
      this.changed();
    }
  }
}

/** Whether a VNI published before is published now with another address. */
function moved(before: ReadonlyMap<number, string>, now: ReadonlyMap<number, string>): boolean {
  return [...now].some(([vni, address]) => before.has(vni) && before.get(vni) !== address);
}

/** A peer's annotation as VNI → address; empty when it is absent or not what this build writes. */
function parseVteps(text: string | undefined): Map<number, string> {
  if (text === undefined) return new Map();
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    return new Map();
  }
  const parsed = VtepsSchema.safeParse(json);
  const vteps = new Map<number, string>();
  if (parsed.success) for (const [vni, address] of Object.entries(parsed.data)) vteps.set(Number(vni), address);
  return vteps;
}
