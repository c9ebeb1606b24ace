/**
 * plexusd's kubelet-facing device side: the resources it offers as device plugins (--device-plugin-config), and
 * the kubelet's pod-resources API, which tells the engine which device each pod got.
 */
import type { Logger } from 'pino';
import { CniCode, CniError, err, ok, type Result } from '../cni/errors';
import { loadResources, offers, type ResourceConfig } from './config';
import type { PodResourcesClient } from './pod-resources';
import { ResourcePlugin, type PluginEvents } from './plugin-server';
import { HostDevicePool } from './host-device-pool';
import { MemifDevices } from './memif-devices';
import type { DeviceResource } from './resources';
import { definedFields } from '../common/defined-fields';

export interface DevicePluginSettings {
  /** Where the kubelet takes registrations: hard-coded in the kubelet as /var/lib/kubelet/device-plugins. */
  readonly devicePluginDir: string;
  readonly deviceInfoDir: string;
  readonly stateDir?: string;
  readonly healthIntervalMs?: number;
  /** Whether the node's userspace switch can serve memif ports now (memif resources with healthFromSwitch). */
  readonly switchReady?: () => Promise<boolean>;
  /** Whether a prepared DRA claim holds a device (resources offered both ways): it is not offered meanwhile. */
  readonly heldByDra?: (resourceName: string, deviceID: string) => boolean;
}

export class DevicePlugins {
  readonly plugins: readonly ResourcePlugin[];
  readonly memif: ReadonlyMap<string, MemifDevices>;

  private constructor(plugins: ResourcePlugin[], memif: Map<string, MemifDevices>) {
    this.plugins = plugins;
    this.memif = memif;
  }

  static create(
    resources: readonly ResourceConfig[],
    settings: DevicePluginSettings,
    podResources: PodResourcesClient,
    log: Logger,
    events: PluginEvents = {},
  ): DevicePlugins {
    const env = {
      deviceInfoDir: settings.deviceInfoDir,
      ...definedFields({
        stateDir: settings.stateDir || undefined,
        healthIntervalMs: settings.healthIntervalMs || undefined,
        switchReady: settings.switchReady,
        heldByDra: settings.heldByDra,
      }),
      inUse: (resource: string, id: string) => podResources.inUse(resource, id),
    };
    const memif = new Map<string, MemifDevices>();
    // Resources offered only as DRA devices are src/dra's (the same file configures both).
    const plugins = resources
      .filter((r) => offers(r, 'device-plugin'))
      .map((r) => {
        let resource: DeviceResource;
        if (r.kind === 'memif') {
          const m = new MemifDevices(r, env);
          m.removeStale();
          memif.set(r.name, m);
          resource = m;
        } else resource = new HostDevicePool(r, env);
        return new ResourcePlugin(
          resource,
          settings.devicePluginDir,
          log.child({ component: 'device-plugin' }),
          events,
        );
      });
    return new DevicePlugins(plugins, memif);
  }

  /** From --device-plugin-config; an unreadable or invalid file is an error that names it. */
  static load(
    file: string,
    settings: DevicePluginSettings,
    podResources: PodResourcesClient,
    log: Logger,
  ): Result<DevicePlugins> {
    const resources = loadResources(file);
    if (!resources.ok) return err(resources.error);
    return ok(DevicePlugins.create(resources.value, settings, podResources, log));
  }

  /**
   * The socket of a memif device the kubelet allocated (for the memif driver): undefined when `resourceName` is not one
   * of this plexusd's memif resources; an error when the device has no allocation on record.
   */
  memifSocket(
    resourceName: string,
    deviceID: string,
  ): Result<{ hostSocket: string; podSocket: string; secret: string }> | undefined {
    const resource = this.memif.get(resourceName);
    if (!resource) return undefined;
    const a = resource.allocation(deviceID);
    if (!a)
      return err(
        new CniError(
          CniCode.TryAgainLater,
          `${resourceName} device ${deviceID} has no allocation on record`,
          "the kubelet allocates a device before the pod sandbox is made; was plexusd's state dir lost?",
        ),
      );
    return ok({ hostSocket: a.socket, podSocket: resource.containerSocket(deviceID), secret: a.secret });
  }

  async start(): Promise<void> {
    await Promise.all(this.plugins.map((p) => p.start()));
  }

  async stop(): Promise<void> {
    await Promise.all(this.plugins.map((p) => p.stop()));
  }
}
