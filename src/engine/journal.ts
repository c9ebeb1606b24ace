/**
 * The attachment journal: one append-only file per attachment (container ID + interface name). Each undo step
 * is appended and synced before the driver makes the change it undoes, so after any crash the daemon knows
 * exactly what may exist. A record is committed with the result, marked when deletion starts, and removed
 * when everything it recorded has been undone.
 *
 * Format v1: every line carries `v`, and each undo step the network attachment (network and pod interface) it
 * belongs to, so one network can be detached from a running pod (a `detached` line retires its steps), and a `change`
 * line opens a change of a running pod's networks (hot-plug), an `added` line says its additions are complete, and the
 * next `committed` line closes it. Lines
 * without `v` are v0, as plexusd wrote them before: read as they are, their steps belong to no attachment. A line
 * of a newer version makes the record unreadable: an older daemon (a rollback) must not undo half of what it does
 * not understand.
 */
import { closeSync, fdatasync, openSync, write, writeSync } from 'node:fs';
import { mkdir, readdir, readFile, rm } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { CniResult } from '../cni/types';
import type { PodIdentity, UndoStep } from '../drivers/driver';
import type { NetworkStatusEntry } from '../networks/status';

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

export interface TimedEvent {
  readonly at: string;
  readonly what: string;
  readonly ms?: number;
}

/** What one network of a pod became: kept with the committed record for CHECK, status and plexusctl. */
export interface NetworkAttachment {
  readonly network: string;
  readonly ifname: string;
  readonly driver: string;
  readonly isDefault: boolean;
  readonly result: CniResult;
  /** For delegated networks: the plugin invocations (exact bytes), for CHECK. */
  readonly delegated?: readonly Extract<UndoStep, { kind: 'delegateDel' }>[];
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
export interface AttachmentKey {
  readonly network: string;
  readonly ifname: string;
}

/** The journal format this daemon writes, and the newest it reads. */
export const JOURNAL_VERSION = 1;

export interface AttachmentRecord {
  readonly meta: AttachmentMeta;
  /** The steps still to undo, in the order they were recorded. */
  readonly undo: readonly UndoStep[];
  /** For each step of `undo`, the attachment it belongs to; undefined for steps written in format v0. */
  readonly undoOwners: readonly (AttachmentKey | undefined)[];
  /** Set when a line is of a newer format than this daemon reads: the record must not be undone by this daemon. */
  readonly unreadable?: string;
  readonly events: readonly TimedEvent[];
  readonly result?: CniResult;
  readonly cniVersion?: string;
  readonly details?: CommitDetails;
  readonly deleting: boolean;
  /** A change of the running pod's networks (hot-plug) begun and not committed: what it adds and removes. */
  readonly changing?: PodNetworksChange;
}

/** The attachments one change of a running pod's networks adds and removes. */
export interface PodNetworksChange {
  readonly add: readonly AttachmentKey[];
  readonly remove: readonly AttachmentKey[];
  /** Set once every addition is complete (what they became): from then on the change is finished, not undone. */
  readonly added?: readonly NetworkAttachment[];
}

type Line = { v?: number } & (
  | { t: 'begin'; meta: AttachmentMeta }
  | { t: 'undo'; step: UndoStep; a?: AttachmentKey; at: string }
  | { t: 'event'; what: string; ms?: number; at: string }
  | { t: 'committed'; result: CniResult; cniVersion: string; details?: CommitDetails; at: string }
  | { t: 'deleting'; at: string }
  | { t: 'detached'; a: AttachmentKey; at: string }
  | { t: 'change'; add: AttachmentKey[]; remove: AttachmentKey[]; at: string }
  | { t: 'added'; attachments: NetworkAttachment[]; at: string }
);

const sameAttachment = (a: AttachmentKey | undefined, b: AttachmentKey): boolean => a !== undefined && a.network === b.network && a.ifname === b.ifname;

/** The undo steps a record holds for one of its attachments, in recorded order (none for v0 steps, which name none). */
export const stepsOf = (record: AttachmentRecord, attachment: AttachmentKey): UndoStep[] => record.undo.filter((_, i) => sameAttachment(record.undoOwners[i], attachment));

// "@" cannot occur in a container ID and is escaped in the interface name, so names never collide.
const fileName = (containerId: string, ifname: string): string => `${containerId}@${encodeURIComponent(ifname)}.jsonl`;

/** Replays a record's lines; a torn last line (crash mid-write) is ignored. */
export function parseRecord(text: string): AttachmentRecord | undefined {
  let meta: AttachmentMeta | undefined;
  let undo: UndoStep[] = [];
  let undoOwners: (AttachmentKey | undefined)[] = [];
  let unreadable: string | undefined;
  const events: TimedEvent[] = [];
  let result: CniResult | undefined;
  let cniVersion: string | undefined;
  let details: CommitDetails | undefined;
  let deleting = false;
  let changing: PodNetworksChange | undefined;
  for (const [n, raw] of text.split('\n').entries()) {
    if (!raw) continue;
    let line: Line;
    try {
      line = JSON.parse(raw) as Line;
    } catch {
      continue;
    }
    if ((line.v ?? 0) > JOURNAL_VERSION) {
      unreadable ??= `line ${n + 1} is journal format v${line.v}; this plexusd reads up to v${JOURNAL_VERSION}`;
      continue;
    }
    switch (line.t) {
      case 'begin':
        meta = line.meta;
        events.push({ at: line.meta.startedAt, what: 'begin' });
        break;
      case 'undo':
        undo.push(line.step);
        undoOwners.push(line.a);
        break;
      case 'detached': {
        const gone = line.a;
        const keep = undoOwners.map((owner) => !sameAttachment(owner, gone));
        undo = undo.filter((_, i) => keep[i]);
        undoOwners = undoOwners.filter((_, i) => keep[i]);
        events.push({ at: line.at, what: `detached ${gone.network} as ${gone.ifname}` });
        break;
      }
      case 'event':
        events.push({ at: line.at, what: line.what, ...(line.ms !== undefined ? { ms: line.ms } : {}) });
        break;
      case 'change':
        changing = { add: line.add, remove: line.remove };
        events.push({ at: line.at, what: `change: add ${line.add.map((a) => `${a.network} as ${a.ifname}`).join(', ') || 'nothing'}; remove ${line.remove.map((a) => `${a.network} as ${a.ifname}`).join(', ') || 'nothing'}` });
        break;
      case 'added':
        if (changing) changing = { ...changing, added: line.attachments };
        events.push({ at: line.at, what: `added ${line.attachments.map((a) => `${a.network} as ${a.ifname}`).join(', ')}` });
        break;
      case 'committed':
        changing = undefined;
        result = line.result;
        cniVersion = line.cniVersion;
        details = line.details;
        events.push({ at: line.at, what: 'committed' });
        break;
      case 'deleting':
        deleting = true;
        events.push({ at: line.at, what: 'deleting' });
        break;
      default:
        unreadable ??= `line ${n + 1} has an unknown type ${JSON.stringify((line as { t?: unknown }).t)}`;
    }
  }
  return meta
    ? { meta, undo, undoOwners, ...(unreadable ? { unreadable } : {}), events, ...(result ? { result } : {}), ...(cniVersion ? { cniVersion } : {}), ...(details ? { details } : {}), deleting, ...(changing ? { changing } : {}) }
    : undefined;
}

/**
 * An open record being written by one transaction. Each line is written before the change it describes is
 * made. With `sync`, lines are also fdatasync'd (async, off the event loop); without it a write is a
 * microsecond syscall done inline, and the page cache keeps it through any crash of the daemon.
 */
export class JournalEntry {
  constructor(
    private readonly fd: number,
    private readonly sync: boolean,
  ) {}

  private async append(line: Line, durable = true): Promise<void> {
    const text = `${JSON.stringify({ v: JOURNAL_VERSION, ...line })}\n`;
    if (!this.sync) {
      writeSync(this.fd, text);
      return;
    }
    await new Promise<void>((resolve, reject) => write(this.fd, text, (e) => (e ? reject(e) : resolve())));
    if (durable) await new Promise<void>((resolve, reject) => fdatasync(this.fd, (e) => (e ? reject(e) : resolve())));
  }

  begin(meta: AttachmentMeta): Promise<void> {
    return this.append({ t: 'begin', meta });
  }

  /** Records how to undo the change about to be made for `attachment`. */
  record(step: UndoStep, attachment: AttachmentKey): Promise<void> {
    return this.append({ t: 'undo', step, a: attachment, at: new Date().toISOString() });
  }

  /** Every step of `attachment` has been undone: the record no longer holds them. */
  detached(attachment: AttachmentKey): Promise<void> {
    return this.append({ t: 'detached', a: attachment, at: new Date().toISOString() });
  }

  event(what: string, ms?: number): Promise<void> {
    // Timings are informational: the next durable line syncs them along.
    return this.append({ t: 'event', what, ...(ms !== undefined ? { ms: Math.round(ms * 1000) / 1000 } : {}), at: new Date().toISOString() }, false);
  }

  /** A change of a running pod's networks starts: until the next commit, recovery undoes what it added. */
  change(change: PodNetworksChange): Promise<void> {
    return this.append({ t: 'change', add: [...change.add], remove: [...change.remove], at: new Date().toISOString() });
  }

  /** Every addition of the change under way is complete: recovery finishes the change from here, not undoes it. */
  added(attachments: readonly NetworkAttachment[]): Promise<void> {
    return this.append({ t: 'added', attachments: [...attachments], at: new Date().toISOString() });
  }

  commit(result: CniResult, cniVersion: string, details?: CommitDetails): Promise<void> {
    return this.append({ t: 'committed', result, cniVersion, ...(details ? { details } : {}), at: new Date().toISOString() });
  }

  markDeleting(): Promise<void> {
    return this.append({ t: 'deleting', at: new Date().toISOString() });
  }

  async close(): Promise<void> {
    closeSync(this.fd);
  }
}

export class Journal {
  private constructor(
    readonly dir: string,
    private readonly sync: boolean,
  ) {}

  static async open(dir: string, sync: boolean): Promise<Journal> {
    await mkdir(dir, { recursive: true, mode: 0o700 });
    return new Journal(dir, sync);
  }

  /** Starts a new record; fails if one exists for the same attachment (callers check first). */
  async begin(meta: AttachmentMeta): Promise<JournalEntry> {
    const fd = openSync(join(this.dir, fileName(meta.containerId, meta.ifname)), 'wx', 0o600);
    const entry = new JournalEntry(fd, this.sync);
    try {
      await entry.begin(meta);
    } catch (e) {
      await entry.close();
      throw e;
    }
    return entry;
  }

  /** Reopens an existing record to append to it (deletion, recovery). */
  async reopen(containerId: string, ifname: string): Promise<JournalEntry> {
    return new JournalEntry(openSync(join(this.dir, fileName(containerId, ifname)), 'a', 0o600), this.sync);
  }

  async load(containerId: string, ifname: string): Promise<AttachmentRecord | undefined> {
    const path = join(this.dir, fileName(containerId, ifname));
    // Most ADDs find no record: a stat is far cheaper than a failed asynchronous read.
    if (!existsSync(path)) return undefined;
    try {
      return parseRecord(await readFile(path, 'utf8'));
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
      throw e;
    }
  }

  list(): Promise<AttachmentRecord[]> {
    return this.read(() => true, true);
  }

  /** The records of one container (every interface the runtime attached for it). */
  listContainer(containerId: string): Promise<AttachmentRecord[]> {
    return this.read((name) => name.startsWith(`${containerId}@`), false);
  }

  /**
   * The records whose file names match. With `dropEmpty`, a file without even a begin line (a crash between open and
   * the first write) is removed.
   */
  private async read(match: (name: string) => boolean, dropEmpty: boolean): Promise<AttachmentRecord[]> {
    const out: AttachmentRecord[] = [];
    for (const name of (await readdir(this.dir)).filter((n) => n.endsWith('.jsonl') && match(n)).sort()) {
      try {
        const rec = parseRecord(await readFile(join(this.dir, name), 'utf8'));
        if (rec) out.push(rec);
        else if (dropEmpty) await rm(join(this.dir, name), { force: true });
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
      }
    }
    return out;
  }

  async remove(containerId: string, ifname: string): Promise<void> {
    await rm(join(this.dir, fileName(containerId, ifname)), { force: true });
  }
}
