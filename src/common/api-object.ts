/**
 * Shapes of the Kubernetes API that several floors read: the API client (src/k8s) and the ports of the floors below
 * that reach the API through it (cluster IPAM's src/ipam/cluster/api-port.ts).
 */

/** Why a request failed: the HTTP status (0 when no answer came) and the server's or the socket's message. */
export interface ApiFailure {
  readonly status: number;
  readonly message: string;
}

/** The metadata Plexus reads of an API object. */
export interface ObjectMeta {
  readonly name?: string;
  readonly namespace?: string;
  readonly uid?: string;
  readonly resourceVersion?: string;
  readonly creationTimestamp?: string;
  readonly annotations?: Record<string, string>;
}

/** Percent-encodes one path segment (names are DNS labels, but a malformed CNI_ARGS value must not change the path). */
export const segment = (s: string): string => encodeURIComponent(s);
