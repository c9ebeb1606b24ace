/**
 * Where the engine reports what a pod's networks became: nowhere on a node alone; the pod's
 * k8s.v1.cni.cncf.io/network-status annotation and events once plexusd talks to the Kubernetes API. Called after a
 * transaction has committed (or failed and was undone), never inside it: a sink that fails or is slow cannot undo or
 * hold up a pod's networking.
 */
import type { CniError } from '../cni/errors';
import type { PodIdentity } from '../cni/types';
import type { AddedInterface, NetworkStatusEntry } from '../networks/status';

export interface StatusSink {
  /**
   * The pod's networks as they are now (`status`), after an ADD, a detach or a change of a running pod's networks;
   * `added` are the interfaces this change attached, `removed` the networks it took away.
   */
  attached(
    pod: PodIdentity,
    containerId: string,
    status: readonly NetworkStatusEntry[],
    added: readonly AddedInterface[],
    removed?: readonly { readonly network: string; readonly ifname: string }[],
  ): void;
  /** The pod's networks are gone (DEL). */
  detached(pod: PodIdentity, containerId: string): void;
  /** An ADD failed (and was undone) with this error. */
  failed(pod: PodIdentity, containerId: string, error: CniError): void;
}

/** The sink of a node without an API: status stays in the journal (plexusctl show). */
export const noStatusSink: StatusSink = {
  attached: () => undefined,
  detached: () => undefined,
  failed: () => undefined,
};

/** Tells every sink, in order. */
export const fanOut = (...sinks: readonly StatusSink[]): StatusSink => ({
  attached: (...a) => sinks.forEach((s) => s.attached(...a)),
  detached: (...a) => sinks.forEach((s) => s.detached(...a)),
  failed: (...a) => sinks.forEach((s) => s.failed(...a)),
});
