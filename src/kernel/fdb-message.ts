/**
 * Forwarding entries of a VXLAN device (its FDB, RTM_*NEIGH in family AF_BRIDGE with NTF_SELF): what a request
 * carries and what a dump's reply says. The all-zeros MAC with a destination is a flood entry: broadcast and unknown
 * traffic is copied to that remote VTEP.
 */
import * as C from './constants';
import { formatAddress, parseAddress } from './ip';
import { macBytes } from './link-message';
import { type Attr, attrBytes, formatMac, ndmsg, parseAttrs } from './message';
import type { FdbEntry } from './types';

/** The header and attributes of a request about one entry (`mac` to `dst`) of the device at `index`. */
export function fdbEntryMessage(index: number, mac: string, dst: string): { header: Buffer; attrs: Attr[] } {
  const header = ndmsg(C.AF_BRIDGE, index, C.NUD_PERMANENT | C.NUD_NOARP, C.NTF_SELF);
  const attrs = [attrBytes(C.NDA_LLADDR, macBytes(mac)), attrBytes(C.NDA_DST, parseAddress(dst).bytes)];
  return { header, attrs };
}

/** A dump of every bridge-family entry (the kernel filters nothing for this header; the caller keeps its device's). */
export const fdbDumpHeader = (): Buffer => ndmsg(C.AF_BRIDGE, 0, 0, 0);

/** An RTM_NEWNEIGH reply as an entry of the device at `index`; undefined for another device's or one with no remote. */
export function parseFdbEntry(payload: Buffer, index: number): FdbEntry | undefined {
  if (payload.length < 12 || payload.readUInt8(0) !== C.AF_BRIDGE || payload.readInt32LE(4) !== index) return undefined;
  const attrs = parseAttrs(payload.subarray(12));
  const mac = formatMac(attrs.get(C.NDA_LLADDR));
  const dst = attrs.get(C.NDA_DST);
  if (!mac || !dst || (dst.length !== 4 && dst.length !== 16)) return undefined;
  return { mac, dst: formatAddress(dst), permanent: (payload.readUInt16LE(8) & C.NUD_PERMANENT) !== 0 };
}
