/**
 * The seam between DRA and the engine: at CNI ADD the engine asks which devices a pod's prepared claims give its
 * networks (the engine owns the port, src/engine/claims/ports.ts). Prepared claims are recorded before NodePrepareResources
 * answers, and the kubelet prepares a pod's claims before it asks the runtime for the sandbox, so the answer is there
 * at ADD, also after a plexusd restart in between (records are files, prepared-claims.ts).
 */
import type { ClaimedDevices, ClaimedNetworkDevice, PodClaims } from '../engine/claims/ports';

export type { ClaimedNetworkDevice, PodClaims };

export interface NetworkClaimedDevices extends ClaimedDevices {
  /**
   * The device one network of a pod gets: the claimed device whose config names that network, else the one whose
   * resourceName is the NAD's k8s.v1.cni.cncf.io/resourceName (as Multus 4.3 matches). Undefined: none.
   */
  forNetwork(
    podUid: string,
    network: { namespace: string; name: string },
    nadResourceName?: string,
  ): ClaimedNetworkDevice | undefined;
}
