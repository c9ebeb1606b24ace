/**
 * The engine's ports to Dynamic Resource Allocation (src/dra plugs in behind them; without --dra there is nothing):
 * the devices a pod's prepared claims give its networks, read at ADD, and where the engine reports what each claimed
 * device became, so the claim's status can say it. Reports come after a transaction, never inside it: a slow or
 * failing writer cannot hold up or undo a pod's networking.
 */
import type { PodIdentity } from '../../cni/types';

/** One device of a prepared claim, with what the claim's opaque config says about its network. */
export interface ClaimedNetworkDevice {
  readonly claim: { readonly namespace: string; readonly name: string; readonly uid: string };
  /** The claim's request the device was allocated for. */
  readonly request: string;
  readonly pool: string;
  /** The device's name in its ResourceSlice. */
  readonly device: string;
  readonly resourceName: string;
  readonly kind: 'host-device' | 'memif';
  /** What the network's CNI plugin gets as deviceID (a PCI address, an interface name, memif0...). */
  readonly deviceID: string;
  /** From the opaque config; absent when the claim names no network (Multus-style matching by resourceName). */
  readonly network?: { readonly namespace: string; readonly name: string };
  readonly interfaceName?: string;
  readonly ips?: readonly string[];
  readonly mac?: string;
  /**
   * Set when the node does not offer the device as the claim's record says (taken out of its pool since Prepare, or
   * a record damaged or written by hand): why. Such a device is never acted on (unoffered.ts).
   */
  readonly notOffered?: string;
}

/** A pod's ResourceClaims by name, in its namespace. */
export interface PodClaims {
  readonly namespace: string;
  readonly claims: readonly string[];
}

/** What the engine asks at ADD (and when a running pod's networks change). */
export interface ClaimedDevices {
  /**
   * Every device of the prepared claims reserved for a pod (by its UID) or named by it (`named`: its namespace and
   * claim names, PodInfo.claims), in claim then request order.
   */
  forPod(podUid: string, named?: PodClaims): readonly ClaimedNetworkDevice[];
}

/** What one claimed device became in the pod: its interface, or why it is not there. */
export interface ClaimedDeviceOutcome {
  readonly device: ClaimedNetworkDevice;
  /** The interface in the pod, its addresses with prefix (10.1.0.5/24) and MAC; absent with `error`. */
  readonly attached?: { readonly interfaceName: string; readonly ips: readonly string[]; readonly mac?: string };
  readonly error?: string;
}

export interface ClaimSink {
  /** After an ADD (committed or failed) or a change of a running pod's networks: each claimed device's outcome. */
  settled(pod: PodIdentity, outcomes: readonly ClaimedDeviceOutcome[]): void;
  /** After DEL: the pod's networks are gone; these devices are in no interface any more. */
  released(pod: PodIdentity, devices: readonly ClaimedNetworkDevice[]): void;
}
