export { createIpvlanDriver } from './ipvlan-driver';
