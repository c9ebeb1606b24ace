/**
 * The attachment journal: one append-only file per attachment (container ID + interface name). Each undo step
 * is appended and synced before the driver makes the change it undoes, so after any crash the daemon knows
 * exactly what may exist. A record is committed with the result, marked when deletion starts, and removed
 * when everything it recorded has been undone.
 *
 * Format v1: every line carries `v`, and each undo step the network attachment (network and pod interface) it
 * belongs to, so one network can be detached from a running pod (a `detached` line retires its steps), and a `change`
 * line opens a change of a running pod's networks (hot-plug), an `added` line says its additions are complete, and the
 * next `committed` line closes it. Lines without `v` are v0, as plexusd wrote them before: read as they are, their
 * steps belong to no attachment.
 *
 * What is on disk is not trusted (journal-lines.ts validates each line): a record with a line this daemon cannot use
 * (newer format, garbage, a missing field, cut short in the middle) is unreadable: it is never undone, and it holds
 * every lease of its container. Only the last line may be cut short, by a crash in the middle of its append: that
 * line was never complete, so the change it announced was never made, and it is ignored.
 */
import { closeSync, constants, fdatasync, fstatSync, ftruncateSync, openSync, readSync, writeSync } from 'node:fs';
import { lstat, mkdir, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { CniResult } from '../cni/types';
import type { UndoStep } from '../drivers/driver';
import { journalIoError } from './journal-errors';
import { JOURNAL_VERSION, readLine, type Line } from './journal-lines';
import type { AttachmentKey, AttachmentMeta, CommitDetails, NetworkAttachment } from './journal-lines';
import { headlessRecord, replayRecord, type AttachmentRecord, type PodNetworksChange } from './journal-record';
import { LeaseHolders } from './lease-holders';

export { JOURNAL_VERSION, type AttachmentKey, type AttachmentMeta, type CommitDetails, type NetworkAttachment } from './journal-lines';
export { parseRecord, stepsOf, unreadableRecordError, type AttachmentRecord, type PodNetworksChange, type TimedEvent } from './journal-record';

// "@" cannot occur in a container ID and is escaped in the interface name, so names never collide.
const fileName = (containerId: string, ifname: string): string => `${containerId}@${encodeURIComponent(ifname)}.jsonl`;

/** The container and interface a record's file name says it is for ('' when the name says nothing). */
function nameParts(name: string): { containerId: string; ifname: string } {
  const base = name.slice(0, -'.jsonl'.length);
  const at = base.indexOf('@');
  if (at <= 0) return { containerId: '', ifname: '' };
  try {
    return { containerId: base.slice(0, at), ifname: decodeURIComponent(base.slice(at + 1)) };
  } catch {
    return { containerId: base.slice(0, at), ifname: base.slice(at + 1) };
  }
}

/** A record file larger than this is not read (a record is a few KiB; hot-plug churn adds a few lines each). */
const MAX_RECORD_BYTES = 16 * 1024 * 1024;

/** Where a write() to a file can be cut short (the page cache's unit; larger folios are multiples of it). */
const PAGE_BYTES = 4096;

/** Written in the journal directory when plexusd had to make it again: the records it held are lost. */
export const LOST_MARKER = 'LOST';

/**
 * An open record being written by one transaction. Each line is written before the change it describes is
 * made. With `sync`, lines are also fdatasync'd (async, off the event loop); without it a write is a
 * microsecond syscall done inline, and the page cache keeps it through any crash of the daemon. A line that cannot be
 * written whole (a full disk) is cut off again, so the record stays readable, and the append fails with code 5.
 */
export class JournalEntry {
  constructor(
    private readonly fd: number,
    private readonly sync: boolean,
    readonly path: string,
    /** The record's length: where a line that could not be written whole is cut off. */
    private size: number,
  ) {}

  private async append(line: Line, durable = true): Promise<void> {
    const bytes = Buffer.from(`${JSON.stringify({ v: JOURNAL_VERSION, ...line })}\n`);
    let written = 0;
    try {
      while (written < bytes.length) written += writeSync(this.fd, bytes, written, bytes.length - written);
    } catch (e) {
      if (written > 0) this.cutBack();
      throw journalIoError('append to', this.path, e);
    }
    this.size += bytes.length;
    if (!this.sync || !durable) return;
    await new Promise<void>((resolve, reject) => fdatasync(this.fd, (e) => (e ? reject(journalIoError('sync', this.path, e)) : resolve())));
  }

  /** Cuts a line written in part; if even that fails, the reader sees a line cut short and refuses the record. */
  private cutBack(): void {
    try {
      ftruncateSync(this.fd, this.size);
    } catch {
      /* the append fails regardless */
    }
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

/** Opens a record for appending, first cutting off a last line that a crash left cut short (the reader ignores it). */
function openForAppend(path: string): { fd: number; size: number } {
  const fd = openSync(path, constants.O_RDWR | constants.O_APPEND | constants.O_CREAT, 0o600);
  try {
    const size = fstatSync(fd).size;
    if (size === 0) return { fd, size };
    const last = Buffer.alloc(1);
    readSync(fd, last, 0, 1, size - 1);
    if (last[0] === 0x0a) return { fd, size };
    const text = Buffer.alloc(Math.min(size, MAX_RECORD_BYTES));
    const start = size - text.length;
    readSync(fd, text, 0, text.length, start);
    const cut = text.lastIndexOf(0x0a) + 1;
    const tail = text.subarray(cut).toString('utf8');
    if (readLine(tail).ok) {
      // A complete line that lacks only its newline is kept: the next line must not join it.
      writeSync(fd, '\n');
      return { fd, size: size + 1 };
    }
    if (cut === 0 && start > 0) return { fd, size }; // no newline in the last 16 MiB: leave it to the reader
    ftruncateSync(fd, start + cut);
    return { fd, size: start + cut };
  } catch (e) {
    closeSync(fd);
    throw e;
  }
}

export class Journal {
  private constructor(
    readonly dir: string,
    private readonly sync: boolean,
    /** Whether the directory was missing when the journal was opened (a fresh state dir, or records lost). */
    readonly missingAtOpen: boolean,
  ) {}

  static async open(dir: string, sync: boolean): Promise<Journal> {
    const missing = !existsSync(dir);
    await mkdir(dir, { recursive: true, mode: 0o700 });
    return new Journal(dir, sync, missing);
  }

  /** Starts a new record; fails if one exists for the same attachment (callers check first). */
  async begin(meta: AttachmentMeta): Promise<JournalEntry> {
    const path = join(this.dir, fileName(meta.containerId, meta.ifname));
    const fd = await this.create(path);
    const entry = new JournalEntry(fd, this.sync, path, 0);
    try {
      await entry.begin(meta);
    } catch (e) {
      // A record without its begin line holds nothing: remove it, so the runtime's retry can begin again.
      await entry.close();
      await rm(path, { force: true }).catch(() => undefined);
      throw e;
    }
    return entry;
  }

  /**
   * Creates a record file. A file there that holds no record (a crash or a full disk before its first line) is
   * replaced; a directory removed underneath is made again, and the loss marked.
   */
  private async create(path: string): Promise<number> {
    for (let attempt = 0; ; attempt++) {
      try {
        return openSync(path, 'wx', 0o600);
      } catch (e) {
        const code = (e as NodeJS.ErrnoException).code;
        if (attempt === 0 && code === 'EEXIST' && (await this.holdsNothing(path))) {
          await rm(path, { force: true });
          continue;
        }
        if (attempt === 0 && code === 'ENOENT') {
          await this.remake().catch((made: unknown) => Promise.reject(journalIoError('make the directory of', path, made)));
          continue;
        }
        if (code === 'EEXIST') throw e;
        throw journalIoError('create', path, e);
      }
    }
  }

  private async holdsNothing(path: string): Promise<boolean> {
    const text = await readFile(path, 'utf8').catch(() => undefined);
    return text !== undefined && replayRecord(text).kind === 'empty';
  }

  /** Makes the journal directory again after it was removed, marking that the records it held are lost. */
  private async remake(): Promise<void> {
    await mkdir(this.dir, { recursive: true, mode: 0o700 });
    await this.markLost('the journal directory was removed while plexusd ran');
  }

  /** Says, in the directory, that records were lost: until an operator removes the marker, no orphaned lease is released. */
  async markLost(why: string): Promise<void> {
    const path = join(this.dir, LOST_MARKER);
    if (existsSync(path)) return;
    await writeFile(path, `${new Date().toISOString()} ${why}\n`, { mode: 0o600 });
  }

  /** Why leases without a record must be kept: the marker's text, if records were lost. */
  async lost(): Promise<string | undefined> {
    const text = await readFile(join(this.dir, LOST_MARKER), 'utf8').catch(() => undefined);
    if (text !== undefined) return text.trim() || 'records were lost';
    return existsSync(this.dir) ? undefined : 'the journal directory is missing';
  }

  /** Reopens an existing record to append to it (deletion, recovery). */
  async reopen(containerId: string, ifname: string): Promise<JournalEntry> {
    const path = join(this.dir, fileName(containerId, ifname));
    try {
      const { fd, size } = openForAppend(path);
      return new JournalEntry(fd, this.sync, path, size);
    } catch (e) {
      throw journalIoError('open', path, e);
    }
  }

  async load(containerId: string, ifname: string): Promise<AttachmentRecord | undefined> {
    const name = fileName(containerId, ifname);
    // Most ADDs find no record: a stat is far cheaper than a failed asynchronous read.
    if (!existsSync(join(this.dir, name))) return undefined;
    return this.readRecord(name);
  }

  list(): Promise<AttachmentRecord[]> {
    return this.read(() => true, true);
  }

  /** The records of one container (every interface the runtime attached for it). */
  listContainer(containerId: string): Promise<AttachmentRecord[]> {
    return this.read((name) => name.startsWith(`${containerId}@`), false);
  }

  /** Who holds which lease: every record (or one container's), or everything while records are known lost. */
  async leaseHolders(containerId?: string): Promise<LeaseHolders> {
    const records = containerId === undefined ? await this.list() : await this.listContainer(containerId);
    const lost = await this.lost();
    return new LeaseHolders(records, lost !== undefined);
  }

  /** Whether a record can be written now (for /healthz): undefined when it can, else why. A removed directory is made again. */
  async writable(): Promise<string | undefined> {
    const path = join(this.dir, `.probe-${process.pid}`);
    try {
      if (!existsSync(this.dir)) await this.remake();
      const fd = openSync(path, 'w', 0o600);
      try {
        writeSync(fd, Buffer.alloc(512, 0x0a));
      } finally {
        closeSync(fd);
      }
      return undefined;
    } catch (e) {
      return journalIoError('write', path, e).message;
    } finally {
      await rm(path, { force: true }).catch(() => undefined);
    }
  }

  /**
   * The records whose file names match. With `dropEmpty`, a file that holds no record (a crash between creating it and
   * writing its first line) is removed. A file that cannot be read or used is an unreadable record of the container its
   * name says: never undone, holding that container's leases.
   */
  private async read(match: (name: string) => boolean, dropEmpty: boolean): Promise<AttachmentRecord[]> {
    let names: string[];
    try {
      names = await readdir(this.dir);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw journalIoError('list', this.dir, e);
      return [];
    }
    const out: AttachmentRecord[] = [];
    for (const name of names.filter((n) => n.endsWith('.jsonl') && match(n)).sort()) {
      const record = await this.readRecord(name, dropEmpty);
      if (record) out.push(record);
    }
    return out;
  }

  private async readRecord(name: string, dropEmpty = false): Promise<AttachmentRecord | undefined> {
    const path = join(this.dir, name);
    const { containerId, ifname } = nameParts(name);
    let text: string;
    let size: number;
    try {
      const info = await lstat(path);
      size = info.size;
      if (!info.isFile()) return headlessRecord(containerId, ifname, `${path}: not a regular file`);
      if (info.size > MAX_RECORD_BYTES) return headlessRecord(containerId, ifname, `${path}: larger than ${MAX_RECORD_BYTES} bytes`);
      text = await readFile(path, 'utf8');
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
      return headlessRecord(containerId, ifname, `${path}: cannot be read (${(e as NodeJS.ErrnoException).code ?? String(e)})`);
    }
    const replayed = replayRecord(text, path);
    if (replayed.kind === 'empty') {
      if (dropEmpty) await rm(path, { force: true });
      return undefined;
    }
    if (replayed.kind === 'headless') return headlessRecord(containerId, ifname, replayed.unreadable);
    const record = replayed.record;
    // A last line cut short is a crash mid-append if the pod went with the crash (a reboot), or if the file ends on a
    // page boundary: a write cut by a signal or a full disk stops there, nowhere else. A record cut anywhere else while
    // its netns exists may have lost whole lines (a truncated file): undoing what is left would release addresses its
    // interfaces still have.
    const crashCut = size % PAGE_BYTES === 0;
    if (record.tornLine !== undefined && !record.unreadable && !crashCut && record.meta.netns && existsSync(record.meta.netns)) {
      const why = `${path}, line ${record.tornLine}: cut short while the pod's network namespace ${record.meta.netns} exists`;
      return { ...record, unreadable: why };
    }
    return record;
  }

  async remove(containerId: string, ifname: string): Promise<void> {
    const path = join(this.dir, fileName(containerId, ifname));
    await rm(path, { force: true }).catch((e: unknown) => Promise.reject(journalIoError('remove', path, e)));
  }
}
