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
 * What is on disk is not trusted (lines.ts validates each line): a record with a line this daemon cannot use
 * (newer format, garbage, a missing field, cut short in the middle) is unreadable: it is never undone, and it holds
 * every lease of its container. Only the last line may be cut short, by a crash in the middle of its append: that
 * line was never complete, so the change it announced was never made, and it is ignored.
 */
import { closeSync, openSync, writeSync } from 'node:fs';
import { mkdir, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { readBoundedFileSync } from '../../common/bounded-file';
import { journalIoError } from './errors';
import { JournalEntry, MAX_JOURNAL_RECORD_BYTES, openForAppend } from './entry';
import type { AttachmentMeta } from './lines';
import { headlessRecord, replayRecord, type AttachmentRecord } from './record';
import { LeaseHolders } from '../lease-holders';

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

/** Where a write() to a file can be cut short (the page cache's unit; larger folios are multiples of it). */
const PAGE_BYTES = 4096;

/**
 * Records read in one go before the event loop gets a turn. A record is a small file, read with blocking calls: an
 * asynchronous read costs five trips through libuv's pool (open, fstat, read, close, and the lstat): 0.3-0.4 ms a
 * record here against 0.03-0.08 ms, and that pool is where the background teardown deletes links.
 */
const RECORDS_PER_TURN = 32;

/** Written in the journal directory when plexusd had to make it again: the records it held are lost. */
export const LOST_MARKER = 'LOST';

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
          await this.remake().catch((made: unknown) =>
            Promise.reject(journalIoError('make the directory of', path, made)),
          );
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
  reopen(containerId: string, ifname: string): Promise<JournalEntry> {
    const path = join(this.dir, fileName(containerId, ifname));
    try {
      const { fd, size } = openForAppend(path);
      return Promise.resolve(new JournalEntry(fd, this.sync, path, size));
    } catch (e) {
      return Promise.reject(journalIoError('open', path, e));
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
    const matching = names.filter((n) => n.endsWith('.jsonl') && match(n)).sort();
    for (const [i, name] of matching.entries()) {
      if (i > 0 && i % RECORDS_PER_TURN === 0) await new Promise<void>((resolve) => setImmediate(resolve));
      const record = await this.readRecord(name, dropEmpty);
      if (record) out.push(record);
    }
    return out;
  }

  private async readRecord(name: string, dropEmpty = false): Promise<AttachmentRecord | undefined> {
    const path = join(this.dir, name);
    const { containerId, ifname } = nameParts(name);
    // Never a call that can block the event loop: a FIFO or a symlink put here is refused before a byte is read.
    const read = readBoundedFileSync(path, { maxBytes: MAX_JOURNAL_RECORD_BYTES });
    if (!read.ok) {
      if (read.error.kind === 'missing') return undefined;
      return headlessRecord(containerId, ifname, `${path} ${read.error.reason}`);
    }
    const text = read.value.toString('utf8');
    const size = read.value.length;
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
    if (
      record.tornLine !== undefined &&
      !record.unreadable &&
      !crashCut &&
      record.meta.netns &&
      existsSync(record.meta.netns)
    ) {
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
