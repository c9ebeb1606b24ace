/**
 * Where the engine learns about the pod a sandbox belongs to: the Kubernetes API when plexusd has one (its cache of
 * this node's pods, then one GET on a miss); nowhere on a standalone node, where the runtime's pod annotations are
 * all there is.
 */
import type { Result } from '../cni/errors';

export interface PodInfo {
  readonly uid: string;
  readonly annotations: Readonly<Record<string, string>>;
}

export interface PodSource {
  /**
   * The pod `namespace/name`; with `uid` (K8S_POD_UID), only if it is that pod. An error says why not: the pod does
   * not exist, it is another pod of the same name (a stale sandbox), or the API could not be asked.
   */
  get(namespace: string, name: string, uid: string | undefined): Promise<Result<PodInfo>>;
}
