/**
 * What the daemon's API answers, as JSON: the contract between plexusd and plexusctl (and any script that reads
 * `plexusctl -o json`). The engine's own types may change; these change only on purpose, and server.ts maps to them.
 */
import { definedFields } from '../common/defined-fields';
import type { CniResult } from '../cni/types';
import type { SweepReport } from '../engine/engine';
import type { AdoptedSandbox } from '../engine/foreign-sandboxes';
import type { AttachmentRecord } from '../engine/journal';

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
  readonly details?: AttachmentRecord['details'];
  /** How to undo what is made, step by step, as journaled. */
  readonly undo: AttachmentRecord['undo'];
  /** Set when the record was written by a newer plexusd than this one. */
  readonly unreadable?: string;
}

/** POST /v1/gc: what was (or, dry, would be) removed and released. */
export type WireGcReport = SweepReport;

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
export type WireAdoptedSandbox = AdoptedSandbox;

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
