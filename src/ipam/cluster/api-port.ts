/**
 * What cluster IPAM needs of the Kubernetes API: a request, and a watched cache of one collection (the IPBlocks). A
 * port cluster IPAM owns, so that IPAM imports nothing of the API client: src/k8s/ipam-api.ts implements it on the
 * daemon's client and informers, and src/k8s/connect.ts hands it to src/node, which gives it to ClusterIpam.
 */
import type { ApiFailure, ObjectMeta } from '../../common/api-object';
import type { Result } from '../../common/result';

export interface ApiRequestOptions {
  readonly body?: unknown;
  /** A CNI call waits for it: it goes before background writes waiting for the rate limit. */
  readonly urgent?: boolean;
}

/** Told of each change of a watched collection. */
export interface WatchHandlers<T> {
  readonly upsert?: (obj: T) => void;
  readonly remove?: (obj: T) => void;
  readonly error?: (message: string) => void;
}

/** A collection kept in memory by list and watch. */
export interface WatchedObjects<T> {
  /** True once the first list is in memory. */
  readonly ready: boolean;
  get(namespace: string, name: string): T | undefined;
  list(): T[];
  /** Starts listing and watching; resolves when the first list is in memory (or on stop). */
  start(): Promise<void>;
  stop(): Promise<void>;
}

export interface ClusterApi {
  /** Sends one request; a non-2xx answer is a failure carrying the status and the server's message. */
  request(
    method: string,
    path: string,
    resource: string,
    options?: ApiRequestOptions,
  ): Promise<Result<unknown, ApiFailure>>;
  /** A cache of the collection at `path` (`resource` names it in request counts). */
  watch<T extends { readonly metadata?: ObjectMeta }>(
    path: string,
    resource: string,
    handlers: WatchHandlers<T>,
  ): WatchedObjects<T>;
}
