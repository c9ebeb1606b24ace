export { createMacvlanDriver } from './macvlan-driver';
