/**
 * What Whereabouts holds, read from the API for as long as a network uses a Whereabouts config: every IPPool's
 * allocations and every OverlappingRangeIPReservation, of every namespace, watched. Cluster IPAM never hands out an
 * address they hold (pool-allocation.ts), and while they cannot be read (RBAC refuses them, the API is away) it hands
 * out nothing of a Whereabouts range and the takeover from Multus waits, saying why.
 *
 * When the API does not serve Whereabouts' CRDs at all, no Whereabouts object can hold anything: allocation goes on,
 * but the takeover still waits (the pods Multus made may hold addresses in a store plexusd cannot read, such as
 * Whereabouts' etcd datastore). Reading starts on first need and is probed again while the CRDs are absent.
 */
import type { Logger } from 'pino';
import { CniCode, CniError } from '../../cni/errors';
import { type Family, formatIp, lastOf, networkOf, parseCidr } from '../../common/ip';
import type { ClusterApi, WatchedObjects } from './api-port';
import {
  WHEREABOUTS_GROUP_VERSION,
  WHEREABOUTS_POOLS,
  WHEREABOUTS_RESERVATIONS,
  type WhereaboutsHold,
  type WhereaboutsObject,
  holdKey,
  holdsOfPool,
  holdsOfReservation,
  servedCollections,
} from './whereabouts-objects';

/** How long an ADD waits for the first read of Whereabouts' objects before it is refused (11, try again). */
const FIRST_READ_MS = 5000;
/** How often the API is asked again whether it serves Whereabouts' CRDs, while it does not. */
const PROBE_MS = 10_000;

/** One of Whereabouts' collections, as this node reads it. */
interface Collection {
  readonly resource: string;
  readonly objects: WatchedObjects<WhereaboutsObject>;
  /** Resolves at the first list or the first failure. */
  readonly settled: Promise<void>;
  /** Why the last list or watch failed, until the first list succeeds. */
  failure?: string;
}

type Reading =
  | { readonly kind: 'idle' }
  | { readonly kind: 'probing'; readonly failure?: string }
  | { readonly kind: 'absent' }
  | { readonly kind: 'watching'; readonly collections: readonly Collection[] };

const cannotRead = (why: string): CniError =>
  new CniError(
    CniCode.TryAgainLater,
    `plexusd cannot read what Whereabouts holds, so it gives no address of a Whereabouts range (a pod Whereabouts gave it may still have it): ${why}`,
    `plexusd's ClusterRole needs list and watch on ${WHEREABOUTS_POOLS} and ${WHEREABOUTS_RESERVATIONS} in API group whereabouts.cni.cncf.io (deploy/10-rbac.yaml); the runtime retries`,
  );

const absentProblem = (): string =>
  `the API does not serve Whereabouts' CRDs (${WHEREABOUTS_GROUP_VERSION}): what the pods Multus made hold cannot be ` +
  "read (Whereabouts' etcd datastore is not read); install Whereabouts' CRDs (empty, they hold nothing) once no pod " +
  'holds an address given from elsewhere';

export class WhereaboutsHolds {
  private reading: Reading = { kind: 'idle' };
  private firstRead: Promise<void> | undefined;
  private firstReadDone = false;
  private probeTimer: NodeJS.Timeout | undefined;
  private stopped = false;
  /** Holds by address, rebuilt from the watched objects when they have changed. */
  private index: Map<string, WhereaboutsHold> | undefined;
  /** Sorted address values per family, for the addresses in one block. */
  private sorted: { readonly 4: bigint[]; readonly 6: bigint[] } | undefined;

  constructor(
    private readonly api: ClusterApi,
    private readonly log: Logger,
  ) {}

  /**
   * Starts reading (once) and resolves when the first read has an outcome (the objects listed, a failure, or the CRDs
   * found absent), or after FIRST_READ_MS.
   */
  read(): Promise<void> {
    if (this.firstReadDone) return Promise.resolve();
    this.firstRead ??= this.probe().finally(() => {
      this.firstReadDone = true;
    });
    let timer: NodeJS.Timeout | undefined;
    const waited = new Promise<void>((r) => (timer = setTimeout(r, FIRST_READ_MS)));
    return Promise.race([this.firstRead, waited]).finally(() => clearTimeout(timer));
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.probeTimer) clearTimeout(this.probeTimer);
    if (this.reading.kind === 'watching') await Promise.all(this.reading.collections.map((c) => c.objects.stop()));
  }

  /** Why no address of a Whereabouts range may be given now; undefined when what Whereabouts holds is known. */
  refusal(): CniError | undefined {
    const why = this.unreadable();
    return why === undefined ? undefined : cannotRead(why);
  }

  /**
   * Why the takeover from Multus must wait (a network uses Whereabouts IPAM): empty once what Whereabouts holds is
   * read. Starts reading when it has not.
   */
  takeoverProblems(): string[] {
    void this.read();
    if (this.reading.kind === 'absent') return [absentProblem()];
    const why = this.unreadable();
    return why === undefined ? [] : [`plexusd cannot read what Whereabouts holds: ${why}`];
  }

  /** The addresses Whereabouts holds in a block (`10.1.0.64/26`), as text. */
  heldIn(cidr: string): string[] {
    const block = parseCidr(cidr);
    if (block === undefined) return [];
    const first = networkOf(block);
    return this.heldBetween(block.family, first, lastOf(block)).map((v) => formatIp(block.family, v));
  }

  private heldBetween(family: Family, first: bigint, last: bigint): bigint[] {
    const values = this.sortedValues()[family];
    let lo = 0;
    let hi = values.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (values[mid]! < first) lo = mid + 1;
      else hi = mid;
    }
    const out: bigint[] = [];
    for (let i = lo; i < values.length && values[i]! <= last; i++) out.push(values[i]!);
    return out;
  }

  /** Who holds an address (`10.1.0.7`), as a refusal names it; undefined when Whereabouts does not. */
  holderOf(address: string): string | undefined {
    return this.holdIndex().get(address)?.holder;
  }

  private unreadable(): string | undefined {
    const reading = this.reading;
    if (reading.kind === 'idle') return 'not read yet';
    if (reading.kind === 'probing') return reading.failure ?? 'not read yet';
    if (reading.kind === 'absent') return undefined;
    const unread = reading.collections.find((c) => !c.objects.ready);
    if (unread === undefined) return undefined;
    return unread.failure ?? `${unread.resource}.whereabouts.cni.cncf.io not listed yet`;
  }

  /** Asks the API which of Whereabouts' collections it serves, and watches those; again later while it serves none. */
  private async probe(): Promise<void> {
    if (this.stopped) return;
    if (this.reading.kind === 'idle') this.reading = { kind: 'probing' };
    const served = await this.api.request('GET', `/apis/${WHEREABOUTS_GROUP_VERSION}`, 'discovery', { urgent: true });
    if (this.stopped) return;
    if (!served.ok) {
      if (served.error.status === 404) this.reading = { kind: 'absent' };
      else
        this.reading = {
          kind: 'probing',
          failure: `discovery of ${WHEREABOUTS_GROUP_VERSION}: ${served.error.message}`,
        };
      this.probeLater();
      return;
    }
    const resources = servedCollections(served.value);
    if (resources.length === 0) {
      this.reading = { kind: 'absent' };
      this.probeLater();
      return;
    }
    const collections = resources.map((resource) => this.watch(resource));
    this.reading = { kind: 'watching', collections };
    await Promise.all(collections.map((c) => c.settled));
  }

  /** Watches one collection; `settled` resolves at the first list or the first failure. */
  private watch(resource: string): Collection {
    let settle: () => void = () => undefined;
    const settled = new Promise<void>((r) => (settle = r));
    const changed = (): void => {
      this.index = undefined;
      this.sorted = undefined;
    };
    const collection: Collection = {
      resource,
      settled,
      objects: this.api.watch<WhereaboutsObject>(`/apis/${WHEREABOUTS_GROUP_VERSION}/${resource}`, resource, {
        upsert: changed,
        remove: changed,
        error: (message) => {
          if (!collection.objects.ready && collection.failure !== message)
            this.log.error({ err: message }, `reading Whereabouts' ${resource} failed; retrying`);
          collection.failure = message;
          settle();
        },
      }),
    };
    void collection.objects.start().then(() => {
      collection.failure = undefined;
      changed();
      settle();
    });
    return collection;
  }

  private probeLater(): void {
    if (this.stopped) return;
    this.probeTimer = setTimeout(() => void this.probe(), PROBE_MS);
    this.probeTimer.unref();
  }

  private holdIndex(): Map<string, WhereaboutsHold> {
    if (this.index !== undefined) return this.index;
    const index = new Map<string, WhereaboutsHold>();
    if (this.reading.kind === 'watching') {
      for (const c of this.reading.collections) {
        const of = c.resource === WHEREABOUTS_POOLS ? holdsOfPool : holdsOfReservation;
        for (const obj of c.objects.list()) for (const hold of of(obj)) index.set(holdKey(hold), hold);
      }
    }
    this.index = index;
    return index;
  }

  private sortedValues(): { readonly 4: bigint[]; readonly 6: bigint[] } {
    if (this.sorted !== undefined) return this.sorted;
    const sorted = { 4: [] as bigint[], 6: [] as bigint[] };
    for (const hold of this.holdIndex().values()) sorted[hold.family].push(hold.value);
    for (const values of [sorted[4], sorted[6]]) values.sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
    this.sorted = sorted;
    return sorted;
  }
}
