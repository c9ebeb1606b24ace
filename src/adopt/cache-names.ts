/**
 * The names Plexus reads from Multus's and libcni's caches (container IDs, network and interface names, plugin types)
 * reach those files from pods' annotations and NADs, through another program: each is checked here, by the rule libcni
 * applies before it runs a plugin, before it goes into a path or an exec. A name libcni refuses never came out of one
 * of its ADDs, so a delegate that carries one has nothing for a DEL to remove.
 */
import { stat } from 'node:fs/promises';
import { join } from 'node:path';
import { interfaceNameProblem } from '../cni/ifname';
import { cniNameProblem } from '../cni/names';
import { validatePluginType } from '../drivers/delegate/exec';
import { PLEXUS_PLUGIN_TYPE } from '../networks/nad';

/** The names a cached network is filed and run under. */
export interface CachedNames {
  readonly containerId?: string;
  readonly network: string;
  readonly ifname: string;
}

const described = (what: string, value: string, problem: string | undefined): string | undefined =>
  problem === undefined ? undefined : `its ${what} ${JSON.stringify(value)} ${problem}`;

/** Why these names cannot be a network libcni attached (the first that fails, named), or undefined when they can. */
export function cachedNamesProblem(names: CachedNames): string | undefined {
  const { containerId, network, ifname } = names;
  return (
    (containerId === undefined ? undefined : described('container ID', containerId, cniNameProblem(containerId))) ??
    described('network name', network, cniNameProblem(network)) ??
    described('interface name', ifname, interfaceNameProblem(ifname))
  );
}

/** `dir/name` when `name` is one entry of `dir`; undefined for a name that would make a path leave it. */
export function entryOf(dir: string, name: string): string | undefined {
  if (name === '' || name === '.' || name === '..' || name.includes('/') || name.includes('\0')) return undefined;
  return join(dir, name);
}

/**
 * Why a cached config's plugin is never run: not a plugin name, or Plexus itself (a Multus that wrapped Plexus), whose
 * shim would call this daemon back with a call that waits for the one running it.
 */
export function pluginTypeProblem(type: string): string | undefined {
  const valid = validatePluginType(type);
  if (!valid.ok) return valid.error.message;
  if (type === PLEXUS_PLUGIN_TYPE)
    return `plugin type "${type}" is Plexus's own: running it would call Plexus recursively`;
  return undefined;
}

/** Whether the plugin found at `path` is Plexus's shim under another name (the same file, linked). */
export async function isPlexusShim(path: string, cniPath: string): Promise<boolean> {
  const found = await stat(path).catch(() => undefined);
  if (!found) return false;
  for (const dir of cniPath.split(':').filter(Boolean)) {
    const shim = await stat(join(dir, PLEXUS_PLUGIN_TYPE)).catch(() => undefined);
    if (shim && shim.dev === found.dev && shim.ino === found.ino) return true;
  }
  return false;
}
