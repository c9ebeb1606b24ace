/**
 * A synchronous rtnetlink socket. A socket belongs to the netns it was opened in, so the worker opens one
 * per target netns and never has to stay switched while it talks to the kernel. Only used on the kernel worker.
 */
import * as C from './constants';
import { Attr, attrBytes, attrNested, attrS32, attrString, attrU16, attrU16BE, attrU32, attrU8, encodeAttrs, encodeMessage, formatMac, ifaddrmsg, ifinfomsg, ndmsg, parseAttrs, parseMac, RawMessage, readCString, rtmsg, splitMessages } from './message';
import { formatAddress, ipv4Broadcast, parseAddress } from './ip';
import { errnoName, sys } from './syscalls';
import type { AddrInfo, KernelFailure, LinkInfo, LinkSpec, RouteInfo, RouteSpec } from './types';

export class KernelError extends Error {
  constructor(readonly failure: KernelFailure) {
    super(`${failure.op} ${failure.target}: ${failure.errnoName} (${failure.message})${failure.extack ? `: ${failure.extack}` : ''}`);
  }
}

const strerror = (n: number): string => {
  const texts: Record<string, string> = {
    EEXIST: 'already exists', ENODEV: 'no such device', ENOENT: 'no such file or directory', EINVAL: 'invalid argument',
    EPERM: 'operation not permitted', EBUSY: 'device or resource busy', EOPNOTSUPP: 'operation not supported',
    EADDRNOTAVAIL: 'address not available', ENETUNREACH: 'network unreachable', ESRCH: 'no such process', ENOBUFS: 'no buffer space',
    EAFNOSUPPORT: 'address family not supported', ERANGE: 'out of range', EACCES: 'permission denied',
  };
  return texts[errnoName(n)] ?? `errno ${n}`;
};

export const failure = (op: string, target: string, errno: number, extack?: string): KernelFailure => ({
  op, target, errno, errnoName: errnoName(errno), message: strerror(errno), ...(extack ? { extack } : {}),
});

/**
 * Reads one received buffer of replies to request `seq` into `replies`: true when the request is complete (its ack
 * or NLMSG_DONE came), false when more is to come. The kernel's error for the request is thrown as a KernelError.
 */
export function collectReplies(received: Buffer, seq: number, replies: RawMessage[], op: string, target: string): boolean {
  for (const m of splitMessages(received)) {
    if (m.seq !== seq) continue; // a stale reply to an earlier request
    if (m.type === C.NLMSG_DONE) return true;
    if (m.type === C.NLMSG_ERROR) {
      const code = -m.payload.readInt32LE(0);
      if (code === 0) return true;
      let extack: string | undefined;
      if (m.flags & C.NLM_F_ACK_TLVS) {
        // With NETLINK_CAP_ACK only the original header (16 bytes) follows the error code.
        const tlvs = parseAttrs(m.payload.subarray(4 + 16));
        extack = readCString(tlvs.get(C.NLMSGERR_ATTR_MSG));
      }
      throw new KernelError(failure(op, target, code, extack));
    }
    replies.push({ ...m, payload: Buffer.from(m.payload) }); // the receive buffer is reused
  }
  return false;
}

const macvlanModes = { private: 1, vepa: 2, bridge: 4, passthru: 8, source: 16 } as const;
const ipvlanModes = { l2: 0, l3: 1, l3s: 2 } as const;
const RECV_SIZE = 256 * 1024;

export class RtnlSocket {
  private seq = Math.floor(Math.random() * 1e6);
  private readonly buf = Buffer.alloc(RECV_SIZE);
  /** struct ifreq: the name, then (for SIOCGIFINDEX) the index. */
  private readonly ifreq = Buffer.alloc(40);
  private closed = false;

  private constructor(private readonly fd: number) {}

  /** Opens a socket in the calling thread's current netns. */
  static open(): RtnlSocket {
    const fd = sys.socket(C.AF_NETLINK, C.SOCK_RAW | C.SOCK_CLOEXEC, C.NETLINK_ROUTE);
    if (fd < 0) throw new KernelError(failure('socket', 'NETLINK_ROUTE', sys.errno()));
    const one = Buffer.alloc(4);
    one.writeInt32LE(1);
    // Extended ack gives the kernel's own explanation; cap-ack keeps error replies small.
    sys.setsockopt(fd, C.SOL_NETLINK, C.NETLINK_EXT_ACK, one, 4);
    sys.setsockopt(fd, C.SOL_NETLINK, C.NETLINK_CAP_ACK, one, 4);
    const rcv = Buffer.alloc(4);
    rcv.writeInt32LE(1 << 20);
    sys.setsockopt(fd, C.SOL_SOCKET, C.SO_RCVBUF, rcv, 4);
    const sa = Buffer.alloc(12);
    sa.writeUInt16LE(C.AF_NETLINK, 0);
    if (sys.bind(fd, sa, 12) < 0) {
      const e = sys.errno();
      sys.close(fd);
      throw new KernelError(failure('bind', 'NETLINK_ROUTE', e));
    }
    return new RtnlSocket(fd);
  }

  close(): void {
    if (!this.closed) sys.close(this.fd);
    this.closed = true;
  }

  /** Hands the socket's descriptor over to the caller, who closes it; this object no longer uses it. */
  release(): number {
    this.closed = true;
    return this.fd;
  }

  /** Sends one request and collects the replies until the ack (or NLMSG_DONE for dumps). */
  private request(op: string, target: string, type: number, flags: number, header: Buffer, attrs: readonly Attr[]): RawMessage[] {
    const seq = ++this.seq;
    const msg = encodeMessage(type, flags | C.NLM_F_REQUEST | C.NLM_F_ACK, seq, header, attrs);
    if (sys.send(this.fd, msg, msg.length, 0) < 0) throw new KernelError(failure(op, target, sys.errno()));
    const replies: RawMessage[] = [];
    for (;;) {
      const n = sys.recv(this.fd, this.buf, this.buf.length, 0);
      if (n < 0) {
        const e = sys.errno();
        if (errnoName(e) === 'EINTR') continue;
        throw new KernelError(failure(op, target, e));
      }
      if (collectReplies(this.buf.subarray(0, n), seq, replies, op, target)) return replies;
    }
  }

  // ---- links ----

  /**
   * A link's index by name: SIOCGIFINDEX on this socket, which answers for the socket's own netns, takes a
   * microsecond and parses nothing (an RTM_GETLINK of a bridge costs 30-50 times as much).
   */
  private linkIndex(name: string): number {
    const ifreq = this.ifreq.fill(0);
    if (Buffer.byteLength(name) >= C.IFNAMSIZ || ifreq.write(name, 'utf8') !== Buffer.byteLength(name)) {
      throw new KernelError(failure('lookup', name, C.ENODEV));
    }
    if (sys.ioctlPtr(this.fd, C.SIOCGIFINDEX, ifreq) < 0) throw new KernelError(failure('lookup', name, sys.errno()));
    return ifreq.readInt32LE(C.IFNAMSIZ);
  }

  getLink(name: string): LinkInfo | undefined {
    try {
      const replies = this.request('RTM_GETLINK', name, C.RTM_GETLINK, 0, ifinfomsg(C.AF_UNSPEC, 0), [attrString(C.IFLA_IFNAME, name)]);
      const first = replies.find((r) => r.type === C.RTM_NEWLINK);
      return first ? parseLink(first.payload) : undefined;
    } catch (e) {
      if (e instanceof KernelError && e.failure.errnoName === 'ENODEV') return undefined;
      throw e;
    }
  }

  listLinks(): LinkInfo[] {
    return this.request('RTM_GETLINK', 'dump', C.RTM_GETLINK, C.NLM_F_DUMP, ifinfomsg(C.AF_UNSPEC, 0), [])
      .filter((r) => r.type === C.RTM_NEWLINK)
      .map((r) => parseLink(r.payload));
  }

  addLink(spec: LinkSpec, openNetnsFd: (path: string) => number): void {
    const attrs: Attr[] = [attrString(C.IFLA_IFNAME, spec.name)];
    const fds: number[] = [];
    try {
      if (spec.mtu) attrs.push(attrU32(C.IFLA_MTU, spec.mtu));
      if (spec.mac) attrs.push(attrBytes(C.IFLA_ADDRESS, macBytes(spec.mac)));
      if (spec.group !== undefined) attrs.push(attrU32(C.IFLA_GROUP, spec.group));
      if (spec.bridge) attrs.push(attrU32(C.IFLA_MASTER, this.linkIndex(spec.bridge)));
      const data: Attr[] = [];
      switch (spec.kind) {
        case 'bridge':
          if (spec.vlanFiltering) data.push(attrU8(C.IFLA_BR_VLAN_FILTERING, 1));
          break;
        case 'veth': {
          const peer: Attr[] = [attrString(C.IFLA_IFNAME, spec.peer.name)];
          if (spec.peer.mtu ?? spec.mtu) peer.push(attrU32(C.IFLA_MTU, (spec.peer.mtu ?? spec.mtu)!));
          if (spec.peer.mac) peer.push(attrBytes(C.IFLA_ADDRESS, macBytes(spec.peer.mac)));
          if (spec.peer.netns) {
            const fd = openNetnsFd(spec.peer.netns);
            fds.push(fd);
            peer.push(attrS32(C.IFLA_NET_NS_FD, fd));
          }
          data.push({ type: C.VETH_INFO_PEER, data: Buffer.concat([ifinfomsg(C.AF_UNSPEC, 0), encodeAttrs(peer)]) });
          break;
        }
        case 'macvlan':
          attrs.push(attrU32(C.IFLA_LINK, this.linkIndex(spec.master)));
          data.push(attrU32(C.IFLA_MACVLAN_MODE, macvlanModes[spec.mode]));
          break;
        case 'ipvlan':
          attrs.push(attrU32(C.IFLA_LINK, this.linkIndex(spec.master)));
          data.push(attrU16(C.IFLA_IPVLAN_MODE, ipvlanModes[spec.mode]));
          break;
        case 'vxlan': {
          data.push(attrU32(C.IFLA_VXLAN_ID, spec.vni));
          if (spec.underlay) data.push(attrU32(C.IFLA_VXLAN_LINK, this.linkIndex(spec.underlay)));
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
          break;
        }
        case 'dummy':
          break;
      }
      const info: Attr[] = [attrString(C.IFLA_INFO_KIND, spec.kind)];
      if (data.length) info.push(attrNested(C.IFLA_INFO_DATA, data));
      attrs.push(attrNested(C.IFLA_LINKINFO, info));
      if (spec.netns) {
        const fd = openNetnsFd(spec.netns);
        fds.push(fd);
        attrs.push(attrS32(C.IFLA_NET_NS_FD, fd));
      }
      const up = spec.up ? C.IFF_UP : 0;
      this.request('RTM_NEWLINK', spec.name, C.RTM_NEWLINK, C.NLM_F_CREATE | C.NLM_F_EXCL, ifinfomsg(C.AF_UNSPEC, 0, up, up), attrs);
    } finally {
      for (const fd of fds) sys.close(fd);
    }
  }

  deleteLink(name: string): void {
    this.request('RTM_DELLINK', name, C.RTM_DELLINK, 0, ifinfomsg(C.AF_UNSPEC, 0), [attrString(C.IFLA_IFNAME, name)]);
  }

  /** Deletes every link of a link group in one request: much faster than one by one. */
  deleteGroup(group: number): void {
    this.request('RTM_DELLINK', `group ${group}`, C.RTM_DELLINK, 0, ifinfomsg(C.AF_UNSPEC, 0), [attrU32(C.IFLA_GROUP, group)]);
  }

  setLink(
    name: string,
    change: { up?: boolean; mtu?: number; mac?: string; bridge?: string | null; promisc?: boolean; hairpin?: boolean; newName?: string; group?: number; netnsFd?: number },
  ): void {
    const index = this.linkIndex(name);
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
    if (change.bridge !== undefined) attrs.push(attrU32(C.IFLA_MASTER, change.bridge === null ? 0 : this.linkIndex(change.bridge)));
    if (change.group !== undefined) attrs.push(attrU32(C.IFLA_GROUP, change.group));
    if (change.netnsFd !== undefined) attrs.push(attrS32(C.IFLA_NET_NS_FD, change.netnsFd));
    if (change.newName) attrs.push(attrString(C.IFLA_IFNAME, change.newName));
    if (attrs.length || mask) this.request('RTM_SETLINK', name, C.RTM_NEWLINK, 0, ifinfomsg(C.AF_UNSPEC, index, flags, mask), attrs);
    if (change.hairpin !== undefined) {
      // Bridge port flags are set with AF_BRIDGE and a nested IFLA_PROTINFO.
      this.request('RTM_SETLINK', `${name} hairpin`, C.RTM_SETLINK, 0, ifinfomsg(C.AF_BRIDGE, index), [
        attrNested(C.IFLA_PROTINFO, [attrU8(C.IFLA_BRPORT_MODE, change.hairpin ? 1 : 0)]),
      ]);
    }
  }

  // ---- addresses ----

  addAddress(name: string, cidr: string, options: { readonly noDad?: boolean; readonly noPrefixRoute?: boolean } = {}): void {
    const index = this.linkIndex(name);
    const a = parseAddress(cidr);
    const attrs: Attr[] = [attrBytes(C.IFA_LOCAL, a.bytes), attrBytes(C.IFA_ADDRESS, a.bytes)];
    if (a.family === C.AF_INET && a.prefixLen < 31) attrs.push(attrBytes(C.IFA_BROADCAST, ipv4Broadcast(a.bytes, a.prefixLen)));
    const flags = (options.noDad && a.family === C.AF_INET6 ? C.IFA_F_NODAD : 0) | (options.noPrefixRoute ? C.IFA_F_NOPREFIXROUTE : 0);
    if (flags) attrs.push(attrU32(C.IFA_FLAGS, flags));
    // Loopback addresses must have host scope, as iproute2 sets for them.
    const scope = a.family === C.AF_INET && a.bytes[0] === 127 ? C.RT_SCOPE_HOST : C.RT_SCOPE_UNIVERSE;
    this.request('RTM_NEWADDR', `${name} ${cidr}`, C.RTM_NEWADDR, C.NLM_F_CREATE | C.NLM_F_EXCL, ifaddrmsg(a.family, a.prefixLen, flags & 0xff, scope, index), attrs);
  }

  deleteAddress(name: string, cidr: string): void {
    const index = this.linkIndex(name);
    const a = parseAddress(cidr);
    this.request('RTM_DELADDR', `${name} ${cidr}`, C.RTM_DELADDR, 0, ifaddrmsg(a.family, a.prefixLen, 0, 0, index), [attrBytes(C.IFA_LOCAL, a.bytes), attrBytes(C.IFA_ADDRESS, a.bytes)]);
  }

  listAddresses(name?: string): AddrInfo[] {
    const index = name === undefined ? undefined : this.linkIndex(name);
    const out: AddrInfo[] = [];
    for (const r of this.request('RTM_GETADDR', name ?? 'dump', C.RTM_GETADDR, C.NLM_F_DUMP, ifaddrmsg(C.AF_UNSPEC, 0, 0, 0, 0), [])) {
      if (r.type !== C.RTM_NEWADDR) continue;
      const family = r.payload.readUInt8(0);
      const prefixLen = r.payload.readUInt8(1);
      const ifindex = r.payload.readUInt32LE(4);
      if (index !== undefined && ifindex !== index) continue;
      const attrs = parseAttrs(r.payload.subarray(8));
      const bytes = attrs.get(C.IFA_LOCAL) ?? attrs.get(C.IFA_ADDRESS);
      if (!bytes) continue;
      out.push({ index: ifindex, family: family === C.AF_INET ? 4 : 6, address: `${formatAddress(bytes)}/${prefixLen}` });
    }
    return out;
  }

  // ---- routes ----

  /** A delete matches on what it names: protocol and scope are left open, so it also finds the kernel's own routes. */
  private routeMessage(route: RouteSpec, forDelete = false): { header: Buffer; attrs: Attr[] } {
    const dst = parseAddress(route.dst);
    const attrs: Attr[] = [attrU32(C.RTA_TABLE, C.RT_TABLE_MAIN)];
    if (dst.prefixLen > 0) attrs.push(attrBytes(C.RTA_DST, dst.bytes));
    if (route.gw) {
      const gw = parseAddress(route.gw);
      if (gw.family !== dst.family) throw new KernelError(failure('route', `${route.dst} via ${route.gw}`, 22 /* EINVAL */, 'gateway and destination are of different IP families'));
      attrs.push(attrBytes(C.RTA_GATEWAY, gw.bytes));
    }
    if (route.dev) attrs.push(attrU32(C.RTA_OIF, this.linkIndex(route.dev)));
    if (route.metric !== undefined) attrs.push(attrU32(C.RTA_PRIORITY, route.metric));
    if (route.src) {
      const src = parseAddress(route.src);
      if (src.family !== dst.family) throw new KernelError(failure('route', `${route.dst} src ${route.src}`, 22 /* EINVAL */, 'source and destination are of different IP families'));
      attrs.push(attrBytes(C.RTA_PREFSRC, src.bytes));
    }
    const scope = route.scope === 'host' ? C.RT_SCOPE_HOST : route.scope === 'link' || !route.gw ? C.RT_SCOPE_LINK : C.RT_SCOPE_UNIVERSE;
    const header = rtmsg({
      family: dst.family,
      dstLen: dst.prefixLen,
      table: C.RT_TABLE_MAIN,
      protocol: forDelete ? 0 : C.RTPROT_BOOT,
      scope: forDelete ? C.RT_SCOPE_NOWHERE : scope,
      type: C.RTN_UNICAST,
    });
    return { header, attrs };
  }

  addRoute(route: RouteSpec): void {
    const { header, attrs } = this.routeMessage(route);
    this.request('RTM_NEWROUTE', describeRoute(route), C.RTM_NEWROUTE, C.NLM_F_CREATE | C.NLM_F_EXCL, header, attrs);
  }

  deleteRoute(route: RouteSpec): void {
    const { header, attrs } = this.routeMessage(route, true);
    this.request('RTM_DELROUTE', describeRoute(route), C.RTM_DELROUTE, 0, header, attrs);
  }

  listRoutes(family?: 4 | 6): RouteInfo[] {
    const fam = family === 4 ? C.AF_INET : family === 6 ? C.AF_INET6 : C.AF_UNSPEC;
    const header = rtmsg({ family: fam, dstLen: 0, table: 0, protocol: 0, scope: 0, type: 0 });
    const out: RouteInfo[] = [];
    for (const r of this.request('RTM_GETROUTE', 'dump', C.RTM_GETROUTE, C.NLM_F_DUMP, header, [])) {
      if (r.type !== C.RTM_NEWROUTE) continue;
      const f = r.payload.readUInt8(0);
      const dstLen = r.payload.readUInt8(1);
      const attrs = parseAttrs(r.payload.subarray(12));
      const tableAttr = attrs.get(C.RTA_TABLE);
      const table = tableAttr ? tableAttr.readUInt32LE(0) : r.payload.readUInt8(4);
      const dstBytes = attrs.get(C.RTA_DST);
      const dst = dstBytes ? formatAddress(dstBytes) : f === C.AF_INET ? '0.0.0.0' : '::';
      const gw = attrs.get(C.RTA_GATEWAY);
      const oif = attrs.get(C.RTA_OIF);
      out.push({
        family: f === C.AF_INET ? 4 : 6,
        dst: `${dst}/${dstLen}`,
        ...(gw ? { gw: formatAddress(gw) } : {}),
        ...(oif ? { oifIndex: oif.readUInt32LE(0) } : {}),
        table,
        protocol: r.payload.readUInt8(5),
        scope: r.payload.readUInt8(6),
      });
    }
    return out;
  }

  /** Appends a forwarding entry (e.g. all-zero MAC to a remote VTEP on a vxlan device). */
  appendFdb(dev: string, mac: string, dst: string): void {
    const index = this.linkIndex(dev);
    const a = parseAddress(dst);
    this.request('RTM_NEWNEIGH', `${dev} fdb ${mac} ${dst}`, C.RTM_NEWNEIGH, C.NLM_F_CREATE | C.NLM_F_APPEND, ndmsg(C.AF_BRIDGE, index, C.NUD_PERMANENT | C.NUD_NOARP, C.NTF_SELF), [
      attrBytes(C.NDA_LLADDR, macBytes(mac)),
      attrBytes(C.NDA_DST, a.bytes),
    ]);
  }
}

function macBytes(mac: string): Buffer {
  const b = parseMac(mac);
  if (!b) throw new KernelError(failure('mac', mac, 22 /* EINVAL */, `"${mac}" is not a MAC address`));
  return b;
}

const describeRoute = (r: RouteSpec): string => `${r.dst}${r.gw ? ` via ${r.gw}` : ''}${r.dev ? ` dev ${r.dev}` : ''}`;

function parseLink(payload: Buffer): LinkInfo {
  const index = payload.readInt32LE(4);
  const flags = payload.readUInt32LE(8);
  const attrs = parseAttrs(payload.subarray(16));
  const info = attrs.get(C.IFLA_LINKINFO);
  const kind = info ? readCString(parseAttrs(info).get(C.IFLA_INFO_KIND)) : undefined;
  const master = attrs.get(C.IFLA_MASTER);
  const link = attrs.get(C.IFLA_LINK);
  const group = attrs.get(C.IFLA_GROUP);
  return {
    index,
    name: readCString(attrs.get(C.IFLA_IFNAME)) ?? '',
    ...(kind ? { kind } : {}),
    mtu: attrs.get(C.IFLA_MTU)?.readUInt32LE(0) ?? 0,
    ...(formatMac(attrs.get(C.IFLA_ADDRESS)) ? { mac: formatMac(attrs.get(C.IFLA_ADDRESS)) } : {}),
    up: (flags & C.IFF_UP) !== 0,
    promisc: (flags & C.IFF_PROMISC) !== 0,
    ...(master ? { masterIndex: master.readUInt32LE(0) } : {}),
    ...(link ? { linkIndex: link.readUInt32LE(0) } : {}),
    group: group ? group.readUInt32LE(0) : 0,
  };
}
