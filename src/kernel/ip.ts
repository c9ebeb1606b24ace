/** Address helpers for the kernel layer: text addresses to the byte forms netlink wants, and back. */
import ipaddr from 'ipaddr.js';
import { AF_INET, AF_INET6 } from './constants';

export interface ParsedAddress {
  readonly family: typeof AF_INET | typeof AF_INET6;
  readonly bytes: Buffer;
  readonly prefixLen: number;
  readonly text: string; // address without prefix, canonical
}

/** Parses "10.1.0.2/24", "fd00::2/64" or a bare address (full-length prefix). Throws on malformed input (callers validate earlier). */
export function parseAddress(text: string): ParsedAddress {
  const [addrText = '', prefixText] = text.split('/');
  const addr = ipaddr.parse(addrText);
  const v4 = addr.kind() === 'ipv4';
  const max = v4 ? 32 : 128;
  const prefixLen = prefixText === undefined ? max : Number(prefixText);
  if (!Number.isInteger(prefixLen) || prefixLen < 0 || prefixLen > max) throw new Error(`invalid prefix length in ${text}`);
  return { family: v4 ? AF_INET : AF_INET6, bytes: Buffer.from(addr.toByteArray()), prefixLen, text: addr.toString() };
}

export function formatAddress(family: number, bytes: Buffer): string {
  return ipaddr.fromByteArray([...bytes]).toString();
}

/** The IPv4 broadcast address of a prefix, which the kernel does not fill in by itself. */
export function ipv4Broadcast(bytes: Buffer, prefixLen: number): Buffer {
  const n = bytes.readUInt32BE(0);
  const mask = prefixLen === 0 ? 0 : (~0 << (32 - prefixLen)) >>> 0;
  const out = Buffer.alloc(4);
  out.writeUInt32BE((n | ~mask) >>> 0);
  return out;
}
