/**
 * The drivers the daemon has: the native ones, chosen by the plugin `type` of a network's config, and the delegate
 * driver, which execs the plugins of every other network (and of those whose NAD asks for it).
 */
import { createBridgeDriver } from './bridge';
import { delegateDriver } from './delegate';
import type { Result } from '../cni/errors';
import type { Driver, UndoEnv, UndoStep } from './driver';
import { genericUndo, undoRunner } from './undo';
import { hostDeviceDriver } from './host-device';
import { ipvlanDriver } from './ipvlan';
import { macvlanDriver } from './macvlan';
import { createPtpDriver } from './ptp';
import { tapDriver } from './tap';
import { createVxlanDriver } from './vxlan';
import { createMemifDriver, type MemifDriver, type MemifDriverOptions } from './memif';
import type { NetworkDefinition } from '../networks/nad';

/** Fresh instances: each registry's drivers own their caches (the bridges, overlays and sysctls they ensured). */
export const builtInDrivers = (memif: MemifDriver = createMemifDriver()): readonly Driver[] => [
  createBridgeDriver(), macvlanDriver, ipvlanDriver, hostDeviceDriver, tapDriver, createVxlanDriver(), createPtpDriver(), memif,
];
const builtIn = (): readonly Driver[] => builtInDrivers();
export type { MemifDriver, MemifDriverOptions };
export { createMemifDriver };

export class DriverRegistry {
  private readonly byType = new Map<string, Driver>();
  /** Runs any recorded undo step: the generic kinds, and those a driver of this registry owns. */
  readonly undo: (step: UndoStep, env: UndoEnv) => Promise<Result<void>>;

  constructor(
    drivers: readonly Driver[] = builtIn(),
    readonly delegate: Driver = delegateDriver,
  ) {
    for (const d of drivers) this.byType.set(d.type, d);
    this.undo = undoRunner([genericUndo, ...[...drivers, delegate].flatMap((d) => (d.undo ? [d.undo] : []))]);
  }

  get(type: string): Driver | undefined {
    return this.byType.get(type);
  }

  types(): string[] {
    return [...this.byType.keys()];
  }

  /** The driver for a network: its native driver when it has exactly one plugin of a native type, else delegation. */
  for(network: NetworkDefinition, forceDelegate: boolean): Driver {
    const [only, ...more] = network.plugins;
    const native = only && more.length === 0 && !forceDelegate ? this.byType.get(only.type) : undefined;
    return native ?? this.delegate;
  }

  /** The driver that made an attachment, by the type the journal recorded for it. */
  byRecordedType(type: string): Driver | undefined {
    return type === this.delegate.type ? this.delegate : this.byType.get(type);
  }
}
