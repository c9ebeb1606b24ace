/** Finding the host netdev a host-device attachment names: by name, MAC, sysfs device path or PCI address. */
import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { CniCode, CniError, type Result, err, ok } from '../../cni/errors';
import type { LinkInfo } from '../../kernel/types';
import type { DeviceSelector } from './config';

export const describeSelector = (s: DeviceSelector): string => {
  switch (s.by) {
    case 'device':
      return `device ${s.name}`;
    case 'hwaddr':
      return `device with MAC ${s.mac}`;
    case 'kernelpath':
      return `device at ${s.path}`;
    case 'pciBusID':
      return `device of PCI function ${s.pciAddress}`;
  }
};

const notFound = (s: DeviceSelector, why = ''): CniError =>
  new CniError(
    CniCode.InvalidNetworkConfig,
    `${describeSelector(s)} not found on the host${why ? ` (${why})` : ''}`,
    'is it already in use by another pod, or bound to a userspace driver?',
  );

async function netdevNames(dir: string): Promise<string[] | undefined> {
  try {
    return (await readdir(dir)).sort();
  } catch {
    return undefined;
  }
}

/**
 * The link among `links` (the host's) that the selector names. sysfs is read under `sysfsRoot` (tests point it
 * at a fake tree). A PCI function's netdev is listed in <pci device>/net, or <pci device>/virtio*\/net for virtio.
 */
export async function findHostDevice(
  selector: DeviceSelector,
  links: readonly LinkInfo[],
  sysfsRoot = '/sys',
): Promise<Result<LinkInfo>> {
  const byName = (names: readonly string[] | undefined): LinkInfo | undefined =>
    names?.map((n) => links.find((l) => l.name === n)).find((l) => l !== undefined);
  let found: LinkInfo | undefined;
  switch (selector.by) {
    case 'device':
      found = links.find((l) => l.name === selector.name);
      break;
    case 'hwaddr':
      found = links.find((l) => l.mac?.toLowerCase() === selector.mac);
      break;
    case 'kernelpath': {
      const names = await netdevNames(join(sysfsRoot, selector.path.replace(/^\/sys\//, ''), 'net'));
      if (!names) return err(notFound(selector, `${selector.path}/net does not exist`));
      found = byName(names);
      break;
    }
    case 'pciBusID': {
      const device = join(sysfsRoot, 'bus/pci/devices', selector.pciAddress);
      let names = await netdevNames(join(device, 'net'));
      if (!names) {
        const virtio = (await netdevNames(device))?.filter((n) => n.startsWith('virtio')) ?? [];
        for (const v of virtio) names = [...(names ?? []), ...((await netdevNames(join(device, v, 'net'))) ?? [])];
      }
      if (!names?.length) return err(notFound(selector, `no network interface under ${device}`));
      found = byName(names);
      break;
    }
  }
  return found ? ok(found) : err(notFound(selector));
}
