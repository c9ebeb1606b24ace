/** The reference `host-device` plugin's config schema, validated up front. */
import { z } from 'zod';
import { PCI_ADDRESS } from '../../common/pci-address';
import { type Result, err, ok } from '../../cni/errors';
import type { IpamConfig } from '../../ipam';
import type { PluginConfig } from '../../networks/nad';
import { checkLinkName, invalidConfig, ipamField, macField, parseOptionalIpam, parsePluginConfig } from '../common';
import { definedFields } from '../../common/defined-fields';

const HostDeviceSchema = z.looseObject({
  device: z.string().optional(),
  hwaddr: macField.optional(),
  kernelpath: z
    .string()
    .refine(
      (p) => p.startsWith('/sys/devices/') && !p.split('/').includes('..'),
      'must be an absolute path under /sys/devices/',
    )
    .optional(),
  pciBusID: z.string().regex(PCI_ADDRESS, 'must be a PCI address like 0000:3b:00.1').optional(),
  ipam: ipamField,
});

/** How the device is found on the host; the first one set wins, in the reference plugin's order. */
export type DeviceSelector =
  | { readonly by: 'device'; readonly name: string }
  | { readonly by: 'hwaddr'; readonly mac: string }
  | { readonly by: 'kernelpath'; readonly path: string }
  | { readonly by: 'pciBusID'; readonly pciAddress: string };

export interface HostDeviceConfig {
  /** Undefined when the config names no device: it must then come as a deviceID from a device plugin. */
  readonly selector?: DeviceSelector;
  readonly ipam?: IpamConfig;
}

export function parseHostDeviceConfig(plugin: PluginConfig): Result<HostDeviceConfig> {
  const parsed = parsePluginConfig(HostDeviceSchema, plugin);
  if (!parsed.ok) return parsed;
  const c = parsed.value;
  let selector: DeviceSelector | undefined;
  if (c.device !== undefined) {
    const name = checkLinkName(plugin, 'device', c.device);
    if (!name.ok) return name;
    selector = { by: 'device', name: c.device };
  } else if (c.hwaddr !== undefined) selector = { by: 'hwaddr', mac: c.hwaddr.toLowerCase() };
  else if (c.kernelpath !== undefined) selector = { by: 'kernelpath', path: c.kernelpath };
  else if (c.pciBusID !== undefined) selector = { by: 'pciBusID', pciAddress: c.pciBusID.toLowerCase() };
  const ipam = parseOptionalIpam(plugin, c.ipam);
  if (!ipam.ok) return ipam;
  return ok(definedFields({ selector, ipam: ipam.value }));
}

/**
 * A deviceID handed over by a device plugin (SR-IOV), from the attachment options or runtimeConfig, overrides
 * the config, as in the reference plugin. A PCI address is found through sysfs; anything else is taken as a host
 * interface name (Plexus's host-device pools hand out interfaces by name), never vDPA or auxiliary devices.
 */
export function selectorFor(
  plugin: PluginConfig,
  conf: HostDeviceConfig,
  deviceID: string | undefined,
): Result<DeviceSelector> {
  if (deviceID) {
    if (PCI_ADDRESS.test(deviceID)) return ok({ by: 'pciBusID', pciAddress: deviceID.toLowerCase() });
    const name = checkLinkName(plugin, 'deviceID', deviceID);
    if (!name.ok)
      return err(
        invalidConfig(
          plugin,
          `deviceID ${JSON.stringify(deviceID)} from the device plugin is neither a PCI address like 0000:3b:00.1 nor an interface name`,
        ),
      );
    return ok({ by: 'device', name: deviceID });
  }
  if (conf.selector) return ok(conf.selector);
  return err(
    invalidConfig(
      plugin,
      'specify one of "device", "hwaddr", "kernelpath" or "pciBusID", or request the device through a device plugin (deviceID)',
    ),
  );
}
