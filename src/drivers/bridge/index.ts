export { hostVethName } from '../common/bridge-port';
export { type BridgeDriverOptions, createBridgeDriver } from './bridge-driver';
