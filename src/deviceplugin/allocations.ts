/**
 * What plexusd remembers of each device the kubelet had it allocate: when (to prefer the device idle longest, so a
 * freed memif socket is not handed to the next pod while the last one may still be closing it), and a memif
 * device's secret and socket, which the switch's port needs at ADD. The kubelet never says when a device is freed:
 * an Allocate of the same device simply replaces its entry. Kept in one JSON file per resource under the state dir
 * (written then renamed), so a restarted plexusd still knows the secrets of running pods.
 */
import { mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { z } from 'zod';

const EntrySchema = z.object({
  allocatedAt: z.number(),
  /** Allocations of this device since the book was created. */
  count: z.number().int().min(1),
  secret: z.string().optional(),
  socket: z.string().optional(),
});
const BookSchema = z.object({ version: z.literal(1), devices: z.record(z.string(), EntrySchema) });

export type AllocationEntry = z.infer<typeof EntrySchema>;

export class AllocationBook {
  private readonly entries = new Map<string, AllocationEntry>();

  /** `file` undefined: in memory only (tests, or no state dir). */
  constructor(
    private readonly file: string | undefined,
    private readonly now: () => number = Date.now,
  ) {
    if (!file) return;
    let text: string;
    try {
      text = readFileSync(file, 'utf8');
    } catch {
      return; // first start: nothing allocated yet
    }
    const parsed = BookSchema.safeParse(JSON.parse(text));
    if (parsed.success) for (const [id, e] of Object.entries(parsed.data.devices)) this.entries.set(id, e);
  }

  /** The book of one resource in the state dir: devices/<resource with "/" as "_">.json. */
  static forResource(stateDir: string | undefined, resourceName: string): AllocationBook {
    if (!stateDir) return new AllocationBook(undefined);
    const dir = join(stateDir, 'devices');
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    return new AllocationBook(join(dir, `${resourceName.replaceAll('/', '_')}.json`));
  }

  get(deviceID: string): AllocationEntry | undefined {
    return this.entries.get(deviceID);
  }

  /** Records one Allocate of these devices (each with its own details), durably, before the kubelet is answered. */
  record(allocated: ReadonlyMap<string, { secret?: string; socket?: string }>): void {
    const at = this.now();
    for (const [id, details] of allocated) {
      const count = (this.entries.get(id)?.count ?? 0) + 1;
      this.entries.set(id, { allocatedAt: at, count, ...details });
    }
    this.save();
  }

  /** Devices no longer offered are forgotten (the configuration shrank). */
  retainOnly(deviceIDs: ReadonlySet<string>): void {
    let changed = false;
    for (const id of [...this.entries.keys()]) {
      if (!deviceIDs.has(id)) {
        this.entries.delete(id);
        changed = true;
      }
    }
    if (changed) this.save();
  }

  /**
   * GetPreferredAllocation for one container: every must-include device, then the available devices idle longest
   * (never allocated first), ties in natural order of their IDs (memif2 before memif10), up to `size`.
   */
  preferred(available: readonly string[], mustInclude: readonly string[], size: number): string[] {
    const chosen = [...new Set(mustInclude)].slice(0, Math.max(size, 0));
    const rest = available
      .filter((id) => !chosen.includes(id))
      .sort((a, b) => {
        const ta = this.entries.get(a)?.allocatedAt ?? -Infinity;
        const tb = this.entries.get(b)?.allocatedAt ?? -Infinity;
        return ta !== tb ? ta - tb : naturalCompare(a, b);
      });
    for (const id of rest) {
      if (chosen.length >= size) break;
      chosen.push(id);
    }
    return chosen;
  }

  private save(): void {
    if (!this.file) return;
    const tmp = `${this.file}.tmp`;
    writeFileSync(tmp, JSON.stringify({ version: 1, devices: Object.fromEntries(this.entries) }), { mode: 0o600 });
    renameSync(tmp, this.file);
  }
}

export const naturalCompare = (a: string, b: string): number => a.localeCompare(b, 'en', { numeric: true });
