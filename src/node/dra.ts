/**
 * DRA (--dra): the resources file's `dra` resources as ResourceSlices and a kubelet DRA plugin (docs/dra.md). Made
 * before the devices and drivers, which ask it which devices its claims hold (device-plugins do not offer those, the
 * memif driver serves their sockets), and before the engine, which reads the pods' claimed devices at ADD; started
 * right after the engine, before the API caches.
 */
import type { Logger } from 'pino';
import type { PodResourcesClient } from '../deviceplugin';
import { loadResources } from '../deviceplugin/config';
import type { DraDriver } from '../dra';
import type { ApiConnection } from '../k8s/connect';
import type { DaemonConfig } from './config';

/** What the DRA driver is made with, besides plexusd's flags. */
export interface DraInputs {
  readonly api: ApiConnection | undefined;
  /** The kubelet's allocations: a device one holds is not prepared for a claim. */
  readonly podResources: PodResourcesClient | undefined;
  /** UIDs of the pods with attachments here (the engine's records): their claims are never stale. */
  readonly attachedPods: () => Promise<ReadonlySet<string>>;
}

/** The DRA driver (not started), or undefined (with the reason logged) when --dra cannot work here. */
export async function createDra(config: DaemonConfig, log: Logger, inputs: DraInputs): Promise<DraDriver | undefined> {
  const { api, podResources, attachedPods } = inputs;
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
    { api: api.client },
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

/** Whether one of the claims `dra` prepared holds a device: the device plugin does not offer it meanwhile. */
export const heldByClaims =
  (dra: DraDriver) =>
  (resourceName: string, deviceID: string): boolean =>
    dra.prepared.all().some((c) => c.devices.some((d) => d.resourceName === resourceName && d.deviceID === deviceID));
