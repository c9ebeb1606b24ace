/** The userspace-switch ports of every committed attachment (what a switch that lost its ports must get back). */
import type { UndoStep } from '../drivers/driver';
import type { Journal } from './journal';

export type SwitchPortStep = Extract<UndoStep, { kind: 'deleteSwitchPort' }>;

export async function switchPorts(journal: Journal): Promise<SwitchPortStep[]> {
  const out: SwitchPortStep[] = [];
  for (const record of await journal.list()) {
    if (!record.result || record.deleting || record.changing) continue;
    for (const step of record.undo) if (step.kind === 'deleteSwitchPort') out.push(step);
  }
  return out;
}
