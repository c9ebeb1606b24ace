/**
 * Start-up reconciliation, before the daemon serves: replay DELs that plexus-cni spooled while the daemon was
 * away, undo every ADD or DEL a crash left half done, and release leases that no attachment owns.
 */
import { mkdir, readdir, rename, rm } from 'node:fs/promises';
import { join } from 'node:path';
import type { Logger } from 'pino';
import { CniCode, err, toCniError } from '../cni/errors';
import { ForwardedCallSchema, parseCniRequest } from '../cni/request';
import { readBoundedFile } from '../common/bounded-file';
import type { AttachmentEngine } from './engine';
import { LOST_MARKER, type Journal } from './journal';
import { errorMessage } from '../common/error-message';

export interface RecoveryReport {
  readonly spooledDels: number;
  readonly undone: number;
  readonly undoFailures: number;
  /** Records this daemon cannot read: kept, never undone, their containers' leases held. */
  readonly unusableRecords: number;
  readonly leasesReleased: number;
}

/** A spooled DEL is one request as plexus-cni would have sent it: no bigger than the API accepts. */
const MAX_SPOOLED_BYTES = 4 * 1024 * 1024;

/**
 * Replays spooled DELs; a file that cannot be understood is kept aside as `.bad` for an operator. A spooled file is
 * read only if it is a regular file (a symlink is not followed, a FIFO not waited on) of at most 4 MiB.
 */
export async function replaySpooledDels(spoolDir: string, engine: AttachmentEngine, log: Logger): Promise<number> {
  let names: string[];
  try {
    names = (await readdir(spoolDir)).filter((n) => n.endsWith('.json'));
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return 0;
    throw e;
  }
  let replayed = 0;
  for (const name of names) {
    const path = join(spoolDir, name);
    const read = await readBoundedFile(path, { maxBytes: MAX_SPOOLED_BYTES });
    if (!read.ok && read.error.kind === 'missing') continue; // raced with another scan
    if (!read.ok) {
      log.error({ file: path, why: `the spooled file ${read.error.reason}` }, 'spooled DEL is unusable; kept as .bad');
      await rename(path, `${path}.bad`).catch(() => undefined);
      continue;
    }
    const text = read.value.toString('utf8');
    const call = ForwardedCallSchema.safeParse(safeJson(text));
    const req = call.success ? parseCniRequest(call.data) : undefined;
    if (!req?.ok || req.value.command !== 'DEL') {
      log.error(
        { file: path, why: req && !req.ok ? req.error.message : 'not a DEL request' },
        'spooled DEL is unusable; kept as .bad',
      );
      await rename(path, `${path}.bad`).catch(() => undefined);
      continue;
    }
    const r = await engine.del(req.value).catch((e: unknown) => err(toCniError(e, CniCode.IoFailure)));
    if (r.ok) {
      await rm(path, { force: true });
      replayed++;
      log.info({ containerId: req.value.containerId, ifname: req.value.ifname }, 'replayed spooled DEL');
    } else {
      log.error({ file: path, err: r.error.message }, 'spooled DEL failed; will retry');
    }
  }
  return replayed;
}

const safeJson = (text: string): unknown => {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
};

/** Says which records this daemon cannot use (named by file and line): they are kept, and so are their leases. */
async function reportUnusable(engine: AttachmentEngine, log: Logger): Promise<number> {
  let unusable = 0;
  for (const record of await engine.records()) {
    const { containerId, ifname } = record.meta;
    if (record.unreadable) {
      unusable++;
      const holder = containerId || '(unknown)';
      const what = `journal record cannot be used, so it is not undone and container ${holder} keeps its leases`;
      log.error({ containerId, ifname, why: record.unreadable }, `${what}: ${record.unreadable}`);
    } else if (record.tornLine !== undefined) {
      const what = `line ${record.tornLine} was cut short by a crash in the middle of its append; ignored`;
      log.warn({ containerId, ifname, line: record.tornLine }, `journal record ${containerId}/${ifname}: ${what}`);
    }
  }
  return unusable;
}

/**
 * A journal directory that had to be made at this start while leases exist lost its records (deleted, or a state
 * directory restored in part): which pods still hold those leases cannot be told, so none is released.
 */
async function guardLostRecords(journal: Journal, engine: AttachmentEngine, log: Logger): Promise<boolean> {
  let lost = await journal.lost();
  if (!lost && journal.missingAtOpen && (await engine.releaseOrphanedLeases({ dryRun: true })).length > 0) {
    lost = 'the journal directory was missing at start while leases existed';
    const why = lost;
    await journal
      .markLost(why)
      .catch((e: unknown) => log.error({ err: errorMessage(e) }, `cannot mark the loss: ${why}`));
  }
  if (!lost) return false;
  const until = `no lease without a record is released until ${join(journal.dir, LOST_MARKER)} is removed`;
  log.error({ journal: journal.dir, marker: LOST_MARKER, lost }, `journal records were lost (${lost}): ${until}`);
  return true;
}

export async function recover(
  spoolDir: string,
  engine: AttachmentEngine,
  log: Logger,
  journal?: Journal,
): Promise<RecoveryReport> {
  await mkdir(spoolDir, { recursive: true, mode: 0o700 });
  const spooledDels = await replaySpooledDels(spoolDir, engine, log);
  let unusable: number;
  try {
    unusable = await reportUnusable(engine, log);
  } catch (e) {
    // Without a list of records nothing may be undone or released: the daemon serves, and /healthz says why.
    log.error(
      { err: errorMessage(e) },
      'the journal cannot be listed: nothing is undone and no lease released at this start',
    );
    return { spooledDels, undone: 0, undoFailures: 0, unusableRecords: 0, leasesReleased: 0 };
  }
  const { undone, failed } = await engine.undoUnfinished();
  for (const record of undone)
    log.info(
      { containerId: record.meta.containerId, ifname: record.meta.ifname, phase: record.deleting ? 'DEL' : 'ADD' },
      'recovery undid a half-done transaction',
    );
  for (const { record, error } of failed) {
    if (!record.unreadable)
      log.error({ containerId: record.meta.containerId, err: error.message }, 'recovery could not undo a transaction');
  }
  const lost = journal ? await guardLostRecords(journal, engine, log) : false;
  const released = lost ? [] : await engine.releaseOrphanedLeases();
  for (const l of released)
    log.info(
      { network: l.network, address: l.address, containerId: l.containerId, ifname: l.ifname },
      'recovery released a lease no attachment holds',
    );
  return {
    spooledDels,
    undone: undone.length,
    undoFailures: failed.length - unusable,
    unusableRecords: unusable,
    leasesReleased: released.length,
  };
}
