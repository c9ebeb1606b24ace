export { returnLinkToHost, daemonNetnsPath } from './return-link';
export { findHostDevice } from './find';
export { returnLinkKind, returnLinkStep, type ReturnLinkStep } from './undo';
export { createHostDeviceDriver } from './host-device-driver';
