/**
 * plexusd answers DEL before the kernel has deleted the pod's links; the rest goes in the background, and the record
 * says `deleting` until it is done. Leak checks wait for that (as a node's next look would), and the bench reports
 * how long the background took after the last DEL of a section.
 */
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';

/** How long each wait for plexusd's background teardown took (ms), one per leak check. */
export const teardownWaits: number[] = [];

async function pendingTeardowns(stateDir: string): Promise<number> {
  const dir = join(stateDir, 'journal');
  let pending = 0;
  for (const name of await readdir(dir).catch(() => [])) {
    if (!name.endsWith('.jsonl')) continue;
    const text = await readFile(join(dir, name), 'utf8').catch(() => '');
    if (text.includes('"t":"deleting"')) pending++;
  }
  return pending;
}

/** Waits until no record of plexusd's journal says `deleting` (at most `timeoutMs`); answers how many still do. */
export async function teardownsSettled(stateDir: string, timeoutMs = 30_000): Promise<number> {
  const started = Date.now();
  let pending = await pendingTeardowns(stateDir);
  while (pending > 0 && Date.now() - started < timeoutMs) {
    await new Promise((r) => setTimeout(r, 10));
    pending = await pendingTeardowns(stateDir);
  }
  teardownWaits.push(Date.now() - started);
  return pending;
}
