/**
 * Where the engine reports what a pod's networks became: nowhere on a node alone; the pod's
 * k8s.v1.cni.cncf.io/network-status annotation and events once plexusd talks to the Kubernetes API. Called after a
 * transaction has committed (or a network was detached), never inside it: a sink that fails or is slow cannot undo
 * or hold up a pod's networking.
 */
import type { PodIdentity } from '../drivers/driver';
import type { NetworkStatusEntry } from '../networks/status';

export interface StatusSink {
  /** The pod's networks as they are now (after an ADD, or after one was detached). */
  attached(pod: PodIdentity, containerId: string, status: readonly NetworkStatusEntry[]): void;
  /** The pod's networks are gone (DEL). */
  detached(pod: PodIdentity, containerId: string): void;
}

/** The sink of a node without an API: status stays in the journal (plexusctl show). */
export const noStatusSink: StatusSink = { attached: () => undefined, detached: () => undefined };
