/**
 * The drivers the daemon has: the native ones, chosen by the plugin `type` of a network's config, and the delegate
 * driver, which execs the plugins of every other network (and of those whose NAD asks for it). The registry also runs
 * what the drivers do besides attachments: their undo steps, and their start, resync and stop (lifecycle.ts).
 */
import type { Result } from '../cni/errors';
import { definedFields } from '../common/defined-fields';
import type { NetworkDefinition } from '../networks/nad';
import { createBridgeDriver } from './bridge';
import {
  createDelegateDriver,
  delegateDelStep,
  type DelegateInvocation,
  type ExecLimits,
  type PluginProcesses,
} from './delegate';
import type { Driver, UndoEnv, UndoStep } from './driver';
import { createHostDeviceDriver } from './host-device';
import { createIpvlanDriver } from './ipvlan';
import { DriverLifecycle, type LifecycleSettings } from './lifecycle';
import { createMacvlanDriver } from './macvlan';
import { createMemifDriver, type MemifDriverOptions } from './memif';
import { createPtpDriver } from './ptp';
import { createTapDriver } from './tap';
import { undoRunner } from './undo';
import { createVxlanDriver, vniClaims, type VxlanCluster } from './vxlan';
import type { ClaimsOf } from '../networks/exclusive-claims';

export type { LifecycleSettings };

/** What the built-in drivers are made with; each left out gets a default of its own (tests use the defaults). */
export interface DriverDeps {
  readonly memif?: MemifDriverOptions;
  /** The node's limits of delegated plugin execs (plexusd makes them at start). */
  readonly execLimits?: ExecLimits;
  /** The node's running delegated plugins, which a stopping plexusd stops. */
  readonly pluginProcesses?: PluginProcesses;
  /** The other nodes, for cluster-mode vxlan networks (plexusd with an API). */
  readonly vxlan?: VxlanCluster;
}

/** Fresh instances: each registry's drivers own their caches (the bridges, overlays and sysctls they ensured). */
export const builtInDrivers = (deps: DriverDeps = {}): readonly Driver[] => [
  createBridgeDriver(),
  createMacvlanDriver(),
  createIpvlanDriver(),
  createHostDeviceDriver(),
  createTapDriver(),
  createVxlanDriver(deps.vxlan ? { cluster: deps.vxlan } : {}),
  createPtpDriver(),
  createMemifDriver(deps.memif),
];

/** What a definition holds that no other network may: a vxlan network's VNI (the sources refuse a second claimant). */
export const networkClaims: ClaimsOf = (definition) => vniClaims(definition);

export class DriverRegistry {
  private readonly byType = new Map<string, Driver>();
  private readonly lifecycle: DriverLifecycle;
  /** Runs any recorded undo step: the generic kinds, and those a driver of this registry owns. */
  readonly undo: (step: UndoStep, env: UndoEnv) => Promise<Result<void>>;

  /** The built-in drivers made with `deps`, and the delegate driver within `deps.execLimits`. */
  static create(deps: DriverDeps = {}): DriverRegistry {
    const delegate = createDelegateDriver(definedFields({ limits: deps.execLimits, processes: deps.pluginProcesses }));
    return new DriverRegistry(builtInDrivers(deps), delegate);
  }

  constructor(
    drivers: readonly Driver[] = builtInDrivers(),
    readonly delegate: Driver = createDelegateDriver(),
  ) {
    for (const d of drivers) this.byType.set(d.type, d);
    const all = [...drivers, delegate];
    this.undo = undoRunner(all);
    this.lifecycle = new DriverLifecycle(all);
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

  /** The step that runs a plugin's DEL through the delegate driver (for sandboxes Plexus did not attach itself). */
  delegateDel(invocation: DelegateInvocation): UndoStep {
    return delegateDelStep(invocation);
  }

  /** Starts every driver, then their resync loop: once, at daemon start, after recovery. */
  start(settings: LifecycleSettings): Promise<void> {
    return this.lifecycle.start(settings);
  }

  /** Stops the resync loop and every driver (their connections closed). */
  stop(): Promise<void> {
    return this.lifecycle.stop();
  }

  /** Whether the dataplane of driver `type` is up (false for a driver that cannot say). */
  async ready(type: string): Promise<boolean> {
    return (await this.byRecordedType(type)?.ready?.()) ?? false;
  }
}
