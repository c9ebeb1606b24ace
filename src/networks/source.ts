/**
 * Where network definitions come from, as the engine sees it: a directory of NAD files today (directory.ts), the
 * Kubernetes API next. Lookups are synchronous: a source answers from what it has loaded or cached.
 */
import type { CniError, Result } from '../cni/errors';
import type { NetworkDefinition } from './nad';

export interface NetworkSource {
  /** The definition of `namespace/name`, or a CNI error (7) that says why there is none. */
  get(namespace: string, name: string): Result<NetworkDefinition>;
  /** Every valid definition, and the errors of those that could not be used. */
  list(): { networks: NetworkDefinition[]; errors: CniError[] };
}

/**
 * A source that can also ask where its definitions come from, for one it has not loaded yet (a NAD created a moment
 * ago, or before the first list): a caller whose refusal is costly asks this before refusing.
 */
export interface NetworkReader {
  read(namespace: string, name: string): Promise<Result<NetworkDefinition>>;
}
