/**
 * What the daemon's API answers, as JSON: the contract between plexusd and plexusctl (and any script that reads
 * `plexusctl -o json`). The engine's own types may change; these are defined here, change only on purpose, and the
 * to* functions map the engine's values to them (a field the engine adds does not reach the wire unless mapped).
 */
import { definedFields } from '../common/defined-fields';
import type { CniResult } from '../cni/types';
import type { SweepReport } from '../engine/engine';
import type { AdoptedSandbox } from '../engine/foreign-sandboxes';
import type { AttachmentRecord } from '../engine/journal';

/** One network of an attachment as committed: its driver and result (`details.attachments`). */
export interface WireNetworkAttachment {
  readonly network: string;
  readonly ifname: string;
  readonly driver: string;
  readonly isDefault: boolean;
  readonly result: CniResult;
  readonly delegated?: readonly WireUndoStep[];
  readonly deviceInfo?: Readonly<Record<string, unknown>>;
  readonly kubeletDevice?: { readonly resourceName: string; readonly deviceID: string };
}

/** One journaled undo step: its kind, then the fields of that kind, as journaled (docs/architecture.md, "The journal"). */
export interface WireUndoStep {
  readonly kind: string;
}

/** One entry of the pod's network-status annotation (k8s.v1.cni.cncf.io/network-status). */
export interface WireNetworkStatus {
  readonly name: string;
  readonly interface: string;
  readonly ips?: readonly string[];
  readonly mac?: string;
  readonly mtu?: number;
  readonly default?: true;
  readonly dns: Readonly<Record<string, unknown>>;
  readonly 'device-info'?: Readonly<Record<string, unknown>>;
  readonly gateway?: readonly string[];
}

/** GET /v1/attachments: one per journal record (a container and the runtime's interface). */
export interface WireAttachment {
  readonly meta: {
    readonly containerId: string;
    readonly ifname: string;
    readonly netns: string;
    readonly pod: { readonly namespace?: string; readonly name?: string; readonly uid?: string };
    readonly cniNetwork: string;
    readonly networks: readonly string[];
    readonly startedAt: string;
  };
  readonly state: 'adding' | 'attached' | 'deleting';
  readonly events: readonly { readonly at: string; readonly what: string; readonly ms?: number }[];
  readonly result?: CniResult;
  readonly cniVersion?: string;
  /** Per network: driver and result; the network-status entries. */
  readonly details?: {
    readonly attachments: readonly WireNetworkAttachment[];
    readonly networkStatus: readonly WireNetworkStatus[];
  };
  /** How to undo what is made, step by step, as journaled. */
  readonly undo: readonly WireUndoStep[];
  /** Set when the record was written by a newer plexusd than this one. */
  readonly unreadable?: string;
}

/** An attachment a GC removed (or, dry, would remove), and why. */
export interface WireSweptAttachment {
  readonly containerId: string;
  readonly ifname: string;
  readonly reason: string;
}

/** An address lease no attachment holds. */
export interface WireLease {
  readonly network: string;
  readonly address: string;
  readonly gateway?: string;
  readonly containerId: string;
  readonly ifname: string;
  readonly owner?: {
    readonly network?: string;
    readonly podUid?: string;
    readonly pod?: string;
    readonly claim?: string;
  };
  readonly hostLocalDir?: string;
}

/** POST /v1/gc: what was (or, dry, would be) removed and released. */
export interface WireGcReport {
  readonly removed: readonly WireSweptAttachment[];
  readonly kept: number;
  readonly failures: readonly (WireSweptAttachment & { readonly error: string })[];
  /** Leases no attachment holds: released, or with dryRun, those a GC would release. */
  readonly leases: readonly WireLease[];
  readonly leasesReleased: number;
  readonly dryRun: boolean;
}

/** The engine's report as it is: the compiler holds its shape to this one. */
export const toWireGcReport = (report: SweepReport): WireGcReport => report;

export function toWireAttachment(r: AttachmentRecord): WireAttachment {
  return {
    meta: r.meta,
    state: r.deleting ? 'deleting' : r.result ? 'attached' : 'adding',
    events: r.events,
    ...definedFields({ result: r.result, cniVersion: r.cniVersion || undefined, details: r.details }),
    undo: r.undo,
    ...definedFields({ unreadable: r.unreadable || undefined }),
  };
}

/** A sandbox another plugin made (Multus's) that plexusd tears down as it would: GET /v1/adopted. */
export interface WireAdoptedSandbox {
  readonly containerId: string;
  /** Who made it (e.g. "multus"). */
  readonly maker: string;
  /** Its networks, in the order they were attached, with the interface each got and its addresses. */
  readonly networks: readonly { readonly name: string; readonly ifname: string; readonly ips?: readonly string[] }[];
  readonly pod?: { readonly namespace: string; readonly name: string; readonly uid?: string };
  readonly netns?: string;
}

/** The engine's sandbox as it is: the compiler holds its shape to this one. */
export const toWireAdoptedSandbox = (sandbox: AdoptedSandbox): WireAdoptedSandbox => sandbox;

/**
 * An adopted sandbox as `plexusctl attachments -o json` lists it after Plexus's own attachments: `meta` as theirs
 * (the runtime's interface is its first network's), `state` "adopted", and each network's interface and addresses.
 */
export interface WireAdoptedAttachment {
  readonly meta: {
    readonly containerId: string;
    readonly ifname: string;
    readonly netns?: string;
    readonly pod: { readonly namespace?: string; readonly name?: string; readonly uid?: string };
    readonly networks: readonly string[];
  };
  readonly state: 'adopted';
  /** Who made it (e.g. "multus"). */
  readonly maker: string;
  readonly interfaces: readonly {
    readonly network: string;
    readonly ifname: string;
    readonly ips: readonly string[];
  }[];
}

export function toWireAdoptedAttachment(s: WireAdoptedSandbox): WireAdoptedAttachment {
  return {
    meta: {
      containerId: s.containerId,
      ifname: s.networks[0]?.ifname ?? '',
      ...definedFields({ netns: s.netns }),
      pod: s.pod ?? {},
      networks: s.networks.map((n) => n.name),
    },
    state: 'adopted',
    maker: s.maker,
    interfaces: s.networks.map((n) => ({ network: n.name, ifname: n.ifname, ips: n.ips ?? [] })),
  };
}
