/** What RTM_NEWADDR and RTM_DELADDR carry for an address, and what RTM_NEWADDR replies say of one. */
import * as C from './constants';
import { formatAddress, ipv4Broadcast, parseAddress } from './ip';
import { type Attr, attrBytes, attrU32, ifaddrmsg, parseAttrs } from './message';
import type { AddrInfo } from './types';

export interface AddressOptions {
  readonly noDad?: boolean;
  readonly noPrefixRoute?: boolean;
}

/** The header and attributes of the RTM_NEWADDR that puts `cidr` on link `index`. */
export function newAddressMessage(
  index: number,
  cidr: string,
  options: AddressOptions,
): { header: Buffer; attrs: Attr[] } {
  const a = parseAddress(cidr);
  const attrs: Attr[] = [attrBytes(C.IFA_LOCAL, a.bytes), attrBytes(C.IFA_ADDRESS, a.bytes)];
  if (a.family === C.AF_INET && a.prefixLen < 31) {
    attrs.push(attrBytes(C.IFA_BROADCAST, ipv4Broadcast(a.bytes, a.prefixLen)));
  }
  const noDad = options.noDad && a.family === C.AF_INET6 ? C.IFA_F_NODAD : 0;
  const flags = noDad | (options.noPrefixRoute ? C.IFA_F_NOPREFIXROUTE : 0);
  if (flags) attrs.push(attrU32(C.IFA_FLAGS, flags));
  // Loopback addresses must have host scope, as iproute2 sets for them.
  const scope = a.family === C.AF_INET && a.bytes[0] === 127 ? C.RT_SCOPE_HOST : C.RT_SCOPE_UNIVERSE;
  return { header: ifaddrmsg(a.family, a.prefixLen, flags & 0xff, scope, index), attrs };
}

/** The header and attributes of the RTM_DELADDR that takes `cidr` off link `index`. */
export function deleteAddressMessage(index: number, cidr: string): { header: Buffer; attrs: Attr[] } {
  const a = parseAddress(cidr);
  const attrs = [attrBytes(C.IFA_LOCAL, a.bytes), attrBytes(C.IFA_ADDRESS, a.bytes)];
  return { header: ifaddrmsg(a.family, a.prefixLen, 0, 0, index), attrs };
}

/** An RTM_NEWADDR reply's payload as an AddrInfo; undefined when it carries no address. */
export function parseAddressReply(payload: Buffer): AddrInfo | undefined {
  const family = payload.readUInt8(0);
  const prefixLen = payload.readUInt8(1);
  const index = payload.readUInt32LE(4);
  const attrs = parseAttrs(payload.subarray(8));
  const bytes = attrs.get(C.IFA_LOCAL) ?? attrs.get(C.IFA_ADDRESS);
  if (!bytes) return undefined;
  const wide = attrs.get(C.IFA_FLAGS);
  const flags = wide && wide.length >= 4 ? wide.readUInt32LE(0) : payload.readUInt8(2);
  return {
    index,
    family: family === C.AF_INET ? 4 : 6,
    address: `${formatAddress(bytes)}/${prefixLen}`,
    ...(flags & C.IFA_F_TENTATIVE ? { tentative: true } : {}),
    ...(flags & C.IFA_F_DADFAILED ? { dadFailed: true } : {}),
  };
}
