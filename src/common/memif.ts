/** memif facts shared by the device plugin (which hands sockets to pods) and the memif driver (which serves them). */
import { randomInt } from 'node:crypto';

/** memif secrets are at most 23 characters (DPDK and VPP); 20 from a 62-letter alphabet is 119 bits. */
export const MEMIF_SECRET_LENGTH = 20;
const ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';
export const memifSecret = (): string =>
  Array.from({ length: MEMIF_SECRET_LENGTH }, () => ALPHABET[randomInt(ALPHABET.length)]).join('');
export const MEMIF_SOCKET_FILE = 'memif.sock';
