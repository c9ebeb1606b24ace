/**
 * One attachment's record, replayed from its lines. A line this daemon cannot use makes the record unreadable (never
 * undone, holding its container's leases), except a last line without its newline: a crash in the middle of its
 * append, whose change was never made, ignored as it always was.
 */
import type { CniResult } from '../../cni/types';
import { CniCode, CniError } from '../../cni/errors';
import type { UndoStep } from '../../drivers/driver';
import { readLine, type AttachmentTag, type AttachmentMeta, type CommitDetails, type NetworkAttachment } from './lines';
import { definedFields } from '../../common/defined-fields';

export interface TimedEvent {
  readonly at: string;
  readonly what: string;
  readonly ms?: number;
}

/** The attachments one change of a running pod's networks adds and removes. */
export interface PodNetworksChange {
  readonly add: readonly AttachmentTag[];
  readonly remove: readonly AttachmentTag[];
  /** Set once every addition is complete (what they became): from then on the change is finished, not undone. */
  readonly added?: readonly NetworkAttachment[];
}

export interface AttachmentRecord {
  readonly meta: AttachmentMeta;
  /** The steps still to undo, in the order they were recorded. */
  readonly undo: readonly UndoStep[];
  /** For each step of `undo`, the attachment it belongs to; undefined for steps written in format v0. */
  readonly undoOwners: readonly (AttachmentTag | undefined)[];
  /**
   * Set when a line cannot be used (a newer format, not JSON, a field missing, cut short): the file and line and why.
   * Such a record is never undone by this daemon, and holds every lease of its container.
   */
  readonly unreadable?: string;
  /** A last line cut short by a crash in the middle of its append (its 1-based number): ignored. */
  readonly tornLine?: number;
  readonly events: readonly TimedEvent[];
  readonly result?: CniResult;
  readonly cniVersion?: string;
  readonly details?: CommitDetails;
  readonly deleting: boolean;
  /** A change of the running pod's networks (hot-plug) begun and not committed: what it adds and removes. */
  readonly changing?: PodNetworksChange;
}

const sameAttachment = (a: AttachmentTag | undefined, b: AttachmentTag): boolean =>
  a !== undefined && a.network === b.network && a.ifname === b.ifname;

/** The undo steps a record holds for one of its attachments, in recorded order (none for v0 steps, which name none). */
export const attachmentSteps = (record: AttachmentRecord, attachment: AttachmentTag): UndoStep[] =>
  record.undo.filter((_, i) => sameAttachment(record.undoOwners[i], attachment));

const keys = (list: readonly AttachmentTag[]): string => list.map((a) => `${a.network} as ${a.ifname}`).join(', ');

/** A record's state, built line by line. */
class Replay {
  meta: AttachmentMeta | undefined;
  undo: UndoStep[] = [];
  undoOwners: (AttachmentTag | undefined)[] = [];
  readonly events: TimedEvent[] = [];
  result: CniResult | undefined;
  cniVersion: string | undefined;
  details: CommitDetails | undefined;
  deleting = false;
  changing: PodNetworksChange | undefined;

  apply(line: Extract<ReturnType<typeof readLine>, { ok: true }>['line']): void {
    switch (line.t) {
      case 'begin':
        this.meta ??= line.meta;
        this.events.push({ at: line.meta.startedAt, what: 'begin' });
        break;
      case 'undo':
        this.undo.push(line.step);
        this.undoOwners.push(line.a);
        break;
      case 'detached': {
        const keep = this.undoOwners.map((owner) => !sameAttachment(owner, line.a));
        this.undo = this.undo.filter((_, i) => keep[i]);
        this.undoOwners = this.undoOwners.filter((_, i) => keep[i]);
        this.events.push({ at: line.at, what: `detached ${line.a.network} as ${line.a.ifname}` });
        break;
      }
      case 'event':
        this.events.push({ at: line.at, what: line.what, ...definedFields({ ms: line.ms }) });
        break;
      case 'change':
        this.changing = { add: line.add, remove: line.remove };
        this.events.push({
          at: line.at,
          what: `change: add ${keys(line.add) || 'nothing'}; remove ${keys(line.remove) || 'nothing'}`,
        });
        break;
      case 'added':
        if (this.changing) this.changing = { ...this.changing, added: line.attachments };
        this.events.push({ at: line.at, what: `added ${keys(line.attachments)}` });
        break;
      case 'committed':
        this.changing = undefined;
        this.result = line.result;
        this.cniVersion = line.cniVersion;
        this.details = line.details;
        this.events.push({ at: line.at, what: 'committed' });
        break;
      case 'deleting':
        this.deleting = true;
        this.events.push({ at: line.at, what: 'deleting' });
        break;
    }
  }
}

/** What a record file's text holds. */
export type ReplayedText =
  /** Nothing usable at all: empty, or only a first line cut short (a crash between creating the file and writing it). */
  | { readonly kind: 'empty' }
  /** Lines without a usable begin line: whose record it is, only the file name can tell. */
  | { readonly kind: 'headless'; readonly unreadable: string }
  | { readonly kind: 'record'; readonly record: AttachmentRecord };

/** Replays a record's text line by line; `where` prefixes the reason a line cannot be used (the file's path). */
export function replayRecord(text: string, where = ''): ReplayedText {
  const state = new Replay();
  const lines = text.split('\n');
  // Every complete line ends with a newline: what follows the last one is a line whose append was cut short.
  const tail = lines.pop() ?? '';
  let unreadable: string | undefined;
  let tornLine: number | undefined;
  const refuse = (n: number, why: string): void => {
    unreadable ??= `${where ? `${where}, ` : ''}line ${n}: ${why}`;
  };
  for (const [i, raw] of lines.entries()) {
    if (!raw.trim()) continue;
    const read = readLine(raw);
    if (read.ok) state.apply(read.line);
    else refuse(i + 1, read.why);
  }
  if (tail.trim()) {
    const read = readLine(tail);
    // A complete line whose newline alone is missing is used; a line cut short (never valid JSON) is ignored.
    if (read.ok) state.apply(read.line);
    else if (read.why.startsWith('not JSON')) tornLine = lines.length + 1;
    else refuse(lines.length + 1, read.why);
  }
  const meta = state.meta;
  if (!meta) {
    if (unreadable) return { kind: 'headless', unreadable };
    const anyLine = lines.some((l) => l.trim());
    return anyLine
      ? { kind: 'headless', unreadable: `${where ? `${where}, ` : ''}line 1: no begin line` }
      : { kind: 'empty' };
  }
  const { undo, undoOwners, events, result, cniVersion, details, deleting, changing } = state;
  return {
    kind: 'record',
    record: {
      meta,
      undo,
      undoOwners,
      events,
      deleting,
      ...definedFields({
        unreadable: unreadable || undefined,
        tornLine: tornLine || undefined,
        result,
        cniVersion: cniVersion || undefined,
        details,
        changing,
      }),
    },
  };
}

/** Replays a record's lines (see replayRecord); undefined when the text has no usable begin line. */
export function parseRecord(text: string): AttachmentRecord | undefined {
  const replayed = replayRecord(text);
  return replayed.kind === 'record' ? replayed.record : undefined;
}

/** A record known only by its file name (its lines could not be used): it holds its container, nothing is undone. */
export function headlessRecord(containerId: string, ifname: string, unreadable: string): AttachmentRecord {
  const meta = { containerId, ifname, netns: '', pod: {}, cniNetwork: '', networks: [], startedAt: '' };
  return { meta, undo: [], undoOwners: [], unreadable, events: [], deleting: false };
}

/** The error of a verb that would have to undo or change a record this daemon cannot read. */
export const unreadableRecordError = (record: AttachmentRecord): CniError =>
  new CniError(
    CniCode.Internal,
    `the journal record of ${record.meta.containerId}/${record.meta.ifname} cannot be used, so plexusd does not undo it: ${record.unreadable}`,
    `the container's addresses stay leased; if a newer plexusd wrote the record, run that version; otherwise remove its ` +
      'links by hand, then the record file, and run plexusctl gc',
  );
