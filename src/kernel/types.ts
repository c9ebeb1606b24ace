/** What the kernel layer can be asked to do, and what it answers. Plain data: it crosses the worker boundary. */

export type MacvlanMode = 'private' | 'vepa' | 'bridge' | 'passthru' | 'source';
export type IpvlanMode = 'l2' | 'l3' | 'l3s';

export type LinkKind =
  | { readonly kind: 'bridge'; readonly vlanFiltering?: boolean }
  /** A veth pair; `peer` may be created directly inside another netns with its final name. The kernel cannot bring
   *  the peer up during creation (veth_open sees no peer yet: ENOTCONN), so set it up in a later op. */
  | {
      readonly kind: 'veth';
      readonly peer: { readonly name: string; readonly netns?: string; readonly mtu?: number; readonly mac?: string };
    }
  | { readonly kind: 'macvlan'; readonly master: string; readonly mode: MacvlanMode }
  | { readonly kind: 'ipvlan'; readonly master: string; readonly mode: IpvlanMode }
  | {
      readonly kind: 'vxlan';
      readonly vni: number;
      readonly port?: number;
      readonly local?: string;
      readonly multicastGroup?: string;
      readonly underlay?: string;
      readonly learning?: boolean;
      readonly ttl?: number;
    }
  | { readonly kind: 'dummy' };

export type LinkSpec = LinkKind & {
  readonly name: string;
  /** Create the link in this netns (path) rather than in the netns the batch runs in. */
  readonly netns?: string;
  readonly mtu?: number;
  /** The transmit queue length (the reference plugins' veth host ends have 0). */
  readonly txqlen?: number;
  readonly mac?: string;
  readonly up?: boolean;
  /** Bridge to enslave the new link to (in the batch's netns). */
  readonly bridge?: string;
  readonly group?: number;
};

export interface LinkInfo {
  readonly index: number;
  readonly name: string;
  readonly kind?: string;
  readonly mtu: number;
  readonly mac?: string;
  readonly up: boolean;
  readonly promisc: boolean;
  readonly masterIndex?: number;
  readonly linkIndex?: number;
  readonly group: number;
  /** A VXLAN device's VNI and UDP port. */
  readonly vxlan?: { readonly vni: number; readonly port: number };
}

/** A forwarding entry of a VXLAN device: frames to `mac` go to the VTEP at `dst` (all zeros: flooding). */
export interface FdbEntry {
  readonly mac: string;
  readonly dst: string;
  /** Set by hand (or Plexus), not learned. */
  readonly permanent: boolean;
}

export interface AddrInfo {
  readonly index: number;
  readonly family: 4 | 6;
  readonly address: string; // CIDR
  /** IPv6 duplicate address detection has not finished. */
  readonly tentative?: true;
  /** IPv6 duplicate address detection found the address in use. */
  readonly dadFailed?: true;
}

export interface RouteInfo {
  readonly family: 4 | 6;
  readonly dst: string; // CIDR, 0.0.0.0/0 for default
  readonly gw?: string;
  readonly oifIndex?: number;
  readonly table: number;
  readonly scope: number;
  readonly protocol: number;
}

export interface RouteSpec {
  readonly dst: string; // CIDR
  readonly gw?: string;
  readonly dev?: string;
  readonly metric?: number;
  /** Preferred source address (RTA_PREFSRC). */
  readonly src?: string;
  /** Default: universe with a gateway, link without. */
  readonly scope?: 'link' | 'host';
}

export interface TapSpec {
  readonly name: string;
  readonly owner?: number;
  readonly group?: number;
  readonly multiQueue?: boolean;
  readonly vnetHdr?: boolean;
  /** Frames read from the tap start with the packet-information header (no IFF_NO_PI). */
  readonly packetInfo?: boolean;
  readonly mtu?: number;
  readonly mac?: string;
  readonly up?: boolean;
}

export type KernelOp =
  | { readonly op: 'linkAdd'; readonly link: LinkSpec }
  | { readonly op: 'linkDel'; readonly name: string }
  | { readonly op: 'linkDelGroup'; readonly group: number }
  /** Opens an rtnetlink socket in the batch's netns and returns its descriptor, which the caller then owns. */
  | { readonly op: 'socketOpen' }
  /** Deletes links in one request, through a link group of their own (see delete-many.ts). */
  | { readonly op: 'linkDelMany'; readonly names: readonly string[]; readonly group: number }
  | {
      readonly op: 'linkSet';
      readonly name: string;
      readonly up?: boolean;
      readonly mtu?: number;
      readonly mac?: string;
      readonly bridge?: string | null;
      readonly promisc?: boolean;
      readonly hairpin?: boolean;
      readonly netns?: string;
      readonly newName?: string;
      readonly group?: number;
    }
  | { readonly op: 'linkGet'; readonly name: string }
  | { readonly op: 'linkList' }
  | {
      readonly op: 'addrAdd';
      readonly name: string;
      readonly address: string;
      readonly noDad?: boolean;
      readonly noPrefixRoute?: boolean;
    }
  | { readonly op: 'addrDel'; readonly name: string; readonly address: string }
  | { readonly op: 'addrList'; readonly name?: string }
  | { readonly op: 'routeAdd'; readonly route: RouteSpec }
  | { readonly op: 'routeDel'; readonly route: RouteSpec }
  | { readonly op: 'routeList'; readonly family?: 4 | 6 }
  | { readonly op: 'fdbAppend'; readonly dev: string; readonly mac: string; readonly dst: string }
  | { readonly op: 'fdbDel'; readonly dev: string; readonly mac: string; readonly dst: string }
  /** The entries of one device that name a remote (a VXLAN device's), learned and permanent. */
  | { readonly op: 'fdbList'; readonly dev: string }
  | { readonly op: 'tapAdd'; readonly tap: TapSpec }
  /** `key` with dots (net.ipv4.ip_forward) or, when it names an interface that may hold a dot, slashes. */
  | { readonly op: 'sysctlWrite'; readonly key: string; readonly value: string };

/**
 * Per-op options: `ignore` lists errno names that count as success (the op then answers null), e.g. EEXIST on
 * create, ENODEV on delete; `at` runs this one op in another netns than the batch's, so a whole attachment
 * (host side and pod side) costs one trip to the kernel worker.
 */
export type OpOptions = { readonly ignore?: readonly string[]; readonly at?: string };
export type BatchOp = KernelOp & OpOptions;

/** What each operation answers (null for those that only change something, and for a tolerated errno). */
export interface OpResults {
  readonly linkAdd: null;
  readonly linkDel: null;
  readonly linkDelGroup: null;
  readonly socketOpen: number;
  readonly linkDelMany: DeleteManyOutcome;
  readonly linkSet: null;
  readonly linkGet: LinkInfo | null;
  readonly linkList: LinkInfo[];
  readonly addrAdd: null;
  readonly addrDel: null;
  readonly addrList: AddrInfo[];
  readonly routeAdd: null;
  readonly routeDel: null;
  readonly routeList: RouteInfo[];
  readonly fdbAppend: null;
  readonly fdbDel: null;
  readonly fdbList: FdbEntry[];
  readonly tapAdd: null;
  readonly sysctlWrite: null;
}

/** The answer to one op; with `ignore`, null when the tolerated errno happened. */
export type ResultOf<O extends BatchOp> = O extends { readonly ignore: readonly string[] }
  ? OpResults[O['op']] | null
  : OpResults[O['op']];
/** The answers to a batch, position by position. */
export type ResultsOf<Ops extends readonly BatchOp[]> = {
  -readonly [K in keyof Ops]: Ops[K] extends BatchOp ? ResultOf<Ops[K]> : never;
};

/** Links that linkDelMany could not delete, each with its failure. */
export interface DeleteManyOutcome {
  readonly failed: readonly { readonly name: string; readonly failure: KernelFailure }[];
}

/** A failure reported by the kernel, with the errno name and the extended-ack text when the kernel gave one. */
export interface KernelFailure {
  readonly op: string;
  readonly target: string;
  readonly errno: number;
  readonly errnoName: string;
  readonly message: string; // strerror-like text
  readonly extack?: string;
}
