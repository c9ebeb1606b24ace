/**
 * Netlink message encoding and decoding: nlmsghdr + a fixed family header + TLV attributes (rtattr).
 * Pure functions over Buffers, so they can be tested without a kernel.
 */
import { NLA_F_NESTED } from './constants';

const align4 = (n: number): number => (n + 3) & ~3;

/** An attribute to encode: a raw payload or nested attributes. */
export type Attr =
  { readonly type: number; readonly data: Buffer } | { readonly type: number; readonly nested: readonly Attr[] };

export const attrU8 = (type: number, v: number): Attr => ({ type, data: Buffer.from([v & 0xff]) });
export const attrU16 = (type: number, v: number): Attr => {
  const b = Buffer.alloc(2);
  b.writeUInt16LE(v);
  return { type, data: b };
};
export const attrU16BE = (type: number, v: number): Attr => {
  const b = Buffer.alloc(2);
  b.writeUInt16BE(v);
  return { type, data: b };
};
export const attrU32 = (type: number, v: number): Attr => {
  const b = Buffer.alloc(4);
  b.writeUInt32LE(v >>> 0);
  return { type, data: b };
};
export const attrS32 = (type: number, v: number): Attr => {
  const b = Buffer.alloc(4);
  b.writeInt32LE(v);
  return { type, data: b };
};
/** A NUL-terminated string attribute, as the kernel expects for names and kinds. */
export const attrString = (type: number, s: string): Attr => ({
  type,
  data: Buffer.concat([Buffer.from(s, 'utf8'), Buffer.from([0])]),
});
export const attrBytes = (type: number, data: Buffer): Attr => ({ type, data });
export const attrNested = (type: number, nested: readonly Attr[]): Attr => ({ type: type | NLA_F_NESTED, nested });

function attrSize(a: Attr): number {
  return 4 + ('data' in a ? a.data.length : a.nested.reduce((n, c) => n + align4(attrSize(c)), 0));
}

function writeAttr(buf: Buffer, off: number, a: Attr): number {
  const len = attrSize(a);
  buf.writeUInt16LE(len, off);
  buf.writeUInt16LE(a.type, off + 2);
  let p = off + 4;
  if ('data' in a) {
    a.data.copy(buf, p);
  } else {
    for (const c of a.nested) p += align4(writeAttr(buf, p, c));
  }
  return len;
}

/** Encodes attributes back to back, each padded to 4 bytes. */
export function encodeAttrs(attrs: readonly Attr[]): Buffer {
  const size = attrs.reduce((n, a) => n + align4(attrSize(a)), 0);
  const buf = Buffer.alloc(size);
  let off = 0;
  for (const a of attrs) off += align4(writeAttr(buf, off, a));
  return buf;
}

/** A whole netlink request: nlmsghdr, the family header bytes, then attributes. */
export function encodeMessage(
  type: number,
  flags: number,
  seq: number,
  header: Buffer,
  attrs: readonly Attr[],
): Buffer {
  const body = Buffer.concat([header, encodeAttrs(attrs)]);
  const msg = Buffer.alloc(16 + body.length);
  msg.writeUInt32LE(msg.length, 0);
  msg.writeUInt16LE(type, 4);
  msg.writeUInt16LE(flags, 6);
  msg.writeUInt32LE(seq >>> 0, 8);
  msg.writeUInt32LE(0, 12);
  body.copy(msg, 16);
  return msg;
}

/** struct ifinfomsg (16 bytes). */
export function ifinfomsg(family: number, index: number, flags = 0, change = 0): Buffer {
  const b = Buffer.alloc(16);
  b.writeUInt8(family, 0);
  b.writeUInt16LE(0, 2); // ifi_type
  b.writeInt32LE(index, 4);
  b.writeUInt32LE(flags >>> 0, 8);
  b.writeUInt32LE(change >>> 0, 12);
  return b;
}

/** struct ifaddrmsg (8 bytes). */
export function ifaddrmsg(family: number, prefixLen: number, flags: number, scope: number, index: number): Buffer {
  const b = Buffer.alloc(8);
  b.writeUInt8(family, 0);
  b.writeUInt8(prefixLen, 1);
  b.writeUInt8(flags & 0xff, 2);
  b.writeUInt8(scope, 3);
  b.writeUInt32LE(index >>> 0, 4);
  return b;
}

/** struct rtmsg (12 bytes). */
export function rtmsg(f: {
  family: number;
  dstLen: number;
  table: number;
  protocol: number;
  scope: number;
  type: number;
}): Buffer {
  const b = Buffer.alloc(12);
  b.writeUInt8(f.family, 0);
  b.writeUInt8(f.dstLen, 1);
  b.writeUInt8(0, 2); // src_len
  b.writeUInt8(0, 3); // tos
  b.writeUInt8(f.table < 256 ? f.table : 0, 4);
  b.writeUInt8(f.protocol, 5);
  b.writeUInt8(f.scope, 6);
  b.writeUInt8(f.type, 7);
  b.writeUInt32LE(0, 8);
  return b;
}

/** struct ndmsg (12 bytes). */
export function ndmsg(family: number, index: number, state: number, flags: number): Buffer {
  const b = Buffer.alloc(12);
  b.writeUInt8(family, 0);
  b.writeInt32LE(index, 4);
  b.writeUInt16LE(state, 8);
  b.writeUInt8(flags, 10);
  b.writeUInt8(0, 11);
  return b;
}

export interface RawMessage {
  readonly type: number;
  readonly flags: number;
  readonly seq: number;
  readonly payload: Buffer; // everything after nlmsghdr
}

/** Splits a datagram into netlink messages. */
export function splitMessages(buf: Buffer): RawMessage[] {
  const out: RawMessage[] = [];
  let off = 0;
  while (off + 16 <= buf.length) {
    const len = buf.readUInt32LE(off);
    if (len < 16 || off + len > buf.length) break;
    out.push({
      type: buf.readUInt16LE(off + 4),
      flags: buf.readUInt16LE(off + 6),
      seq: buf.readUInt32LE(off + 8),
      payload: buf.subarray(off + 16, off + len),
    });
    off += align4(len);
  }
  return out;
}

/** Parses TLV attributes into a map of type (nested flag stripped) to payload; the last occurrence wins. */
export function parseAttrs(buf: Buffer): Map<number, Buffer> {
  const out = new Map<number, Buffer>();
  let off = 0;
  while (off + 4 <= buf.length) {
    const len = buf.readUInt16LE(off);
    const type = buf.readUInt16LE(off + 2) & 0x3fff;
    if (len < 4 || off + len > buf.length) break;
    out.set(type, buf.subarray(off + 4, off + len));
    off += align4(len);
  }
  return out;
}

export const readCString = (b: Buffer | undefined): string | undefined => {
  if (!b) return undefined;
  const nul = b.indexOf(0);
  return b.subarray(0, nul < 0 ? b.length : nul).toString('utf8');
};

export const formatMac = (b: Buffer | undefined): string | undefined =>
  b && b.length > 0 ? [...b].map((x) => x.toString(16).padStart(2, '0')).join(':') : undefined;

export function parseMac(mac: string): Buffer | undefined {
  const parts = mac.split(/[:-]/);
  if (parts.length !== 6 || !parts.every((p) => /^[0-9a-fA-F]{2}$/.test(p))) return undefined;
  return Buffer.from(parts.map((p) => parseInt(p, 16)));
}
