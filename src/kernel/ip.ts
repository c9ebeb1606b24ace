/** Addresses in the forms netlink wants, from the text forms Plexus keeps (src/common/ip.ts parses and formats). */
import { bitsOf, formatIp, fromBytes, parseCidr, parseIp, toBytes } from '../common/ip';
import { AF_INET, AF_INET6 } from './constants';

export interface ParsedAddress {
  readonly family: typeof AF_INET | typeof AF_INET6;
  readonly bytes: Buffer;
  readonly prefixLen: number;
  readonly text: string; // address without prefix, canonical
}

/** Parses "10.1.0.2/24", "fd00::2/64" or a bare address (full-length prefix). Throws on malformed input (callers validate earlier). */
export function parseAddress(text: string): ParsedAddress {
  const cidr = text.includes('/') ? parseCidr(text) : undefined;
  const ip = cidr ?? parseIp(text);
  if (ip === undefined) throw new Error(`invalid address ${text}`);
  return {
    family: ip.family === 4 ? AF_INET : AF_INET6,
    bytes: toBytes(ip),
    prefixLen: cidr?.prefix ?? bitsOf(ip.family),
    text: formatIp(ip.family, ip.value),
  };
}

export function formatAddress(bytes: Buffer): string {
  const ip = fromBytes(bytes);
  return formatIp(ip.family, ip.value);
}

/** The IPv4 broadcast address of a prefix, which the kernel does not fill in by itself. */
export function ipv4Broadcast(bytes: Buffer, prefixLen: number): Buffer {
  const n = bytes.readUInt32BE(0);
  const mask = prefixLen === 0 ? 0 : (~0 << (32 - prefixLen)) >>> 0;
  const out = Buffer.alloc(4);
  out.writeUInt32BE((n | ~mask) >>> 0);
  return out;
}
