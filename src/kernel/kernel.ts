/**
 * The daemon's door to the kernel: an async facade over the kernel worker thread.
 * Every call is a batch of operations run in one netns (the daemon's own when `netns` is undefined).
 */
import { join } from 'node:path';
import { Worker } from 'node:worker_threads';
import { CniCode, CniError, Result, err, ok } from '../cni/errors';
import type { AddrInfo, BatchOp, KernelFailure, LinkInfo, RouteInfo, RouteSpec } from './types';
import type { BatchReply, BatchRequest } from './worker';

export type KernelResult<T> = Result<T, KernelCallError>;

/** A failed kernel operation, with the failure as the kernel reported it. */
export class KernelCallError extends CniError {
  constructor(readonly failure: KernelFailure, readonly index: number) {
    super(
      CniCode.Internal,
      `${failure.op}${failure.target ? ` ${failure.target}` : ''} failed: ${failure.errnoName} (${failure.message})${failure.extack ? ` - kernel says: ${failure.extack}` : ''}`,
      `errno=${failure.errno} ${failure.errnoName}${failure.extack ? ` extack="${failure.extack}"` : ''}`,
    );
  }
  is(errnoName: string): boolean {
    return this.failure.errnoName === errnoName;
  }
}

export class Kernel {
  private worker: Worker;
  private nextId = 1;
  private readonly pending = new Map<number, (reply: BatchReply) => void>();
  private closing = false;

  constructor() {
    this.worker = this.spawn();
  }

  private spawn(): Worker {
    const worker = new Worker(join(__dirname, 'worker.js'));
    worker.on('message', (reply: BatchReply) => {
      const resolve = this.pending.get(reply.id);
      this.pending.delete(reply.id);
      if (this.pending.size === 0) this.worker.unref();
      resolve?.(reply);
    });
    const failAll = (why: string): void => {
      for (const [id, resolve] of this.pending) {
        resolve({ id, ok: false, index: -1, failure: { op: 'kernel worker', target: '', errno: 5, errnoName: 'EIO', message: why } });
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

  async close(): Promise<void> {
    this.closing = true;
    await this.worker.terminate();
  }

  /** Runs operations in order; the first failure that is not tolerated stops the batch. */
  batch(netns: string | undefined, ops: readonly BatchOp[]): Promise<KernelResult<unknown[]>> {
    const id = this.nextId++;
    const req: BatchRequest = { id, ...(netns ? { netns } : {}), ops };
    return new Promise((resolve) => {
      this.pending.set(id, (reply) => resolve(reply.ok ? ok(reply.results) : err(new KernelCallError(reply.failure, reply.index))));
      // Keep the process alive only while the kernel owes an answer.
      this.worker.ref();
      this.worker.postMessage(req);
    });
  }

  private async one<T>(netns: string | undefined, op: BatchOp): Promise<KernelResult<T>> {
    const r = await this.batch(netns, [op]);
    return r.ok ? ok(r.value[0] as T) : r;
  }

  getLink(netns: string | undefined, name: string): Promise<KernelResult<LinkInfo | null>> {
    return this.one(netns, { op: 'linkGet', name });
  }
  listLinks(netns?: string): Promise<KernelResult<LinkInfo[]>> {
    return this.one(netns, { op: 'linkList' });
  }
  listAddresses(netns: string | undefined, name?: string): Promise<KernelResult<AddrInfo[]>> {
    return this.one(netns, { op: 'addrList', ...(name ? { name } : {}) });
  }
  listRoutes(netns: string | undefined, family?: 4 | 6): Promise<KernelResult<RouteInfo[]>> {
    return this.one(netns, { op: 'routeList', ...(family ? { family } : {}) });
  }
  deleteLink(netns: string | undefined, name: string): Promise<KernelResult<unknown>> {
    return this.one(netns, { op: 'linkDel', name, ignore: ['ENODEV'] });
  }
  addRoute(netns: string | undefined, route: RouteSpec): Promise<KernelResult<unknown>> {
    return this.one(netns, { op: 'routeAdd', route });
  }
}
