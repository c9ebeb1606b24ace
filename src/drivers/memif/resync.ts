/**
 * Ports a switch lost, made again from the journal: after ovs-vswitchd or ovsdb-server restarted without them, every
 * recorded port the switch lacks (or reports an error for) is added again. The registry runs it (lifecycle.ts) every
 * resync interval and whenever a switch database reconnects.
 */
import { rmSync } from 'node:fs';
import { ok, type Result } from '../../cni/errors';
import type { PortState } from '../../ovs/ports';
import type { DriverContext } from '../driver';
import type { MemifSwitches } from './switch';
import { switchPortsIn, type SwitchPortStep } from './undo';

export interface ResyncReport {
  /** Ports that were missing or broken and were made again. */
  readonly repaired: readonly string[];
  readonly failures: readonly string[];
}

/**
 * Makes every recorded port that its switch lacks or reports an error for again. Ports removed since `listedAt`
 * (when the journal was read) are left alone: a DEL raced the listing.
 */
export async function resyncPorts(
  switches: MemifSwitches,
  recorded: readonly SwitchPortStep[],
  listedAt: number,
): Promise<ResyncReport> {
  const repaired: string[] = [];
  const failures: string[] = [];
  const listings = new SwitchListings(switches);
  for (const step of recorded) {
    if (switches.removedSince(step.port, listedAt)) continue;
    const listing = await listings.of(step.ovsdb);
    if (!listing.ok) {
      failures.push(`${step.port}: ${listing.error.message}`);
      continue;
    }
    const state = listing.value.get(step.port);
    if (state && !state.error) continue;
    if (switches.removedSince(step.port, listedAt)) continue;
    const made = await addAgain(switches, step);
    if (made.ok) repaired.push(step.port);
    else failures.push(`${step.port}: ${made.error.message}`);
  }
  return { repaired, failures };
}

/** One listing of Plexus's ports per switch, not one request per port. */
class SwitchListings {
  private readonly listings = new Map<string, Result<ReadonlyMap<string, PortState>>>();

  constructor(private readonly switches: MemifSwitches) {}

  async of(ovsdb: string): Promise<Result<ReadonlyMap<string, PortState>>> {
    let listing = this.listings.get(ovsdb);
    if (!listing) {
      const owned = await this.switches.portsAt(ovsdb).listOwned();
      listing = owned.ok ? ok(new Map(owned.value.map((p) => [p.name, p]))) : owned;
      this.listings.set(ovsdb, listing);
    }
    return listing;
  }
}

/**
 * A crashed switch leaves its socket file behind, and DPDK will not listen on a path that exists. And a device DPDK
 * failed to attach keeps its name taken until the switch restarts: the port comes back under a new device name.
 */
function addAgain(switches: MemifSwitches, step: SwitchPortStep): Promise<Result<PortState>> {
  const socket = /socket=([^,]*)/.exec(step.devargs)?.[1];
  if (socket) rmSync(socket, { force: true });
  const devargs = step.devargs.replace(/^[^,]*/, `net_memif_${step.port}_${Date.now().toString(36)}`);
  const { bridge, port, rxQueues, externalIds } = step;
  return switches.add(step.ovsdb, { bridge, port, devargs, rxQueues, externalIds });
}

/**
 * The driver's resync: reads the journal's ports and makes again those the switches lost, logging what it did.
 * After the first look, a node that never had a memif port does not read its journal every interval.
 */
export class PortResync {
  private portsSeen = false;
  private listed = false;

  constructor(private readonly switches: MemifSwitches) {}

  /** This node has memif ports (an ADD made one): resyncs read the journal from now on. */
  markPortsSeen(): void {
    this.portsSeen = true;
  }

  async run(why: string, { recordedSteps, log }: Pick<DriverContext, 'recordedSteps' | 'log'>): Promise<void> {
    if (this.listed && !this.portsSeen) return;
    const listedAt = Date.now();
    const steps = switchPortsIn(await recordedSteps(), this.switches);
    this.listed = true;
    if (steps.length === 0) return;
    this.portsSeen = true;
    const report = await resyncPorts(this.switches, steps, listedAt);
    if (report.repaired.length) {
      log.warn({ ports: report.repaired, why }, 'memif ports the switch had lost were made again from the journal');
    }
    if (report.failures.length) {
      log.warn({ failures: report.failures, why }, 'memif ports could not be checked or made again');
    }
  }
}
