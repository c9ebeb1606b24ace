/**
 * Static pods: the kubelet runs them from manifests of its own, under a UID it makes (the manifest's hash), and shows
 * each in the API as a mirror pod, which has a UID of the API server's and holds the static pod's in its
 * `kubernetes.io/config.mirror` annotation, its source (`file`, `http`) in `kubernetes.io/config.source`. Their
 * sandboxes carry the static pod's UID in K8S_POD_UID, so the mirror pod stands for them, as Multus reads it
 * (k8sclient.IsStaticPod): its networks are the pod's, and status and events go to it.
 */

export const MIRROR_ANNOTATION = 'kubernetes.io/config.mirror';
export const CONFIG_SOURCE_ANNOTATION = 'kubernetes.io/config.source';

/** The UID of the API's object for the pod of a sandbox of UID `uid` (ApiPodSource.apiUid). */
export type ApiUidOf = (namespace: string, name: string, uid: string) => string;

/** What a pod in the API says of itself. */
export interface PodMetadata {
  readonly uid: string;
  readonly annotations: Readonly<Record<string, string>>;
}

/**
 * The UID a sandbox of this pod carries (K8S_POD_UID): the static pod's for a mirror pod (a source other than the
 * API, and the static pod's UID in its mirror annotation), the pod's own otherwise.
 */
export function sandboxUidOf(pod: PodMetadata): string {
  const source = pod.annotations[CONFIG_SOURCE_ANNOTATION];
  const mirrored = pod.annotations[MIRROR_ANNOTATION];
  return source !== undefined && source !== 'api' && mirrored ? mirrored : pod.uid;
}
