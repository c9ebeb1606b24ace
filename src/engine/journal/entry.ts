/**
 * Writing one journal record: an open record a transaction appends lines to, each written whole (or cut back) before
 * the change it describes is made, and the opening of an existing record for appending after a crash cut its last line.
 */
import { closeSync, constants, fdatasync, fstatSync, ftruncateSync, openSync, readSync, writeSync } from 'node:fs';
import type { CniResult } from '../../cni/types';
import type { UndoStep } from '../../drivers/driver';
import { journalIoError } from './errors';
import { JOURNAL_VERSION, readLine, type Line } from './lines';
import type { AttachmentTag, AttachmentMeta, CommitDetails, NetworkAttachment } from './lines';
import type { PodNetworksChange } from './record';
import { definedFields } from '../../common/defined-fields';

/** A record file larger than this is not read (a record is a few KiB; hot-plug churn adds a few lines each). */
export const MAX_JOURNAL_RECORD_BYTES = 16 * 1024 * 1024;

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
    await new Promise<void>((resolve, reject) =>
      fdatasync(this.fd, (e) => (e ? reject(journalIoError('sync', this.path, e)) : resolve())),
    );
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
  record(step: UndoStep, attachment: AttachmentTag): Promise<void> {
    return this.append({ t: 'undo', step, a: attachment, at: new Date().toISOString() });
  }

  /** Every step of `attachment` has been undone: the record no longer holds them. */
  detached(attachment: AttachmentTag): Promise<void> {
    return this.append({ t: 'detached', a: attachment, at: new Date().toISOString() });
  }

  event(what: string, ms?: number): Promise<void> {
    // Timings are informational: the next durable line syncs them along.
    return this.append(
      {
        t: 'event',
        what,
        ...(ms !== undefined ? { ms: Math.round(ms * 1000) / 1000 } : {}),
        at: new Date().toISOString(),
      },
      false,
    );
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
    return this.append({
      t: 'committed',
      result,
      cniVersion,
      ...definedFields({ details }),
      at: new Date().toISOString(),
    });
  }

  markDeleting(): Promise<void> {
    return this.append({ t: 'deleting', at: new Date().toISOString() });
  }

  /** Closes the file (a synchronous call: its failure is the promise's). */
  close(): Promise<void> {
    try {
      closeSync(this.fd);
      return Promise.resolve();
    } catch (e) {
      return Promise.reject(e instanceof Error ? e : new Error(String(e)));
    }
  }
}

/** Opens a record for appending, first cutting off a last line that a crash left cut short (the reader ignores it). */
export function openForAppend(path: string): { fd: number; size: number } {
  const fd = openSync(path, constants.O_RDWR | constants.O_APPEND | constants.O_CREAT, 0o600);
  try {
    const size = fstatSync(fd).size;
    if (size === 0) return { fd, size };
    const last = Buffer.alloc(1);
    readSync(fd, last, 0, 1, size - 1);
    if (last[0] === 0x0a) return { fd, size };
    const text = Buffer.alloc(Math.min(size, MAX_JOURNAL_RECORD_BYTES));
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
