export { createTapDriver } from './tap-driver';
