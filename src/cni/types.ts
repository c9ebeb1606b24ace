/** CNI spec data types as Plexus keeps them internally (the 1.1.0 shapes). */

export type CniCommand = 'ADD' | 'DEL' | 'CHECK' | 'STATUS' | 'GC' | 'VERSION';
export const CNI_COMMANDS: readonly CniCommand[] = ['ADD', 'DEL', 'CHECK', 'STATUS', 'GC', 'VERSION'];

export interface CniInterface {
  readonly name: string;
  readonly mac?: string;
  readonly mtu?: number;
  readonly sandbox?: string;
  readonly socketPath?: string;
  readonly pciID?: string;
}

export interface CniIp {
  readonly address: string; // CIDR
  readonly gateway?: string;
  readonly interface?: number; // index into interfaces
}

export interface CniRoute {
  readonly dst: string;
  readonly gw?: string;
  readonly mtu?: number;
  readonly advmss?: number;
  readonly priority?: number;
  readonly table?: number;
  readonly scope?: number;
}

export interface CniDns {
  readonly nameservers?: readonly string[];
  readonly domain?: string;
  readonly search?: readonly string[];
  readonly options?: readonly string[];
}

export interface CniResult {
  readonly interfaces: readonly CniInterface[];
  readonly ips: readonly CniIp[];
  readonly routes: readonly CniRoute[];
  readonly dns?: CniDns;
}

/** A pod attachment the runtime still considers valid, as sent in GC's cni.dev/valid-attachments. */
export interface AttachmentKey {
  readonly containerId: string;
  readonly ifname: string;
}

/**
 * The Kubernetes pod an attachment is for, as the runtime names it (CNI_ARGS K8S_POD_NAMESPACE, K8S_POD_NAME,
 * K8S_POD_UID); each part may be missing. Drivers, the engine, the API side and DRA all speak of pods by it.
 */
export interface PodIdentity {
  readonly namespace?: string;
  readonly name?: string;
  readonly uid?: string;
}
