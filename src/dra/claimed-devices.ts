/**
 * The seam between DRA and the engine (wired in a later change): at CNI ADD the engine asks which device a pod's
 * prepared claims give one of its networks. Prepared claims are recorded before NodePrepareResources answers, and the
 * kubelet prepares a pod's claims before it asks the runtime for the sandbox, so the answer is there at ADD, also
 * after a plexusd restart in between (records are files, prepared-claims.ts).
 */

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
}

/** What the engine calls (src/engine will receive this through its options, as it receives `devices` today). */
export interface ClaimedDevices {
  /** Every device of the prepared claims reserved for a pod (by its UID), in claim then request order. */
  forPod(podUid: string): readonly ClaimedNetworkDevice[];
  /**
   * The device one network of a pod gets: the claimed device whose config names that network, else the one whose
   * resourceName is the NAD's k8s.v1.cni.cncf.io/resourceName (as Multus 4.3 matches). Undefined: none.
   */
  forNetwork(podUid: string, network: { namespace: string; name: string }, nadResourceName?: string): ClaimedNetworkDevice | undefined;
}
