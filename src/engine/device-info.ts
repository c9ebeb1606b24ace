/**
 * The device-info file a device plugin (any, as Multus reads them) wrote for an attachment's kubelet device. A bad
 * file is the plugin's problem, not the pod's: it is left out of network-status, with a debug line saying why.
 */
import type { Logger } from 'pino';
import { loadDeviceInfo } from '../deviceplugin/device-info';
import type { AttachmentStep } from './plan';

export function deviceInfoOf(
  step: AttachmentStep,
  deviceInfoDir: string | undefined,
  log: Logger,
): Record<string, unknown> | undefined {
  const device = step.request.options?.kubeletDevice;
  if (!device || !deviceInfoDir) return undefined;
  const read = loadDeviceInfo(deviceInfoDir, device.resourceName, device.deviceID);
  if (read.kind === 'malformed') {
    const why = { network: step.planned.network.key, path: read.path, reason: read.reason };
    log.debug(why, 'device-info file ignored');
  }
  return read.kind === 'found' ? read.info : undefined;
}
