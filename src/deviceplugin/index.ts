export { PodResourcesClient } from './pod-resources';
export { DEFAULT_DEVICE_INFO_DIR } from './device-info';
export { type DevicePluginSettings, DevicePlugins } from './device-plugins';
