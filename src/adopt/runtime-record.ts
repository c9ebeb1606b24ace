/**
 * The runtime's own record of its call to Multus: libcni, in the runtime (containerd, CRI-O), keeps one file per
 * network it attached, `<runtimeCacheDir>/results/<network>-<container>-<ifname>`, naming the network and holding the
 * config it ran. That network is the one a sandbox Multus made was made under (Multus's own name, e.g.
 * `multus-cni-network`): Multus's cache of the sandbox does not say it.
 */
import { readdirSync, rmSync } from 'node:fs';
import { errorMessage } from '../common/error-message';
import { isJsonObject } from '../common/json-object';
import { libcniRecordPath, libcniResultsDir, readLibcniRecord } from './libcni-records';

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

/** Whether a recorded config is Multus's: a conf of type multus or multus-shim, or a conflist that starts with one. */
function isMultusConfig(config: Record<string, unknown> | undefined): boolean {
  const first: unknown = Array.isArray(config?.plugins) ? (config.plugins as unknown[])[0] : config;
  const type = isJsonObject(first) ? first.type : undefined;
  return type === 'multus' || type === 'multus-shim';
}

/** What removeRuntimeRecordsOfMultus did: the records removed, and those it could not remove with the reason. */
export interface RuntimeRecordsRemoval {
  readonly removed: readonly string[];
  readonly kept: readonly { readonly path: string; readonly reason: string }[];
}

/**
 * Removes the runtime's records of its calls to Multus for this container's interface, as libcni removes a record
 * once its DEL succeeded. Once Plexus took Multus's place, the runtime's DEL of a sandbox Multus made runs under
 * Plexus's name: libcni removes the record of that name and would leave Multus's behind for good. Only a record whose
 * config, as it ran, is Multus's is removed; `containerId` and `ifname` are names already checked.
 */
export function removeRuntimeRecordsOfMultus(
  runtimeCacheDir: string,
  containerId: string,
  ifname: string,
): RuntimeRecordsRemoval {
  const suffix = `-${containerId}-${ifname}`;
  let names: string[];
  try {
    names = readdirSync(libcniResultsDir(runtimeCacheDir)).filter((n) => n.endsWith(suffix) && n !== suffix);
  } catch {
    return { removed: [], kept: [] }; // no records at all
  }
  const removed: string[] = [];
  const kept: { path: string; reason: string }[] = [];
  for (const network of names.map((n) => n.slice(0, -suffix.length))) {
    const record = readLibcniRecord(runtimeCacheDir, network, containerId, ifname);
    const path = libcniRecordPath(runtimeCacheDir, network, containerId, ifname);
    if (path === undefined || record.config?.name !== network || !isMultusConfig(record.config)) continue;
    try {
      rmSync(path, { force: true });
      removed.push(path);
    } catch (e) {
      kept.push({ path, reason: errorMessage(e) });
    }
  }
  return { removed, kept };
}
