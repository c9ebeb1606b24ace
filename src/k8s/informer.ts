/**
 * A cache of one kind of API object, kept by list and watch (client-go's reflector, small): list (paged), then watch
 * from the list's resourceVersion; a watch that ends is resumed from the last version seen (bookmarks keep it
 * fresh); one the server no longer can serve (410 Gone) means a new list. Errors are retried with backoff. Knows when
 * the first list is in memory (ready), which is when plexusd may say it is ready.
 */
import type { ApiFailure, ObjectMeta } from '../common/api-object';
import { err, ok, type Result } from '../common/result';
import type { KubeApiClient } from './api-client';

export interface ApiObject {
  readonly metadata?: ObjectMeta;
}

export interface InformerHandlers<T> {
  /** An object appeared or changed: the whole object, as the API sent it (before `keep`), and what was kept of it before. */
  readonly upsert?: (obj: T, previous: T | undefined) => void;
  readonly remove?: (obj: T) => void;
  readonly error?: (message: string) => void;
}

const FIRST_RETRY_MS = 500;
const MAX_RETRY_MS = 10_000;
const PAGE = 500;

const keyOf = (obj: ApiObject): string => `${obj.metadata?.namespace ?? ''}/${obj.metadata?.name ?? ''}`;

export class Informer<T extends ApiObject> {
  private readonly objects = new Map<string, T>();
  private resourceVersion = '';
  private synced = false;
  private stopped = false;
  private loop: Promise<void> | undefined;
  private readonly waiters: (() => void)[] = [];
  private wake: (() => void) | undefined;
  /** Ends the watch under way when the informer stops. */
  private readonly aborter = new AbortController();

  constructor(
    private readonly client: KubeApiClient,
    /** The collection, e.g. /api/v1/pods. */
    private readonly path: string,
    /** The resource, for the client's request counts. */
    private readonly resource: string,
    /** Query parameters of both list and watch, e.g. { fieldSelector: 'spec.nodeName=n1' }. */
    private readonly selector: Readonly<Record<string, string>>,
    /** What is kept of each object (e.g. only the metadata that is used), to keep memory low. */
    private readonly keep: (obj: T) => T,
    private readonly handlers: InformerHandlers<T> = {},
  ) {}

  get ready(): boolean {
    return this.synced;
  }

  get(namespace: string, name: string): T | undefined {
    return this.objects.get(`${namespace}/${name}`);
  }

  list(): T[] {
    return [...this.objects.values()];
  }

  /** Starts listing and watching; resolves when the first list is in memory (or on stop). */
  start(): Promise<void> {
    const synced = new Promise<void>((resolve) =>
      this.synced || this.stopped ? resolve() : this.waiters.push(resolve),
    );
    this.loop ??= this.run();
    return synced;
  }

  /** Stops (ending the watch under way); resolves when the loop has ended. */
  stop(): Promise<void> {
    this.stopped = true;
    for (const w of this.waiters.splice(0)) w();
    this.wake?.();
    this.aborter.abort();
    return this.loop ?? Promise.resolve();
  }

  private async run(): Promise<void> {
    let retryMs = FIRST_RETRY_MS;
    while (!this.stopped) {
      const r = this.resourceVersion ? await this.watch() : await this.relist();
      if (this.stopped) return;
      if (r.ok) {
        retryMs = FIRST_RETRY_MS;
        continue;
      }
      if (r.error.status === 410) {
        this.resourceVersion = ''; // too old: list again, at once
        continue;
      }
      this.handlers.error?.(`${this.path}: ${r.error.message}`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, retryMs);
        this.wake = () => {
          clearTimeout(timer);
          resolve();
        };
      });
      retryMs = Math.min(retryMs * 2, MAX_RETRY_MS);
    }
  }

  /** Lists every page, then replaces the cache: what is gone is removed, the rest upserted. */
  private async relist(): Promise<Result<void, ApiFailure>> {
    const items: T[] = [];
    let next = '';
    let version: string;
    do {
      const query = new URLSearchParams({ ...this.selector, limit: String(PAGE), ...(next ? { continue: next } : {}) });
      const page = await this.client.request('GET', `${this.path}?${query.toString()}`, this.resource, {
        serving: true,
      });
      if (!page.ok) return page;
      const body = page.value as { items?: T[]; metadata?: { resourceVersion?: string; continue?: string } };
      items.push(...(body.items ?? []));
      next = body.metadata?.continue ?? '';
      version = body.metadata?.resourceVersion ?? '';
    } while (next && !this.stopped);
    const seen = new Set<string>();
    for (const item of items) {
      seen.add(keyOf(item));
      this.put(item);
    }
    for (const [key, obj] of this.objects) {
      if (seen.has(key)) continue;
      this.objects.delete(key);
      this.handlers.remove?.(obj);
    }
    this.resourceVersion = version;
    if (!this.synced) {
      this.synced = true;
      for (const w of this.waiters.splice(0)) w();
    }
    return ok(undefined);
  }

  /** One watch request, from the last version seen, until the server ends it (after timeoutSeconds). */
  private async watch(): Promise<Result<void, ApiFailure>> {
    const timeoutSeconds = 240 + Math.floor(Math.random() * 60);
    const query = new URLSearchParams({
      ...this.selector,
      watch: '1',
      allowWatchBookmarks: 'true',
      resourceVersion: this.resourceVersion,
      timeoutSeconds: String(timeoutSeconds),
    });
    let failure: ApiFailure | undefined;
    const r = await this.client.stream(
      `${this.path}?${query.toString()}`,
      this.resource,
      (timeoutSeconds + 30) * 1000,
      (line) => {
        let event: { type?: string; object?: T & { code?: number; message?: string } };
        try {
          event = JSON.parse(line) as typeof event;
        } catch {
          return;
        }
        const obj = event.object;
        if (!obj) return;
        if (event.type === 'ERROR') {
          failure = { status: obj.code ?? 0, message: obj.message ?? 'watch error' };
          return;
        }
        const version = obj.metadata?.resourceVersion;
        if (event.type === 'ADDED' || event.type === 'MODIFIED') this.put(obj);
        else if (event.type === 'DELETED') {
          const known = this.objects.get(keyOf(obj));
          this.objects.delete(keyOf(obj));
          if (known) this.handlers.remove?.(known);
        }
        if (version) this.resourceVersion = version;
      },
      this.aborter.signal,
    );
    if (failure) return err(failure);
    return r;
  }

  private put(obj: T): void {
    const previous = this.objects.get(keyOf(obj));
    this.objects.set(keyOf(obj), this.keep(obj));
    this.handlers.upsert?.(obj, previous);
  }
}
