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
