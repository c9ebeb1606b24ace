/**
 * The one IP address module: parsing (once, at the edge, with ipaddr.js, strictly: no shorthand IPv4, no zone IDs),
 * canonical text, arithmetic on bigints ("next address", "is in range" and "broadcast" are plain arithmetic), and the
 * byte form the kernel takes.
 */
import ipaddr from 'ipaddr.js';

export type Family = 4 | 6;

export interface Ip {
  readonly family: Family;
  readonly value: bigint;
}

export interface Cidr extends Ip {
  readonly prefix: number;
}

export const bitsOf = (family: Family): number => (family === 4 ? 32 : 128);

/** Parses an IPv4 dotted quad or an IPv6 address; undefined if it is neither. */
export function parseIp(text: string): Ip | undefined {
  if (ipaddr.IPv4.isValidFourPartDecimal(text)) {
    return { family: 4, value: bytesToBigint(ipaddr.IPv4.parse(text).toByteArray()) };
  }
  if (text.includes(':') && ipaddr.IPv6.isValid(text)) {
    const parsed = ipaddr.IPv6.parse(text);
    if (parsed.zoneId !== undefined) return undefined;
    return { family: 6, value: bytesToBigint(parsed.toByteArray()) };
  }
  return undefined;
}

/** Parses "address/prefix"; the address keeps its host bits (see networkOf). */
export function parseCidr(text: string): Cidr | undefined {
  const slash = text.indexOf('/');
  if (slash < 0) return undefined;
  const ip = parseIp(text.slice(0, slash));
  const prefixText = text.slice(slash + 1);
  if (ip === undefined || !/^(0|[1-9][0-9]{0,2})$/.test(prefixText)) return undefined;
  const prefix = Number(prefixText);
  if (prefix > bitsOf(ip.family)) return undefined;
  return { ...ip, prefix };
}

/** The address in network byte order (4 or 16 bytes). */
export function toBytes(ip: Ip): Buffer {
  const out = Buffer.alloc(bitsOf(ip.family) / 8);
  let value = ip.value;
  for (let i = out.length - 1; i >= 0; i--, value >>= 8n) out[i] = Number(value & 0xffn);
  return out;
}

/** An address from its network byte order form: 4 bytes are IPv4, 16 IPv6. */
export function fromBytes(bytes: Uint8Array): Ip {
  if (bytes.length !== 4 && bytes.length !== 16)
    throw new Error(`an IP address has 4 or 16 bytes, not ${bytes.length}`);
  return { family: bytes.length === 4 ? 4 : 6, value: bytesToBigint([...bytes]) };
}

function bytesToBigint(bytes: readonly number[]): bigint {
  let value = 0n;
  for (const byte of bytes) value = (value << 8n) | BigInt(byte);
  return value;
}

export function hostMask(family: Family, prefix: number): bigint {
  return (1n << BigInt(bitsOf(family) - prefix)) - 1n;
}

/** The subnet's own address: the CIDR with its host bits cleared. */
export function networkOf(cidr: Cidr): bigint {
  return cidr.value & ~hostMask(cidr.family, cidr.prefix);
}

/** The last address of the subnet (the IPv4 broadcast address). */
export function lastOf(cidr: Cidr): bigint {
  return networkOf(cidr) | hostMask(cidr.family, cidr.prefix);
}

export function contains(subnet: Cidr, ip: Ip): boolean {
  return ip.family === subnet.family && (ip.value & ~hostMask(subnet.family, subnet.prefix)) === networkOf(subnet);
}

/** Canonical text: dotted quad for IPv4, RFC 5952 (lower case, longest zero run compressed) for IPv6. */
export function formatIp(family: Family, value: bigint): string {
  if (family === 4) {
    return [24n, 16n, 8n, 0n].map((shift) => String((value >> shift) & 0xffn)).join('.');
  }
  const groups: number[] = [];
  for (let shift = 112n; shift >= 0n; shift -= 16n) groups.push(Number((value >> shift) & 0xffffn));
  let bestStart = -1;
  let bestLength = 1; // RFC 5952: a single zero group is not compressed
  for (let i = 0; i < 8;) {
    if (groups[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && groups[j] === 0) j++;
    if (j - i > bestLength) {
      bestStart = i;
      bestLength = j - i;
    }
    i = j;
  }
  const hex = (part: readonly number[]): string => part.map((g) => g.toString(16)).join(':');
  if (bestStart < 0) return hex(groups);
  return `${hex(groups.slice(0, bestStart))}::${hex(groups.slice(bestStart + bestLength))}`;
}

export const formatCidr = (family: Family, value: bigint, prefix: number): string =>
  `${formatIp(family, value)}/${prefix}`;

export const familyName = (family: Family): string => (family === 4 ? 'IPv4' : 'IPv6');
