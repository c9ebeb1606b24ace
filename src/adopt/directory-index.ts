/**
 * What a directory of another program's files says, read once per file: the parsed entry of each file is kept, and a
 * directory is read again only when its mtime changed (a file added, removed or renamed). Multus and libcni write each
 * cache file once, at ADD, and remove it at DEL, so a listing costs a stat while nothing changes and reads only the new
 * files when something did. `refresh` reads them a batch per turn of the event loop (3000 sandboxes are 12000 files);
 * `current` reads synchronously only what `refresh` has not.
 */
import { type Dirent, readdirSync, statSync } from 'node:fs';
import { readdir } from 'node:fs/promises';

/** Files read between turns of the event loop, as the journal reads its records. */
const FILES_PER_TURN = 32;
/**
 * A directory's mtime ticks with the kernel's coarse clock (a tick is at most 10 ms): a file added in the same tick as
 * a listing, after it, would not change it. An mtime this recent is not trusted; the next look lists the directory
 * again. A file system that keeps whole seconds gets two.
 */
const SETTLED_MS = 100;
const SETTLED_WHOLE_SECONDS_MS = 2000;
/** The mtime of a directory that is not there. */
const GONE = -1n;

export interface DirectoryIndexOptions<T> {
  readonly dir: string;
  /** Which entries are files of this index. */
  readonly accepts: (entry: Dirent) => boolean;
  /** The file's entry; undefined for a file that is not one (kept as such, not read again). */
  readonly read: (name: string) => T | undefined;
  /** The clock, in ms (tests pass their own). */
  readonly now?: () => number;
}

export class DirectoryIndex<T> {
  private readonly entries = new Map<string, T | undefined>();
  /** The directory's mtime when it was last listed, once settled. */
  private listedAt: bigint | undefined;
  /** Names listed but not read yet. */
  private unread: string[] = [];
  /** Counts changes to the entries, so that what is made of them can be kept until the next. */
  private changes = 0;

  constructor(private readonly o: DirectoryIndexOptions<T>) {}

  /** Every entry, reading synchronously whatever is new. */
  current(): ReadonlyMap<string, T | undefined> {
    const mtime = this.changedMtime();
    if (mtime !== undefined) this.relisted(mtime, mtime === GONE ? [] : this.listedSync());
    for (const name of this.unread.splice(0)) this.readOne(name);
    return this.entries;
  }

  /** Reads what is new, FILES_PER_TURN between turns of the event loop; the directory is listed on the thread pool. */
  async refresh(): Promise<void> {
    const mtime = this.changedMtime();
    if (mtime !== undefined) {
      // What a synchronous look listed meanwhile may be replaced by this older listing: it is listed at the mtime
      // seen before it, so the next look sees the change and lists again.
      this.relisted(mtime, mtime === GONE ? [] : await this.listed());
    }
    for (let n = 0; this.unread.length > 0; n++) {
      if (n > 0 && n % FILES_PER_TURN === 0) await new Promise<void>((resolve) => setImmediate(resolve));
      const name = this.unread.pop();
      if (name !== undefined) this.readOne(name);
    }
  }

  /** Changes to the entries so far: equal counts, equal entries. */
  get version(): number {
    return this.changes;
  }

  private readOne(name: string): void {
    if (this.entries.has(name)) return;
    this.entries.set(name, this.o.read(name));
    this.changes++;
  }

  /** The directory's mtime when it may have changed since it was listed (GONE: it is not there); else undefined. */
  private changedMtime(): bigint | undefined {
    try {
      const mtime = statSync(this.o.dir, { bigint: true }).mtimeNs;
      return this.listedAt !== undefined && mtime === this.listedAt ? undefined : mtime;
    } catch {
      return GONE;
    }
  }

  private listedSync(): string[] {
    try {
      return readdirSync(this.o.dir, { withFileTypes: true })
        .filter((e) => this.o.accepts(e))
        .map((e) => e.name);
    } catch {
      return [];
    }
  }

  private async listed(): Promise<string[]> {
    try {
      return (await readdir(this.o.dir, { withFileTypes: true })).filter((e) => this.o.accepts(e)).map((e) => e.name);
    } catch {
      return [];
    }
  }

  /** The directory as listed at `mtime`: forgets files gone, queues new ones. */
  private relisted(mtime: bigint, names: readonly string[]): void {
    const listed = new Set(names);
    for (const name of this.entries.keys())
      if (!listed.has(name)) {
        this.entries.delete(name);
        this.changes++;
      }
    this.unread = names.filter((n) => !this.entries.has(n));
    if (mtime === GONE) {
      this.listedAt = undefined;
      return;
    }
    const now = this.o.now?.() ?? Date.now();
    const settled = mtime % 1_000_000_000n === 0n ? SETTLED_WHOLE_SECONDS_MS : SETTLED_MS;
    this.listedAt = now - Number(mtime / 1_000_000n) > settled ? mtime : undefined;
  }
}
