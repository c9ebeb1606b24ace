/**
 * Runs a client-node informer until it is stopped: lists, watches, and after any error lists or watches again
 * with backoff. Knows whether the first list has been read (the cache is synced), which client-node does not say:
 * its start() resolves even when the list failed.
 */
import type { Informer, KubernetesObject } from '@kubernetes/client-node';

const FIRST_RETRY_MS = 500;
const MAX_RETRY_MS = 10_000;

export class SyncedInformer<T extends KubernetesObject> {
  private synced = false;
  private stopped = false;
  private failedSinceStart = false;
  private retryMs = FIRST_RETRY_MS;
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private readonly waiters: (() => void)[] = [];

  constructor(
    private readonly informer: Informer<T>,
    private readonly onError: (e: unknown) => void,
  ) {
    informer.on('error', (e) => {
      this.failedSinceStart = true;
      if (this.stopped) return;
      this.onError(e);
      this.restartLater();
    });
  }

  /** Whether the first list has been read; until then the cache may lack objects that exist. */
  get ready(): boolean {
    return this.synced;
  }

  /** Starts, and resolves once the first list is in the cache (retrying while the API cannot be reached) or on stop(). */
  start(): Promise<void> {
    const synced = new Promise<void>((resolve) => {
      if (this.synced || this.stopped) resolve();
      else this.waiters.push(resolve);
    });
    void this.run();
    return synced;
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    for (const w of this.waiters.splice(0)) w();
    await this.running?.catch(() => undefined);
    await this.informer.stop();
  }

  private run(): Promise<void> {
    if (this.running || this.stopped) return this.running ?? Promise.resolve();
    this.failedSinceStart = false;
    this.running = this.informer
      .start()
      .then(
        () => {
          if (this.failedSinceStart || this.stopped) return;
          this.retryMs = FIRST_RETRY_MS;
          if (!this.synced) {
            this.synced = true;
            for (const w of this.waiters.splice(0)) w();
          }
        },
        (e: unknown) => {
          if (this.stopped) return;
          this.onError(e);
          this.restartLater();
        },
      )
      .finally(() => {
        this.running = undefined;
      });
    return this.running;
  }

  private restartLater(): void {
    if (this.timer || this.stopped) return;
    const delay = this.retryMs;
    this.retryMs = Math.min(this.retryMs * 2, MAX_RETRY_MS);
    this.timer = setTimeout(() => {
      this.timer = undefined;
      // A start still finishing (the error came from it) ends first; then it is started again.
      void (this.running ?? Promise.resolve()).then(() => this.run());
    }, delay);
  }
}
