/**
 * DRA (--dra): the resources file's `dra` resources as ResourceSlices and a kubelet DRA plugin (docs/dra.md). Made
 * before the engine, which reads the pods' claimed devices at ADD, and started right after it, before the API caches.
 */
import type { Logger } from 'pino';
import type { PodResourcesClient } from '../deviceplugin';
import { loadResources } from '../deviceplugin/config';
import type { DraDriver } from '../dra';
import type { ApiConnection } from '../k8s/connect';
import type { DaemonConfig } from './config';
import type { DevicesAndDrivers } from './devices-and-drivers';

/** The DRA driver (not started), or undefined (with the reason logged) when --dra cannot work here. */
export async function createDra(
  config: DaemonConfig,
  log: Logger,
  api: ApiConnection | undefined,
  podResources: PodResourcesClient | undefined,
  attachedPods: () => Promise<ReadonlySet<string>>,
): Promise<DraDriver | undefined> {
  if (!config.dra) return undefined;
  if (!api || !config.devicePluginConfig) {
    log.warn('--dra needs the Kubernetes API and --device-plugin-config (the resources file): DRA is off');
    return undefined;
  }
  const resources = loadResources(config.devicePluginConfig);
  if (!resources.ok) return undefined; // already reported by the device plugins' load of the same file
  const { DraDriver, DEFAULT_KUBELET_ROOT, DEFAULT_CDI_DIR } = await import('../dra');
  const dra = DraDriver.create(
    resources.value,
    api.client,
    {
      nodeName: api.nodeName,
      kubeletRoot: config.kubeletRootDir ?? DEFAULT_KUBELET_ROOT,
      stateDir: config.stateDir,
      cdiDir: config.cdiDir ?? DEFAULT_CDI_DIR,
      deviceInfoDir: config.deviceInfoDir,
      networks: api.networks,
      attachedPods,
      isolation: { namespaceIsolation: config.namespaceIsolation, globalNamespaces: config.globalNamespaces },
      ...(podResources ? { inUseByDevicePlugin: (r: string, id: string) => podResources.inUse(r, id) } : {}),
    },
    log,
  );
  if (!dra) log.warn({ devicePluginConfig: config.devicePluginConfig }, '--dra: no resource of the file offers dra');
  return dra;
}

/**
 * Starts the driver; from then on the device plugin does not offer a device one of its prepared claims holds, and the
 * memif driver serves the sockets of the memif devices they hold.
 */
export async function startDra(dra: DraDriver, holds: DevicesAndDrivers['draHolds']) {
  await dra.start();
  holds.check = (r, id) =>
    dra.prepared.all().some((c) => c.devices.some((d) => d.resourceName === r && d.deviceID === id));
  holds.socket = (r, id) => dra.memifSocket(r, id);
}
