/**
 * The daemon's door to the kernel: an async facade over the kernel worker thread.
 * Every call is a batch of operations run in one netns (the daemon's own when `netns` is undefined).
 */
import { join } from 'node:path';
import { Worker } from 'node:worker_threads';
import { type Result, err, ok } from '../common/result';
import { KernelCallError } from './failure';
import type { AddrInfo, BatchOp, LinkInfo, ResultOf, ResultsOf, RouteInfo, RouteSpec } from './types';
import { BatchRunner, isFatal, type BatchReply, type BatchRequest } from './batch-runner';
import { closeFd, PodLinkDeletions } from './pod-link-deletions';
import { errorMessage } from '../common/error-message';
import { definedFields } from '../common/defined-fields';

/** A failed kernel operation is a KernelCallError (failure.ts); CNI codes are the drivers' business. */
export { KernelCallError };
export type KernelResult<T> = Result<T, KernelCallError>;

/** One kernel worker thread and the replies it still owes. */
class KernelWorker {
  worker: Worker;
  readonly pending = new Map<number, (reply: BatchReply) => void>();
  private closing = false;

  constructor() {
    this.worker = this.spawn();
  }

  private spawn(): Worker {
    // The worker only shuttles small messages: a tiny young generation keeps its memory low.
    const worker = new Worker(join(__dirname, 'worker.js'), {
      resourceLimits: { maxYoungGenerationSizeMb: 1, maxOldGenerationSizeMb: 16, codeRangeSizeMb: 8 },
    });
    worker.on('message', (reply: BatchReply) => {
      const resolve = this.pending.get(reply.id);
      this.pending.delete(reply.id);
      if (this.pending.size === 0) this.worker.unref();
      resolve?.(reply);
    });
    const failAll = (why: string): void => {
      for (const [id, resolve] of this.pending) {
        resolve({
          id,
          ok: false,
          index: -1,
          failure: { op: 'kernel worker', target: '', errno: 5, errnoName: 'EIO', message: why },
        });
      }
      this.pending.clear();
    };
    worker.on('error', (e) => failAll(`kernel worker failed: ${e.message}`));
    worker.on('exit', (code) => {
      failAll(`kernel worker exited with code ${code}`);
      // A worker that died (e.g. could not leave a pod netns) is replaced; the daemon keeps serving.
      if (!this.closing) this.worker = this.spawn();
    });
    worker.unref();
    return worker;
  }

  post(req: BatchRequest, resolve: (reply: BatchReply) => void): void {
    this.pending.set(req.id, resolve);
    // Keep the process alive only while the kernel owes an answer.
    this.worker.ref();
    this.worker.postMessage(req);
  }

  async close(): Promise<void> {
    this.closing = true;
    await this.worker.terminate();
  }
}

/**
 * Host links to delete, gathered while a deletion is running and then deleted together in one request
 * (delete-many.ts): a burst of DELs waits for the kernel's RCU grace periods once per batch, not once per pod.
 * A lone DEL goes at once, so it waits no longer than before.
 */
class HostLinkDeletions {
  private readonly queue: { readonly name: string; readonly resolve: (r: KernelResult<unknown>) => void }[] = [];
  private running = false;
  private nextGroup = 0;

  constructor(private readonly kernel: Kernel) {}

  delete(name: string): Promise<KernelResult<unknown>> {
    return new Promise((resolve) => {
      this.queue.push({ name, resolve });
      if (!this.running) void this.drain();
    });
  }

  private async drain(): Promise<void> {
    this.running = true;
    try {
      while (this.queue.length > 0) {
        const batch = this.queue.splice(0, MAX_DELETE_BATCH);
        // A group number of its own per batch, from a range ("PX") no tool hands out by default.
        const group = GROUP_BASE + (this.nextGroup++ % 0x10000);
        const r = await this.kernel.batch(undefined, [{ op: 'linkDelMany', names: batch.map((b) => b.name), group }]);
        const failed = r.ok ? r.value[0].failed : [];
        for (const b of batch) {
          if (!r.ok) b.resolve(r);
          else {
            const f = failed.find((x) => x.name === b.name);
            b.resolve(f ? err(new KernelCallError(f.failure, 0)) : ok(null));
          }
        }
      }
    } finally {
      this.running = false;
    }
  }
}

const MAX_DELETE_BATCH = 128;
const GROUP_BASE = 0x50580000;

/** The runner ran these very ops (batch-runner.ts answers each with its OpResults type): results are trusted here. */
const asResult = <const Ops extends readonly BatchOp[]>(reply: BatchReply): KernelResult<ResultsOf<Ops>> =>
  reply.ok ? ok(reply.results as ResultsOf<Ops>) : err(new KernelCallError(reply.failure, reply.index));

/**
 * What the engine and the drivers need of the kernel: batches of operations in a netns, and link deletion (batched
 * and pooled behind it). Kernel is the real one; tests of the engine run on an in-memory one, without root.
 */
export interface KernelPort {
  batch<const Ops extends readonly BatchOp[]>(
    netns: string | undefined,
    ops: Ops,
  ): Promise<KernelResult<ResultsOf<Ops>>>;
  getLink(netns: string | undefined, name: string): Promise<KernelResult<LinkInfo | null>>;
  deleteLink(netns: string | undefined, name: string): Promise<KernelResult<unknown>>;
}

/** Ops that return within a millisecond or so: no RCU grace period to wait for, unlike a link's deletion. */
const QUICK_OPS: ReadonlySet<BatchOp['op']> = new Set([
  'linkAdd',
  'linkSet',
  'linkGet',
  'linkList',
  'addrAdd',
  'addrDel',
  'addrList',
  'routeAdd',
  'routeDel',
  'routeList',
  'fdbAppend',
  'fdbDel',
  'fdbList',
  'tapAdd',
  'sysctlWrite',
  'socketOpen',
]);

export interface KernelOptions {
  /**
   * Whether the daemon has nothing else to do now (plexusd: the CNI call under way is alone on the node,
   * `CallSlots.alone` in node-state.ts). Then a batch of quick ops runs on the calling (main) thread when no worker
   * owes an answer: a lone ADD pays no thread hop (two wake-ups and the message copies, about 0.5–1 ms of an ADD on a
   * 2-core VM), and the event loop waits about as long as the batch's rtnetlink calls take (1–2 ms). Otherwise batches
   * go to the workers, in order, so the kernel's work overlaps the event loop's (the 110-pod burst at 16 in flight ran
   * at about half the rate when every batch ran in place). Default: never.
   */
  readonly inlineWhen?: () => boolean;
}

export class Kernel implements KernelPort {
  private readonly workers: KernelWorker[];
  private nextId = 1;
  private readonly hostDeletions = new HostLinkDeletions(this);
  private readonly inlineWhen: () => boolean;
  /** The main thread's runner, made on first use. */
  private here: BatchRunner | undefined;
  private ranHere = 0;

  /**
   * `threads` workers run batches in parallel. One is the default: most rtnetlink calls hold the kernel's RTNL
   * lock, so a second thread bought no throughput in a 110-pod burst (and host link deletions, whose RCU waits are
   * outside it, are batched instead: HostLinkDeletions), while each thread costs about 10 MiB.
   */
  constructor(
    threads = 1,
    private readonly podLinkDeletions = new PodLinkDeletions(),
    options: KernelOptions = {},
  ) {
    this.workers = Array.from({ length: Math.max(1, threads) }, () => new KernelWorker());
    this.inlineWhen = options.inlineWhen ?? (() => false);
  }

  async close(): Promise<void> {
    await Promise.all(this.workers.map((w) => w.close()));
  }

  /** Runs operations in order; the first failure that is not tolerated stops the batch. Answers each op's result, in order. */
  batch<const Ops extends readonly BatchOp[]>(
    netns: string | undefined,
    ops: Ops,
  ): Promise<KernelResult<ResultsOf<Ops>>> {
    const id = this.nextId++;
    const req: BatchRequest = { id, ...definedFields({ netns: netns || undefined }), ops };
    if (this.mayRunHere(ops)) return Promise.resolve(asResult<Ops>(this.runHere(req)));
    // The least busy worker takes the batch; a batch always runs whole on one thread.
    const worker = this.workers.reduce((best, w) => (w.pending.size < best.pending.size ? w : best));
    return new Promise((resolve) => {
      // The worker ran these very ops (worker.ts answers each with its OpResults type): the one place results are trusted.
      worker.post(req, (reply) => resolve(asResult<Ops>(reply)));
    });
  }

  /** Only when every worker is idle, so that a batch never overtakes one sent before it. */
  private mayRunHere(ops: readonly BatchOp[]): boolean {
    return (
      ops.every((o) => QUICK_OPS.has(o.op)) && this.workers.every((w) => w.pending.size === 0) && this.inlineWhen()
    );
  }

  /** How many batches ran on the calling thread (inlineWhen) rather than on a worker. */
  get batchesRunHere(): number {
    return this.ranHere;
  }

  private runHere(req: BatchRequest): BatchReply {
    this.here ??= new BatchRunner();
    this.ranHere++;
    try {
      return this.here.run(req);
    } catch (e) {
      if (!isFatal(e)) throw e;
      // The main thread is left in a pod's netns: nothing it did from here on would go where it should.
      process.stderr.write(`plexusd: ${errorMessage(e)}\n`);
      process.exit(70);
    }
  }

  private async one<const O extends BatchOp>(netns: string | undefined, op: O): Promise<KernelResult<ResultOf<O>>> {
    const r = await this.batch(netns, [op] as const);
    return r.ok ? ok(r.value[0] as ResultOf<O>) : r;
  }

  getLink(netns: string | undefined, name: string): Promise<KernelResult<LinkInfo | null>> {
    return this.one(netns, { op: 'linkGet', name });
  }
  listLinks(netns?: string): Promise<KernelResult<LinkInfo[]>> {
    return this.one(netns, { op: 'linkList' });
  }
  listAddresses(netns: string | undefined, name?: string): Promise<KernelResult<AddrInfo[]>> {
    return this.one(netns, { op: 'addrList', name: name || undefined });
  }
  listRoutes(netns: string | undefined, family?: 4 | 6): Promise<KernelResult<RouteInfo[]>> {
    return this.one(netns, { op: 'routeList', family });
  }
  /**
   * Deletes a link; a missing one counts as deleted. Host links are deleted in batches (HostLinkDeletions), links in
   * a pod's netns from the libuv pool (pod-link-deletions.ts), so that their RCU waits overlap.
   */
  async deleteLink(netns: string | undefined, name: string): Promise<KernelResult<unknown>> {
    if (netns === undefined) return this.hostDeletions.delete(name);
    const socket = await this.one(netns, { op: 'socketOpen' });
    if (!socket.ok) return socket;
    try {
      const failed = await this.podLinkDeletions.delete(socket.value, name);
      return failed && failed.errnoName !== 'ENODEV' ? err(new KernelCallError(failed, 0)) : ok(null);
    } finally {
      closeFd(socket.value);
    }
  }
  addRoute(netns: string | undefined, route: RouteSpec): Promise<KernelResult<unknown>> {
    return this.one(netns, { op: 'routeAdd', route });
  }
}
