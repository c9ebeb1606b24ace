/**
 * Reading a daemon's journal from the outside, as a crash test needs to: whether an operation is under way right
 * now, so a kill -9 is known to hit work in flight rather than an idle daemon. Reading only, never writing.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

/** The kinds of line of a record (`t`), in order; a line being written (not yet whole) is left out. */
export function recordKinds(stateDir: string, file: string): string[] {
  let text: string;
  try {
    text = readFileSync(join(stateDir, 'journal', file), 'utf8');
  } catch {
    return [];
  }
  return text.split('\n').flatMap((line) => {
    try {
      return [String((JSON.parse(line) as { t: unknown }).t)];
    } catch {
      return [];
    }
  });
}

/** Records whose ADD has begun and is not committed: the daemon is attaching that pod now. */
export function addsInFlight(stateDir: string): string[] {
  return recordFiles(stateDir).filter((f) => {
    const kinds = recordKinds(stateDir, f);
    return kinds.includes('begin') && !kinds.includes('committed') && !kinds.includes('deleting');
  });
}

/** Whether the record holds a change of the running pod's networks whose additions are not complete yet. */
export function changeInFlight(stateDir: string, file: string): boolean {
  const kinds = recordKinds(stateDir, file);
  const change = kinds.lastIndexOf('change');
  return change > kinds.lastIndexOf('committed') && !kinds.slice(change).includes('added');
}

function recordFiles(stateDir: string): string[] {
  try {
    return readdirSync(join(stateDir, 'journal')).filter((n) => n.endsWith('.jsonl'));
  } catch {
    return [];
  }
}
