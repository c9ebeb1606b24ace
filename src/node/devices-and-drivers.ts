/**
 * The kubelet's devices (device plugins and the pod-resources API) and the drivers, with the process-wide limits
 * they run within: delegated plugin execs (and the set of those running), made here, and the CNI call slots
 * (node-state.ts), handed in. Devices and drivers know each other: memif devices' health may follow the node's
 * switch, through the memif driver, and the memif driver takes the sockets of the memif devices a pod was allocated.
 * Both are looked up at call time, when each exists.
 */
import { join } from 'node:path';
import type { Logger } from 'pino';
import { MultusSandboxes } from '../adopt/multus-sandboxes';
import type { CallSlots } from '../common/call-slots';
import { definedFields } from '../common/defined-fields';
import { DevicePlugins, PodResourcesClient } from '../deviceplugin';
import type { DeviceSource } from '../engine/kubelet-devices';
import { ExecLimits, execPlugin, PluginPidFiles, PluginProcesses } from '../drivers/delegate';
import type { MemifDriverOptions } from '../drivers/memif';
import type { VxlanCluster } from '../drivers/vxlan';
import type { DraDriver } from '../dra';
import { heldByClaims } from './dra';
import { DriverRegistry } from '../drivers/registry';
import type { ApiConnection } from '../k8s/connect';
import type { DaemonConfig } from './config';

export interface DevicesAndDrivers {
  readonly podResources?: PodResourcesClient;
  /** Where a network naming a resource gets its device: the kubelet's allocations, then other DRA drivers' claims. */
  readonly devices?: DeviceSource;
  readonly devicePlugins?: DevicePlugins;
  readonly slots: CallSlots;
  readonly drivers: DriverRegistry;
  /** The delegated plugins running now: a stopping plexusd kills and waits for them (shutdown.ts). */
  readonly pluginProcesses: PluginProcesses;
  /** Sandboxes Multus made before Plexus took the node over: their DEL is run as Multus would have. */
  readonly foreign?: MultusSandboxes;
}

/** On a Kubernetes node (or with device plugins), networks naming a resource get their device from the kubelet. */
export const kubeletPodResources = (config: DaemonConfig, api: ApiConnection | undefined) =>
  api || config.devicePluginConfig ? new PodResourcesClient(config.podResourcesSocket) : undefined;

/** What the devices and drivers are made with, besides plexusd's flags. */
export interface PlumbingInputs {
  readonly slots: CallSlots;
  readonly api: ApiConnection | undefined;
  readonly podResources: PodResourcesClient | undefined;
  /** plexusd's DRA driver (--dra): the devices its claims hold are its own. */
  readonly dra: DraDriver | undefined;
}

/** Undefined (logged as fatal) when the device plugins' resources file cannot be used. */
export async function devicesAndDrivers(
  config: DaemonConfig,
  log: Logger,
  inputs: PlumbingInputs,
): Promise<DevicesAndDrivers | undefined> {
  const { slots, api, podResources, dra } = inputs;
  const devices = api && podResources ? await withOtherDriversClaims(api, podResources, log) : podResources;
  const loaded =
    config.devicePluginConfig && podResources
      ? DevicePlugins.load(
          config.devicePluginConfig,
          {
            devicePluginDir: config.devicePluginDir,
            deviceInfoDir: config.deviceInfoDir,
            stateDir: config.stateDir,
            switchReady: () => drivers.ready('memif'),
            ...(dra ? { heldByDra: heldByClaims(dra) } : {}),
          },
          podResources,
          log,
        )
      : undefined;
  if (loaded && !loaded.ok) {
    log.fatal({ devicePluginConfig: config.devicePluginConfig }, loaded.error.message);
    return undefined;
  }
  const devicePlugins = loaded?.value;
  // A call waiting on a delegated plugin lends its CNI slot, and each delegated network has its own share of plugin
  // execs, so one hung plugin stalls only its own network.
  const execLimits = new ExecLimits({
    perNetwork: config.delegateShare,
    total: config.maxDelegateExecs,
    maxQueued: config.maxQueued,
    lendSlot: (wait) => slots.lendWhile(wait),
  });
  const pluginProcesses = await withLeftoversStopped(config, log);
  const memif = memifOptions(config, { dra, api, devices: devicePlugins });
  const vxlan = api ? await vxlanCluster(api, log) : undefined;
  const drivers = DriverRegistry.create({ execLimits, pluginProcesses, memif, ...definedFields({ vxlan }) });
  const foreign = config.multusCacheDir
    ? new MultusSandboxes({
        cacheDir: config.multusCacheDir,
        // libcni's default, as containerd and CRI-O use it.
        runtimeCacheDir: config.runtimeCniCacheDir ?? '/var/lib/cni',
        cniBinDir: config.cniBinDir,
        log: log.child({ component: 'adopt' }),
        exec: (call) => execPlugin(call, { limits: execLimits, processes: pluginProcesses }),
      })
    : undefined;
  const parts = { slots, drivers, pluginProcesses };
  return { ...parts, ...optional({ podResources, devices, devicePlugins, foreign }) };
}

/** Cluster-mode vxlan networks find their peers on the node Leases (src/k8s/vtep-leases.ts). */
async function vxlanCluster(api: ApiConnection, log: Logger): Promise<VxlanCluster> {
  const { vtepLeasesFor } = await import('./node-lease');
  const networks = api.networks;
  return { directory: vtepLeasesFor(api.client, api.nodeName, log), networks: () => networks.list().networks };
}

/** How long a start waits for the plugins a dead plexusd left running to go, once killed. */
const LEFTOVER_WAIT_MS = 2000;

/**
 * The node's running plugins, noted in the state dir; those a plexusd that died without its stop (SIGKILL, OOM) left
 * running are killed first: the lock on the state dir is held, so they are no live daemon's, and recovery, which
 * undoes their calls, must not run beside them.
 */
async function withLeftoversStopped(config: DaemonConfig, log: Logger): Promise<PluginProcesses> {
  const processes = new PluginProcesses(new PluginPidFiles(join(config.stateDir, 'plugins')));
  const stopped = await processes.stopLeftovers(LEFTOVER_WAIT_MS);
  if (stopped.killed > 0) log.warn(stopped, 'killed delegated plugins a previous plexusd left running');
  return processes;
}

/** ... and from other DRA drivers' claims, as Multus reads them (src/dra/consumer): merged after the kubelet's. */
async function withOtherDriversClaims(
  api: ApiConnection,
  podResources: PodResourcesClient,
  log: Logger,
): Promise<DeviceSource> {
  const consumer = await import('../dra/consumer');
  const port = new consumer.ApiClaimsPort(api.client);
  const claimed = new consumer.ClaimDeviceReader(port, { log: log.child({ component: 'dra-consumer' }) });
  return consumer.withClaimedDevices(podResources, claimed);
}

/**
 * memif networks: ports on the node's userspace switch, with sockets from plexusd's own memif devices: a plexus.io
 * claim's, else the device plugin's.
 */
function memifOptions(
  config: DaemonConfig,
  from: { dra: DraDriver | undefined; api: ApiConnection | undefined; devices: DevicePlugins | undefined },
): MemifDriverOptions {
  const { dra, api, devices } = from;
  return {
    defaultOvsdbSocket: config.ovsdbSocket,
    owner: api?.nodeName ?? 'plexus',
    deviceSocket: (resource: string, id: string) =>
      dra?.memifSocket(resource, id) ?? devices?.memifSocket(resource, id),
  };
}

type Defined<T> = { [K in keyof T]?: Exclude<T[K], undefined> };

/** The entries of `parts` that are defined (optional fields here may be absent, never undefined). */
function optional<T extends object>(parts: T): Defined<T> {
  return Object.fromEntries(Object.entries(parts).filter(([, v]) => v !== undefined)) as Defined<T>;
}
