export { memifDevargs, memifPortName, type DeviceSocketLookup, type MemifDeviceSocket } from './attach';
export { resyncPorts, type ResyncReport } from './resync';
export { socketDirStep, switchPortStep, type SwitchPortStep } from './undo';
export { type MemifDriverOptions, createMemifDriver } from './memif-driver';
