/** Helpers shared by the native drivers: config parsing, node link lookups, and the pod interface's addresses, routes and result. */
export {
  checkLinkName,
  invalidConfig,
  ipamField,
  ipFamily,
  ipField,
  macField,
  mtuField,
  notNative,
  parseOptionalIpam,
  parsePluginConfig,
  unsupportedField,
} from './config';
export { defaultRouteLink, isMissingLink, masterName, masterNotFound, resolveMaster } from './host-links';
export {
  allocatePodIps,
  configurePodInterface,
  gatewaysOf,
  plumbPodInterface,
  podInterfaceOps,
  podResult,
  podRoutes,
  type Plumbing,
  type PodInterfaceSetup,
} from './pod-interface';
