/**
 * Where the engine learns about the pod a sandbox belongs to: the Kubernetes API when plexusd has one (its cache of
 * this node's pods, then one GET on a miss); nowhere on a standalone node, where the runtime's pod annotations are
 * all there is.
 */
import type { Result } from '../cni/errors';

export interface PodInfo {
  readonly uid: string;
  readonly annotations: Readonly<Record<string, string>>;
  /**
   * The names of the pod's ResourceClaims (in its namespace): spec.resourceClaims' resourceClaimName, or for a
   * template the name in status.resourceClaimStatuses. A claim shared by pods is prepared once, for the pods it was
   * reserved for then; a pod reserved later finds it by name.
   */
  readonly claims?: readonly string[];
}

export interface PodSource {
  /**
   * The pod `namespace/name`; with `uid` (K8S_POD_UID), only if it is that pod. An error says why not: the pod does
   * not exist, it is another pod of the same name (a stale sandbox), or the API could not be asked.
   */
  get(namespace: string, name: string, uid: string | undefined): Promise<Result<PodInfo>>;
}
