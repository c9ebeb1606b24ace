/**
 * The one interface every kind of network implements. The engine knows drivers only through this file:
 * a driver plumbs one attachment (attach), can verify it (check), and describes itself (type, capabilities).
 *
 * Detaching is data, not code: before each change a driver makes, it records the step that undoes it.
 * The journal keeps those steps, so rollback, DEL, recovery and GC work from the journal alone, even when
 * the network definition or the driver's config are gone.
 */
import type { Logger } from 'pino';
import type { RuntimeConfig } from '../cni/args';
import { CniCode, CniError, err, type Result } from '../cni/errors';
import type { CniResult, PodIdentity } from '../cni/types';
import type { IpamBackend } from '../ipam';
import type { KernelPort } from '../kernel/kernel';
import type { RouteSpec } from '../kernel/types';
import type { NetworkDefinition, PluginConfig } from '../networks/nad';

export { kernelError } from './common/kernel-error';

/** Capabilities a network's plugins may declare (CNI conventions' capability names). */
export type Capability = 'ips' | 'mac' | 'bandwidth' | 'portMappings' | 'deviceID' | 'infinibandGUID' | 'dns';

/**
 * One step that undoes one change. Undo steps are idempotent: undoing what is already gone succeeds. The generic kinds
 * are every driver's (undo.ts runs them); any other step is a driver's own, opaque to the engine (DriverUndoStep).
 */
export type UndoStep = GenericUndoStep | DriverUndoStep;

export type GenericUndoStep =
  /**
   * Deletes a link. `mark`: the link group the link was created with (a pod link: common/pod-link.ts); a link of that
   * name without it is not the one Plexus made, and is left alone. Steps without a mark (host veths, whose names are
   * the attachment's own, and steps an older plexusd wrote) delete by name.
   */
  | { readonly kind: 'deleteLink'; readonly netns?: string; readonly name: string; readonly mark?: number }
  /**
   * Releases the leases of one owner: `ifname` is the lease's interface (ipam/lease-key.ts), `<runtime>:<pod>` since
   * leases are keyed by the whole attachment, the bare pod interface in steps an older plexusd wrote.
   */
  | { readonly kind: 'releaseIpam'; readonly network: string; readonly containerId: string; readonly ifname: string }
  | { readonly kind: 'deleteRoute'; readonly netns?: string; readonly route: RouteSpec };

/**
 * A step only its driver reads. The journal keeps it as data, before the change, and the registry hands it back to
 * that driver to undo: `driver` is the driver's type, `step` one of its step kinds (Driver.undo), `v` the version of
 * the shape of `data`, which the driver reads (every version it ever wrote; undo.ts maps older plexusds' steps here).
 */
export interface DriverUndoStep {
  readonly kind: 'driver';
  readonly driver: string;
  readonly step: string;
  readonly v: number;
  readonly data: Readonly<Record<string, unknown>>;
}

/** One kind of step a driver records: it reads the step's data, undoes it, and says what it undoes. */
export interface DriverStepKind<T> {
  /** The version of the data this build writes. */
  readonly v: number;
  /** Reads recorded data of version `v`; an error when this build cannot read it. */
  read(data: Readonly<Record<string, unknown>>, v: number): Result<T>;
  /** Undoes it, tolerating what is already gone, so undo can repeat. */
  run(step: T, env: UndoEnv): Promise<Result<void>>;
  describe(step: T): string;
}

/** A driver's step kinds, by name. */
export type DriverStepKinds = Readonly<Record<string, DriverStepKind<never>>>;

/** A kind among a driver's step kinds (DriverStepKinds holds kinds of different data types). */
export const stepKind = <T>(kind: DriverStepKind<T>): DriverStepKind<never> => kind as unknown as DriverStepKind<never>;

/** Records data of a driver's step kind at the version the kind writes. */
export const driverStep = <T extends object>(driver: string, step: string, v: number, data: T): DriverUndoStep => ({
  kind: 'driver',
  driver,
  step,
  v,
  data: data as Readonly<Record<string, unknown>>,
});

/** The data of the steps of one driver's kind among `steps` (for a driver's CHECK or resync), read by `kind`. */
export function stepsOf<T>(steps: readonly UndoStep[], driver: string, step: string, kind: DriverStepKind<T>): T[] {
  const out: T[] = [];
  for (const s of steps) {
    if (s.kind !== 'driver' || s.driver !== driver || s.step !== step) continue;
    const read = kind.read(s.data, s.v);
    if (read.ok) out.push(read.value);
  }
  return out;
}

export interface AttachRequest {
  readonly containerId: string;
  readonly netns: string;
  /** The interface in the pod (net1, data0, or the runtime's own for the default network). */
  readonly ifname: string;
  /**
   * The runtime's CNI_IFNAME. With the container ID and `ifname` it is the attachment's identity: a container may be
   * ADDed under several CNI_IFNAMEs, so everything made for an attachment (leases, host names) is keyed by all three.
   */
  readonly runtimeIfname: string;
  readonly pod: PodIdentity;
  readonly network: NetworkDefinition;
  readonly plugin: PluginConfig;
  /** Static IPs requested for this attachment (CNI_ARGS IP=, runtimeConfig ips, the selection's `ips`). */
  readonly ips: readonly string[];
  readonly mac?: string;
  readonly runtimeConfig: RuntimeConfig;
  /** Per-attachment options from the selection annotation or the runtime, passed to delegates as runtimeConfig. */
  readonly options?: AttachmentOptions;
  /**
   * CNI_ARGS for delegated plugins: the runtime's, less IP= and MAC= on secondary networks (they request the
   * default network's address), which get the selection's mac and ips as MAC= and IP= instead, as Multus passes
   * them. The selection's cni-args go into the plugin config's `args`, not here.
   */
  readonly cniArgs?: string;
}

export interface AttachmentOptions {
  readonly infinibandGUID?: string;
  readonly deviceID?: string;
  /**
   * The device the kubelet allocated to the pod for the network's k8s.v1.cni.cncf.io/resourceName (deviceID is then
   * the same): delegated plugins also get it as top-level `deviceID` and `pciBusID`, as Multus passes it.
   */
  readonly kubeletDevice?: { readonly resourceName: string; readonly deviceID: string };
  readonly bandwidth?: Readonly<Record<string, unknown>>;
  readonly portMappings?: readonly Readonly<Record<string, unknown>>[];
  /** Extra `args` for the plugin config ("cni-args" in the selection annotation). */
  readonly cniArgs?: Readonly<Record<string, unknown>>;
  /** The IPAMClaim (in the pod's namespace) that owns the attachment's addresses: the selection's ipam-claim-reference. */
  readonly ipamClaim?: string;
  /**
   * The chain's first plugin gets this as its prevResult, as if a plugin before it had returned it (the auxiliary
   * chain's: Multus runs a `passthru` plugin there, which returns an empty result and whose DEL does nothing).
   */
  readonly chainPrevResult?: CniResult;
}

export interface DriverEnv {
  readonly kernel: KernelPort;
  readonly ipam: IpamBackend;
  /** Durably records how to undo the change the driver is about to make. Must be awaited before the change. */
  record(step: UndoStep): Promise<void>;
  /** Optional link group for host-side links, so operators can find or delete them together. */
  readonly hostLinkGroup?: number;
  /** Where delegated CNI plugins are found (the daemon's --cni-bin-dir). */
  readonly cniBinDir: string;
  /**
   * Aborted when the runtime has given up on the call (it closed its connection): a driver stops at its next safe
   * point and fails; a delegated plugin still running is killed. The engine then rolls back from the journal.
   */
  readonly signal?: AbortSignal;
}

/** A committed attachment as the journal keeps it, for a driver's own CHECK. */
export interface RecordedAttachment {
  readonly network: string;
  readonly ifname: string;
  /** This attachment's own result (the pod's CNI result merges all of them). */
  readonly result: CniResult;
  /** The undo steps recorded for it, in order (a delegated network's plugin invocations among them). */
  readonly steps: readonly UndoStep[];
}

/** A container and interface that still hold an attachment on a network (the valid list of a CNI GC). */
export interface LiveAttachment {
  readonly containerId: string;
  readonly ifname: string;
}

/**
 * A kind of network. `C` is its parsed config: the engine parses a network once, up front, before anything is made,
 * and hands the typed result to attach.
 */
export interface Driver<C = unknown> {
  /** The CNI plugin type this driver runs natively (e.g. "bridge"). */
  readonly type: string;
  readonly capabilities: readonly Capability[];
  /** Parses and validates the network's plugin config(s), without touching anything. */
  parse(plugins: readonly PluginConfig[]): Result<C>;
  attach(req: AttachRequest, config: C, env: DriverEnv): Promise<Result<CniResult>>;
  /**
   * CHECK beyond the pod's kernel state the engine verifies itself (a delegated network asks its plugins; a bridge
   * port's driver looks at the node's side of it). `config`: the network's config as it is defined now, parsed by
   * this driver (the reference plugins CHECK against the config the runtime hands them), when it still is.
   */
  check?(attachment: RecordedAttachment, env: CheckEnv, config?: C): Promise<Result<void>>;
  /** GC of state the driver keeps outside the journal, for one network, given the attachments still on it. */
  gc?(network: NetworkDefinition, live: readonly LiveAttachment[], cniBinDir: string): Promise<Result<void>>;
  /** STATUS: whether the network can take ADDs now. */
  status?(network: NetworkDefinition, cniBinDir: string): Promise<Result<void>>;
  /** The step kinds only this driver records and undoes (DriverUndoStep; the generic ones are in undo.ts). */
  readonly undo?: DriverStepKinds;
  /**
   * Starts what the driver keeps running besides attachments (connections, watches). The registry calls it once at
   * daemon start, after recovery and before the daemon says it is ready; `ctx` stays the driver's until stop.
   */
  start?(ctx: DriverContext): Promise<void> | void;
  /**
   * Makes state the dataplane lost (outside the journal) again from the journal: the registry runs it every resync
   * interval and whenever the driver asks (DriverContext.requestResync), never two at once for one driver.
   */
  resync?(why: string): Promise<void>;
  /** Whether the dataplane the driver depends on is up now (memif: the node's switch has DPDK), for device health. */
  ready?(): Promise<boolean>;
  /** Ends what start started and closes the driver's connections. */
  stop?(): Promise<void> | void;
}

/** What the registry hands a driver at start: the daemon's log and the journal's view of what was made. */
export interface DriverContext {
  readonly log: Logger;
  /** The node's kernel (a driver that heals what an older plexusd left, e.g. the bridges' MACs, at start). */
  readonly kernel: KernelPort;
  /** The undo steps of every committed attachment, as the journal holds them now (a resync reads its own kinds). */
  readonly recordedSteps: () => Promise<readonly UndoStep[]>;
  /** Asks the registry to run this driver's resync soon (its dataplane reconnected and may have lost state). */
  readonly requestResync: (why: string) => void;
}

/** Where a driver finds the node: the netns its host side lives in (a test's stand-in), the daemon's own when unset. */
export interface NodeOption {
  readonly node?: string;
}

/** What a driver's CHECK may use. */
export interface CheckEnv {
  readonly kernel: KernelPort;
}

/** What an undo step may use. */
export interface UndoEnv {
  readonly kernel: KernelPort;
  readonly ipam: IpamBackend;
}

/** Runs the generic kinds of undo step; each tolerates what is already gone, so undo can repeat. */
export type GenericUndoHandlers = {
  readonly [K in GenericUndoStep['kind']]: (
    step: Extract<GenericUndoStep, { kind: K }>,
    env: UndoEnv,
  ) => Promise<Result<void>>;
};

/**
 * The parse of a native driver, which runs a network of exactly one plugin. Each call makes a parser with a cache of its
 * own (a driver instance's): network definitions are kept until their file changes, so every ADD of a network hands
 * the driver the same plugin object, and it is validated once.
 */
export function onePlugin<C>(
  parse: (plugin: PluginConfig) => Result<C>,
): (plugins: readonly PluginConfig[]) => Result<C> {
  const parsed = new WeakMap<PluginConfig, Result<C>>();
  return (plugins) => {
    const [only] = plugins;
    if (plugins.length !== 1 || !only) return err(notOnePlugin(plugins.length));
    let r = parsed.get(only);
    if (!r) {
      r = parse(only);
      parsed.set(only, r);
    }
    return r;
  };
}

const notOnePlugin = (count: number): CniError =>
  new CniError(CniCode.InvalidNetworkConfig, `a native driver runs a network of one plugin, not ${count}`);
