/**
 * Start-up reconciliation, before the daemon serves: replay DELs that plexus-cni spooled while the daemon was
 * away, undo every ADD or DEL a crash left half done, and release leases that no attachment owns.
 */
import { mkdir, readdir, rename, rm } from 'node:fs/promises';
import { join } from 'node:path';
import type { Logger } from 'pino';
import { ForwardedCallSchema, parseCniRequest } from '../cni/request';
import { readBoundedFile } from '../common/bounded-file';
import type { AttachmentEngine } from './engine';

export interface RecoveryReport {
  readonly spooledDels: number;
  readonly undone: number;
  readonly undoFailures: number;
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
      log.error({ file: path, why: req && !req.ok ? req.error.message : 'not a DEL request' }, 'spooled DEL is unusable; kept as .bad');
      await rename(path, `${path}.bad`).catch(() => undefined);
      continue;
    }
    const r = await engine.del(req.value);
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

export async function recover(spoolDir: string, engine: AttachmentEngine, log: Logger): Promise<RecoveryReport> {
  await mkdir(spoolDir, { recursive: true, mode: 0o700 });
  const spooledDels = await replaySpooledDels(spoolDir, engine, log);
  const { undone, failed } = await engine.undoUnfinished();
  for (const record of undone) log.info({ containerId: record.meta.containerId, ifname: record.meta.ifname, phase: record.deleting ? 'DEL' : 'ADD' }, 'recovery undid a half-done transaction');
  for (const { record, error } of failed) log.error({ containerId: record.meta.containerId, err: error.message }, 'recovery could not undo a transaction');
  const released = await engine.releaseOrphanedLeases();
  for (const l of released) log.info({ network: l.network, address: l.address, containerId: l.containerId, ifname: l.ifname }, 'recovery released a lease no attachment holds');
  return { spooledDels, undone: undone.length, undoFailures: failed.length, leasesReleased: released.length };
}
