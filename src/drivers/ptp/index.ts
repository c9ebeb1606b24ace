export { createPtpDriver } from './ptp-driver';
