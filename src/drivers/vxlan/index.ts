export { createVxlanDriver, type VxlanDriverOptions } from './vxlan-driver';
export type { PeerVteps, VtepDirectory, VxlanCluster } from './vtep-directory';
export { vniClaims } from './cluster-networks';
