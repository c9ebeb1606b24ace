/**
 * The runtime's own record of its call to Multus: libcni, in the runtime (containerd, CRI-O), keeps one file per
 * network it attached, `<runtimeCacheDir>/results/<network>-<container>-<ifname>`, naming the network and holding the
 * config it ran. That network is the one a sandbox Multus made was made under (Multus's own name, e.g.
 * `multus-cni-network`): Multus's cache of the sandbox does not say it.
 */
import { readLibcniRecord } from './libcni-records';

/** A name libcni could have given a record here: one file name, inside the directory. */
const isRecordName = (name: string): boolean => !name.includes('/') && !name.includes('\0') && name.length <= 255;

/** Whether the runtime recorded attaching the container's interface under `network`. */
export function runtimeAttachedUnder(
  runtimeCacheDir: string,
  network: string,
  containerId: string,
  ifname: string,
): boolean {
  if (network === '' || containerId === '' || ifname === '') return false;
  if (!isRecordName(`${network}-${containerId}-${ifname}`)) return false;
  // libcni records the config it ran: one of another network at this path is not this network's record.
  return readLibcniRecord(runtimeCacheDir, network, containerId, ifname).config?.name === network;
}
