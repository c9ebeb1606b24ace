/**
 * A synchronous rtnetlink socket. A socket belongs to the netns it was opened in, so the worker opens one
 * per target netns and never has to stay switched while it talks to the kernel. Only used on the kernel worker.
 * What each request carries is built in link-, address- and route-message.ts; this file sends and receives.
 */
import { type AddressOptions, deleteAddressMessage, newAddressMessage, parseAddressReply } from './address-message';
import * as C from './constants';
import { callFailed, KernelCallError } from './failure';
import { fdbDumpHeader, fdbEntryMessage, parseFdbEntry } from './fdb-message';
import { type LinkChange, linkChangeMessage, newLinkAttrs, parseLink } from './link-message';
import {
  type Attr,
  attrNested,
  attrString,
  attrU32,
  attrU8,
  encodeMessage,
  ifaddrmsg,
  ifinfomsg,
  type RawMessage,
} from './message';
import { collectReplies } from './replies';
import { describeRoute, parseRoute, routeDumpHeader, routeMessage } from './route-message';
import { errnoName, sys } from './syscalls';
import type { AddrInfo, FdbEntry, LinkInfo, LinkSpec, RouteInfo, RouteSpec } from './types';

const RECV_SIZE = 256 * 1024;

/**
 * A receive buffer for the sockets of one thread. Each request is sent and answered before the next starts, so one
 * buffer serves every socket of the thread; a new zero-filled 256 KiB buffer per socket (one per pod netns an ADD
 * touches) cost ~50 µs a socket in allocation and the collections it brought on the worker's small heap.
 */
export const receiveBuffer = (): Buffer => Buffer.alloc(RECV_SIZE);

export class RtnlSocket {
  private seq = Math.floor(Math.random() * 1e6);
  /** struct ifreq: the name, then (for SIOCGIFINDEX) the index. */
  private readonly ifreq = Buffer.alloc(40);
  private closed = false;
  private readonly indexOf = (name: string): number => this.linkIndex(name);

  private constructor(
    private readonly fd: number,
    private readonly buf: Buffer,
  ) {}

  /** Opens a socket in the calling thread's current netns; `buf` is the thread's receive buffer (see receiveBuffer). */
  static open(buf: Buffer = receiveBuffer()): RtnlSocket {
    const fd = sys.socket(C.AF_NETLINK, C.SOCK_RAW | C.SOCK_CLOEXEC, C.NETLINK_ROUTE);
    if (fd < 0) throw callFailed('socket', 'NETLINK_ROUTE', sys.errno());
    const one = int32(1);
    // Extended ack gives the kernel's own explanation; cap-ack keeps error replies small.
    sys.setsockopt(fd, C.SOL_NETLINK, C.NETLINK_EXT_ACK, one, 4);
    sys.setsockopt(fd, C.SOL_NETLINK, C.NETLINK_CAP_ACK, one, 4);
    sys.setsockopt(fd, C.SOL_SOCKET, C.SO_RCVBUF, int32(1 << 20), 4);
    const sa = Buffer.alloc(12);
    sa.writeUInt16LE(C.AF_NETLINK, 0);
    if (sys.bind(fd, sa, 12) < 0) {
      const e = sys.errno();
      sys.close(fd);
      throw callFailed('bind', 'NETLINK_ROUTE', e);
    }
    return new RtnlSocket(fd, buf);
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
  private request(
    op: string,
    target: string,
    type: number,
    flags: number,
    header: Buffer,
    attrs: readonly Attr[],
  ): RawMessage[] {
    const seq = ++this.seq;
    const msg = encodeMessage(type, flags | C.NLM_F_REQUEST | C.NLM_F_ACK, seq, header, attrs);
    if (sys.send(this.fd, msg, msg.length, 0) < 0) throw callFailed(op, target, sys.errno());
    const replies: RawMessage[] = [];
    for (;;) {
      const n = sys.recv(this.fd, this.buf, this.buf.length, 0);
      if (n < 0) {
        const e = sys.errno();
        if (errnoName(e) === 'EINTR') continue;
        throw callFailed(op, target, e);
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
      throw callFailed('lookup', name, C.ENODEV);
    }
    if (sys.ioctlPtr(this.fd, C.SIOCGIFINDEX, ifreq) < 0) throw callFailed('lookup', name, sys.errno());
    return ifreq.readInt32LE(C.IFNAMSIZ);
  }

  getLink(name: string): LinkInfo | undefined {
    try {
      const header = ifinfomsg(C.AF_UNSPEC, 0);
      const replies = this.request('RTM_GETLINK', name, C.RTM_GETLINK, 0, header, [attrString(C.IFLA_IFNAME, name)]);
      const first = replies.find((r) => r.type === C.RTM_NEWLINK);
      return first ? parseLink(first.payload) : undefined;
    } catch (e) {
      if (e instanceof KernelCallError && e.is('ENODEV')) return undefined;
      throw e;
    }
  }

  listLinks(): LinkInfo[] {
    return this.request('RTM_GETLINK', 'dump', C.RTM_GETLINK, C.NLM_F_DUMP, ifinfomsg(C.AF_UNSPEC, 0), [])
      .filter((r) => r.type === C.RTM_NEWLINK)
      .map((r) => parseLink(r.payload));
  }

  addLink(spec: LinkSpec, openNetnsFd: (path: string) => number): void {
    const fds: number[] = [];
    const netnsFdOf = (path: string): number => {
      const fd = openNetnsFd(path);
      fds.push(fd);
      return fd;
    };
    try {
      const attrs = newLinkAttrs(spec, this.indexOf, netnsFdOf);
      const up = spec.up ? C.IFF_UP : 0;
      const header = ifinfomsg(C.AF_UNSPEC, 0, up, up);
      this.request('RTM_NEWLINK', spec.name, C.RTM_NEWLINK, C.NLM_F_CREATE | C.NLM_F_EXCL, header, attrs);
    } finally {
      for (const fd of fds) sys.close(fd);
    }
  }

  deleteLink(name: string): void {
    const attrs = [attrString(C.IFLA_IFNAME, name)];
    this.request('RTM_DELLINK', name, C.RTM_DELLINK, 0, ifinfomsg(C.AF_UNSPEC, 0), attrs);
  }

  /** Deletes every link of a link group in one request: much faster than one by one. */
  deleteGroup(group: number): void {
    const attrs = [attrU32(C.IFLA_GROUP, group)];
    this.request('RTM_DELLINK', `group ${group}`, C.RTM_DELLINK, 0, ifinfomsg(C.AF_UNSPEC, 0), attrs);
  }

  setLink(name: string, change: LinkChange): void {
    const index = this.linkIndex(name);
    const { flags, mask, attrs } = linkChangeMessage(change, this.indexOf);
    if (attrs.length || mask) {
      this.request('RTM_SETLINK', name, C.RTM_NEWLINK, 0, ifinfomsg(C.AF_UNSPEC, index, flags, mask), attrs);
    }
    if (change.hairpin !== undefined) {
      // Bridge port flags are set with AF_BRIDGE and a nested IFLA_PROTINFO.
      const protinfo = attrNested(C.IFLA_PROTINFO, [attrU8(C.IFLA_BRPORT_MODE, change.hairpin ? 1 : 0)]);
      this.request('RTM_SETLINK', `${name} hairpin`, C.RTM_SETLINK, 0, ifinfomsg(C.AF_BRIDGE, index), [protinfo]);
    }
  }

  // ---- addresses ----

  addAddress(name: string, cidr: string, options: AddressOptions = {}): void {
    const { header, attrs } = newAddressMessage(this.linkIndex(name), cidr, options);
    this.request('RTM_NEWADDR', `${name} ${cidr}`, C.RTM_NEWADDR, C.NLM_F_CREATE | C.NLM_F_EXCL, header, attrs);
  }

  deleteAddress(name: string, cidr: string): void {
    const { header, attrs } = deleteAddressMessage(this.linkIndex(name), cidr);
    this.request('RTM_DELADDR', `${name} ${cidr}`, C.RTM_DELADDR, 0, header, attrs);
  }

  listAddresses(name?: string): AddrInfo[] {
    const index = name === undefined ? undefined : this.linkIndex(name);
    const header = ifaddrmsg(C.AF_UNSPEC, 0, 0, 0, 0);
    const out: AddrInfo[] = [];
    for (const r of this.request('RTM_GETADDR', name ?? 'dump', C.RTM_GETADDR, C.NLM_F_DUMP, header, [])) {
      if (r.type !== C.RTM_NEWADDR) continue;
      const address = parseAddressReply(r.payload);
      if (address && (index === undefined || address.index === index)) out.push(address);
    }
    return out;
  }

  // ---- routes ----

  addRoute(route: RouteSpec): void {
    const { header, attrs } = routeMessage(route, this.indexOf);
    this.request('RTM_NEWROUTE', describeRoute(route), C.RTM_NEWROUTE, C.NLM_F_CREATE | C.NLM_F_EXCL, header, attrs);
  }

  deleteRoute(route: RouteSpec): void {
    const { header, attrs } = routeMessage(route, this.indexOf, true);
    this.request('RTM_DELROUTE', describeRoute(route), C.RTM_DELROUTE, 0, header, attrs);
  }

  listRoutes(family?: 4 | 6): RouteInfo[] {
    return this.request('RTM_GETROUTE', 'dump', C.RTM_GETROUTE, C.NLM_F_DUMP, routeDumpHeader(family), [])
      .filter((r) => r.type === C.RTM_NEWROUTE)
      .map((r) => parseRoute(r.payload));
  }

  /** Appends a forwarding entry (e.g. all-zero MAC to a remote VTEP on a vxlan device). */
  appendFdb(dev: string, mac: string, dst: string): void {
    const { header, attrs } = fdbEntryMessage(this.linkIndex(dev), mac, dst);
    const flags = C.NLM_F_CREATE | C.NLM_F_APPEND;
    this.request('RTM_NEWNEIGH', `${dev} fdb ${mac} ${dst}`, C.RTM_NEWNEIGH, flags, header, attrs);
  }

  /** Deletes one forwarding entry: of an all-zero MAC, only the remote `dst` (the others stay). */
  deleteFdb(dev: string, mac: string, dst: string): void {
    const { header, attrs } = fdbEntryMessage(this.linkIndex(dev), mac, dst);
    this.request('RTM_DELNEIGH', `${dev} fdb ${mac} ${dst}`, C.RTM_DELNEIGH, 0, header, attrs);
  }

  /** The entries of `dev` that name a remote, from a dump of the bridge family. */
  listFdb(dev: string): FdbEntry[] {
    const index = this.linkIndex(dev);
    return this.request('RTM_GETNEIGH', `${dev} fdb`, C.RTM_GETNEIGH, C.NLM_F_DUMP, fdbDumpHeader(), [])
      .filter((r) => r.type === C.RTM_NEWNEIGH)
      .flatMap((r) => parseFdbEntry(r.payload, index) ?? []);
  }
}

function int32(v: number): Buffer {
  const b = Buffer.alloc(4);
  b.writeInt32LE(v);
  return b;
}
