export { DEFAULT_KUBELET_ROOT, draSockets } from './plugin-server';
export { DEFAULT_CDI_DIR } from './cdi-specs';
export type { NetworkClaimedDevices, ClaimedNetworkDevice } from './claimed-devices';
export { type DraPorts, type DraSettings, DraDriver } from './dra-driver';
