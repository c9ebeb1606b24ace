/**
 * The undo steps of every committed attachment, as the journal holds them now: what a driver's resync makes again
 * when its dataplane lost it (memif: the ports of a switch that restarted empty). Each driver reads its own kinds.
 */
import type { UndoStep } from '../drivers/driver';
import type { Journal } from './journal';

export async function committedSteps(journal: Journal): Promise<UndoStep[]> {
  const out: UndoStep[] = [];
  for (const record of await journal.list()) {
    if (!record.result || record.deleting || record.changing) continue;
    out.push(...record.undo);
  }
  return out;
}
