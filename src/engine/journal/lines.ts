/**
 * The journal's lines as they are on disk, validated at read: a record file is input like any other (a disk that
 * filled up, a hand edit, a rollback to an older plexusd), so each line is checked against the fields the engine
 * and the undo code will use before any of it is believed. Objects are loose: a field a later v1 daemon adds is kept.
 */
import { z } from 'zod';
import type { CniResult, PodIdentity } from '../../cni/types';
import type { UndoStep } from '../../drivers/driver';
import { LEGACY_STEP_KINDS, upgradeStep } from '../../drivers/undo';
import type { NetworkStatusEntry } from '../../networks/status';
import { firstIssue } from '../../common/schema-issues';
import { errorMessage } from '../../common/error-message';

export interface AttachmentMeta {
  readonly containerId: string;
  readonly ifname: string;
  readonly netns: string;
  readonly pod: PodIdentity;
  /** The CNI network name the runtime used (GC is per runtime network). */
  readonly cniNetwork: string;
  /** The network definitions attached, by key ("namespace/name"). */
  readonly networks: readonly string[];
  readonly startedAt: string;
}

/** What one network of a pod became: kept with the committed record for CHECK, status and plexusctl. */
export interface NetworkAttachment {
  readonly network: string;
  readonly ifname: string;
  readonly driver: string;
  readonly isDefault: boolean;
  readonly result: CniResult;
  /** In records of a v0 plexusd (whose steps carry no attachment): a delegated network's plugin invocations, for CHECK. */
  readonly delegated?: readonly UndoStep[];
  /** The device plugin's device-info for the attachment's kubelet device, as read at ADD (network-status shows it). */
  readonly deviceInfo?: Readonly<Record<string, unknown>>;
  /** The device the kubelet allocated the pod that this attachment uses (a network added later must take another). */
  readonly kubeletDevice?: { readonly resourceName: string; readonly deviceID: string };
}

/** Everything a committed transaction produced besides the CNI result. */
export interface CommitDetails {
  readonly attachments: readonly NetworkAttachment[];
  readonly networkStatus: readonly NetworkStatusEntry[];
}

/** One network of a pod: its network definition (key) and its interface in the pod. */
export interface AttachmentTag {
  readonly network: string;
  readonly ifname: string;
}

export type Line = { v?: number } & (
  | { t: 'begin'; meta: AttachmentMeta }
  | { t: 'undo'; step: UndoStep; a?: AttachmentTag; at: string }
  | { t: 'event'; what: string; ms?: number; at: string }
  | { t: 'committed'; result: CniResult; cniVersion: string; details?: CommitDetails; at: string }
  | { t: 'deleting'; at: string }
  | { t: 'detached'; a: AttachmentTag; at: string }
  | { t: 'change'; add: AttachmentTag[]; remove: AttachmentTag[]; at: string }
  | { t: 'added'; attachments: NetworkAttachment[]; at: string }
);

const text = z.string();
const name = z.string().min(1);
const key = z.looseObject({ network: name, ifname: name });
const route = z.looseObject({ dst: name, gw: text.optional() });

/**
 * A step: a generic kind, or a driver's, whose data its driver reads when it undoes it. Steps an older plexusd wrote in
 * a driver's own shape are read as that driver's (upgradeStep in drivers/undo.ts).
 */
const step = z.discriminatedUnion('kind', [
  z.looseObject({ kind: z.literal('deleteLink'), netns: text.optional(), name }),
  z.looseObject({ kind: z.literal('releaseIpam'), network: name, containerId: name, ifname: name }),
  z.looseObject({ kind: z.literal('deleteRoute'), netns: text.optional(), route }),
  z.looseObject({
    kind: z.literal('driver'),
    driver: name,
    step: name,
    v: z.number().int().nonnegative(),
    data: z.looseObject({}),
  }),
  ...LEGACY_STEP_KINDS.map((kind) => z.looseObject({ kind: z.literal(kind) })),
]);

const result = z.looseObject({
  interfaces: z.array(z.looseObject({ name: text })),
  ips: z.array(z.looseObject({ address: name, interface: z.number().optional() })),
  routes: z.array(route),
});

const attachment = z.looseObject({
  network: name,
  ifname: name,
  driver: text,
  isDefault: z.boolean(),
  result,
  delegated: z.array(step).optional(),
});

const meta = z.looseObject({
  containerId: name,
  ifname: name,
  netns: text,
  pod: z.looseObject({}),
  cniNetwork: text,
  networks: z.array(text),
  startedAt: text,
});

const version = z.number().int().nonnegative().optional();

/** The line types and their fields, at the versions this daemon reads (v0 lines have no `v`). */
const LineSchema = z.discriminatedUnion('t', [
  z.looseObject({ v: version, t: z.literal('begin'), meta }),
  z.looseObject({ v: version, t: z.literal('undo'), step, a: key.optional() }),
  z.looseObject({ v: version, t: z.literal('event'), what: text, ms: z.number().optional(), at: text }),
  z.looseObject({
    v: version,
    t: z.literal('committed'),
    result,
    cniVersion: text,
    at: text,
    details: z.looseObject({ attachments: z.array(attachment), networkStatus: z.array(z.looseObject({})) }).optional(),
  }),
  z.looseObject({ v: version, t: z.literal('deleting'), at: text }),
  z.looseObject({ v: version, t: z.literal('detached'), a: key, at: text }),
  z.looseObject({ v: version, t: z.literal('change'), add: z.array(key), remove: z.array(key), at: text }),
  z.looseObject({ v: version, t: z.literal('added'), attachments: z.array(attachment), at: text }),
]);

/** The journal format this daemon writes, and the newest it reads. */
export const JOURNAL_VERSION = 1;

/** One line read: usable, or why not (the words an operator reads next to the file and line number). */
export type ReadLine = { readonly ok: true; readonly line: Line } | { readonly ok: false; readonly why: string };

const versionOf = (value: unknown): unknown =>
  value !== null && typeof value === 'object' && 'v' in value ? value.v : undefined;

/** Parses and validates one complete line. */
export function readLine(raw: string): ReadLine {
  let value: unknown;
  try {
    value = JSON.parse(raw);
  } catch (e) {
    return { ok: false, why: `not JSON (${errorMessage(e)})` };
  }
  const v = versionOf(value);
  if (typeof v === 'number' && v > JOURNAL_VERSION) {
    return { ok: false, why: `journal format v${v}; this plexusd reads up to v${JOURNAL_VERSION}` };
  }
  const parsed = LineSchema.safeParse(value);
  // The schema checked every field the reader uses; the value keeps the exact shape that was written.
  return parsed.success
    ? { ok: true, line: upgradeLine(value as Line) }
    : { ok: false, why: firstIssue(parsed.error, 'the line') };
}

/** A line with the driver steps an older plexusd wrote in their own shapes read as today's (drivers/undo.ts). */
function upgradeLine(line: Line): Line {
  const attachments = (list: readonly NetworkAttachment[]): NetworkAttachment[] =>
    list.map((a) => (a.delegated ? { ...a, delegated: a.delegated.map(upgradeStep) } : a));
  switch (line.t) {
    case 'undo': {
      const step = upgradeStep(line.step);
      return step === line.step ? line : { ...line, step };
    }
    case 'committed':
      return line.details
        ? { ...line, details: { ...line.details, attachments: attachments(line.details.attachments) } }
        : line;
    case 'added':
      return { ...line, attachments: attachments(line.attachments) };
    default:
      return line;
  }
}
