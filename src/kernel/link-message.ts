/** What RTM_NEWLINK and RTM_SETLINK carry for a link, and what RTM_NEWLINK replies say of one. Pure over Buffers. */
import * as C from './constants';
import { invalidRequest } from './failure';
import { parseAddress } from './ip';
import {
  type Attr,
  attrBytes,
  attrNested,
  attrS32,
  attrString,
  attrU16,
  attrU16BE,
  attrU32,
  attrU8,
  encodeAttrs,
  formatMac,
  ifinfomsg,
  parseAttrs,
  parseMac,
  readCString,
} from './message';
import type { LinkInfo, LinkSpec } from './types';

/** A link's index by name, in the netns of the request. */
export type IndexOf = (name: string) => number;
/** Opens a netns by path; the descriptor is the caller's to close. */
export type NetnsFdOf = (path: string) => number;

/** What a link change may set (RTM_SETLINK); `netnsFd` moves the link to that netns. */
export interface LinkChange {
  readonly up?: boolean;
  readonly mtu?: number;
  readonly mac?: string;
  readonly bridge?: string | null;
  readonly promisc?: boolean;
  readonly hairpin?: boolean;
  readonly newName?: string;
  readonly group?: number;
  readonly netnsFd?: number;
}

const macvlanModes = { private: 1, vepa: 2, bridge: 4, passthru: 8, source: 16 } as const;
const ipvlanModes = { l2: 0, l3: 1, l3s: 2 } as const;

export function macBytes(mac: string): Buffer {
  const b = parseMac(mac);
  if (!b) throw invalidRequest('mac', mac, `"${mac}" is not a MAC address`);
  return b;
}

/** The attributes of the RTM_NEWLINK that creates `spec`. */
export function newLinkAttrs(spec: LinkSpec, indexOf: IndexOf, netnsFdOf: NetnsFdOf): Attr[] {
  const attrs: Attr[] = [attrString(C.IFLA_IFNAME, spec.name)];
  if (spec.mtu) attrs.push(attrU32(C.IFLA_MTU, spec.mtu));
  if (spec.txqlen !== undefined) attrs.push(attrU32(C.IFLA_TXQLEN, spec.txqlen));
  if (spec.mac) attrs.push(attrBytes(C.IFLA_ADDRESS, macBytes(spec.mac)));
  if (spec.group !== undefined) attrs.push(attrU32(C.IFLA_GROUP, spec.group));
  if (spec.bridge) attrs.push(attrU32(C.IFLA_MASTER, indexOf(spec.bridge)));
  if (spec.kind === 'macvlan' || spec.kind === 'ipvlan') attrs.push(attrU32(C.IFLA_LINK, indexOf(spec.master)));
  const data = kindData(spec, indexOf, netnsFdOf);
  const info: Attr[] = [attrString(C.IFLA_INFO_KIND, spec.kind)];
  if (data.length) info.push(attrNested(C.IFLA_INFO_DATA, data));
  attrs.push(attrNested(C.IFLA_LINKINFO, info));
  if (spec.netns) attrs.push(attrS32(C.IFLA_NET_NS_FD, netnsFdOf(spec.netns)));
  return attrs;
}

/** IFLA_INFO_DATA: what is particular to the kind of link. */
function kindData(spec: LinkSpec, indexOf: IndexOf, netnsFdOf: NetnsFdOf): Attr[] {
  switch (spec.kind) {
    case 'bridge':
      return spec.vlanFiltering ? [attrU8(C.IFLA_BR_VLAN_FILTERING, 1)] : [];
    case 'veth': {
      const peer: Attr[] = [attrString(C.IFLA_IFNAME, spec.peer.name)];
      const mtu = spec.peer.mtu ?? spec.mtu;
      if (mtu) peer.push(attrU32(C.IFLA_MTU, mtu));
      if (spec.peer.mac) peer.push(attrBytes(C.IFLA_ADDRESS, macBytes(spec.peer.mac)));
      if (spec.peer.netns) peer.push(attrS32(C.IFLA_NET_NS_FD, netnsFdOf(spec.peer.netns)));
      return [{ type: C.VETH_INFO_PEER, data: Buffer.concat([ifinfomsg(C.AF_UNSPEC, 0), encodeAttrs(peer)]) }];
    }
    case 'macvlan':
      return [attrU32(C.IFLA_MACVLAN_MODE, macvlanModes[spec.mode])];
    case 'ipvlan':
      return [attrU16(C.IFLA_IPVLAN_MODE, ipvlanModes[spec.mode])];
    case 'vxlan':
      return vxlanData(spec, indexOf);
    case 'dummy':
      return [];
  }
}

function vxlanData(spec: Extract<LinkSpec, { kind: 'vxlan' }>, indexOf: IndexOf): Attr[] {
  const data: Attr[] = [attrU32(C.IFLA_VXLAN_ID, spec.vni)];
  if (spec.underlay) data.push(attrU32(C.IFLA_VXLAN_LINK, indexOf(spec.underlay)));
  if (spec.local) {
    const a = parseAddress(spec.local);
    data.push(attrBytes(a.family === C.AF_INET ? C.IFLA_VXLAN_LOCAL : C.IFLA_VXLAN_LOCAL6, a.bytes));
  }
  if (spec.multicastGroup) {
    const a = parseAddress(spec.multicastGroup);
    data.push(attrBytes(a.family === C.AF_INET ? C.IFLA_VXLAN_GROUP : C.IFLA_VXLAN_GROUP6, a.bytes));
  }
  data.push(attrU16BE(C.IFLA_VXLAN_PORT, spec.port ?? 4789));
  data.push(attrU8(C.IFLA_VXLAN_LEARNING, spec.learning === false ? 0 : 1));
  if (spec.ttl) data.push(attrU8(C.IFLA_VXLAN_TTL, spec.ttl));
  return data;
}

/** The ifinfomsg flags and mask, and the attributes, of the RTM_NEWLINK that applies `change` (not hairpin). */
export function linkChangeMessage(
  change: LinkChange,
  indexOf: IndexOf,
): { flags: number; mask: number; attrs: Attr[] } {
  let flags = 0;
  let mask = 0;
  if (change.up !== undefined) {
    mask |= C.IFF_UP;
    if (change.up) flags |= C.IFF_UP;
  }
  if (change.promisc !== undefined) {
    mask |= C.IFF_PROMISC;
    if (change.promisc) flags |= C.IFF_PROMISC;
  }
  const attrs: Attr[] = [];
  if (change.mtu) attrs.push(attrU32(C.IFLA_MTU, change.mtu));
  if (change.mac) attrs.push(attrBytes(C.IFLA_ADDRESS, macBytes(change.mac)));
  if (change.bridge !== undefined) {
    attrs.push(attrU32(C.IFLA_MASTER, change.bridge === null ? 0 : indexOf(change.bridge)));
  }
  if (change.group !== undefined) attrs.push(attrU32(C.IFLA_GROUP, change.group));
  if (change.netnsFd !== undefined) attrs.push(attrS32(C.IFLA_NET_NS_FD, change.netnsFd));
  if (change.newName) attrs.push(attrString(C.IFLA_IFNAME, change.newName));
  return { flags, mask, attrs };
}

/** An RTM_NEWLINK reply's payload as a LinkInfo. */
export function parseLink(payload: Buffer): LinkInfo {
  const flags = payload.readUInt32LE(8);
  const attrs = parseAttrs(payload.subarray(16));
  const info = attrs.get(C.IFLA_LINKINFO);
  const kind = info ? readCString(parseAttrs(info).get(C.IFLA_INFO_KIND)) : undefined;
  const mac = formatMac(attrs.get(C.IFLA_ADDRESS));
  const master = attrs.get(C.IFLA_MASTER);
  const link = attrs.get(C.IFLA_LINK);
  const group = attrs.get(C.IFLA_GROUP);
  const parsed: { -readonly [K in keyof LinkInfo]: LinkInfo[K] } = {
    index: payload.readInt32LE(4),
    name: readCString(attrs.get(C.IFLA_IFNAME)) ?? '',
    mtu: attrs.get(C.IFLA_MTU)?.readUInt32LE(0) ?? 0,
    up: (flags & C.IFF_UP) !== 0,
    promisc: (flags & C.IFF_PROMISC) !== 0,
    group: group ? group.readUInt32LE(0) : 0,
  };
  if (kind) parsed.kind = kind;
  if (mac) parsed.mac = mac;
  if (master) parsed.masterIndex = master.readUInt32LE(0);
  if (link) parsed.linkIndex = link.readUInt32LE(0);
  const data = info && kind === 'vxlan' ? parseAttrs(info).get(C.IFLA_INFO_DATA) : undefined;
  if (data) parsed.vxlan = vxlanIdentity(parseAttrs(data));
  return parsed;
}

/** A VXLAN device's VNI and UDP port (the port is big-endian on the wire). */
function vxlanIdentity(data: Map<number, Buffer>): { vni: number; port: number } {
  return {
    vni: data.get(C.IFLA_VXLAN_ID)?.readUInt32LE(0) ?? 0,
    port: data.get(C.IFLA_VXLAN_PORT)?.readUInt16BE(0) ?? 0,
  };
}
