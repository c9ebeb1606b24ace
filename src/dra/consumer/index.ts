/**
 * Consuming other DRA drivers' claims as Multus does: a claimed device whose ResourceSlice attributes name a
 * k8s.cni.cncf.io/resourceName and a k8s.cni.cncf.io/deviceID is that resource's device for the pod (docs/dra.md).
 */
export { ApiClaimsPort, type ClaimsPort } from './claims-port';
export { ClaimDeviceReader, withClaimedDevices, type ClaimDeviceOptions, type PodDeviceSource } from './reader';
export { claimNamesOf, resolveClaimDevices, SliceIndex, type ClaimDeviceIDs } from './resolve';
