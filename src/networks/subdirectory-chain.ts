/**
 * Plugins kept beside a network's config file (CNI spec 1.1 `loadOnlyInlinedPlugins`, libcni 1.3): the `.conf` files
 * of `<dir of the file>/<network name>/`, in name order, run after the network's own plugins. Multus v4.3.0 loads them
 * for a network it reads from a path ending in `.conflist` (its clusterNetwork or a defaultNetworks entry given as a
 * path: k8sclient loadSubdirectoryChain), and for its auxiliary chain; never for a NAD, whose file it reads as bytes.
 */
import { readdirSync, readlinkSync, lstatSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { type CniError, type Result, err, ok } from '../cni/errors';
import type { CniVersion } from '../cni/version';
import { readConfigFile } from './conf-dir';
import { subdirectoryChainErrors } from './errors';
import { parseNetworkConfig, type PluginConfig } from './nad';
import { errorMessage } from '../common/error-message';

/** libcni's rule for a network name that goes into a path (and the CNI spec's for any network name). */
const NETWORK_NAME = /^[a-zA-Z0-9][a-zA-Z0-9_.-]*$/;

export interface ChainedNetwork {
  readonly cniName: string;
  readonly cniVersion: CniVersion;
}

/**
 * The path Multus named: the installer links plexusd's default network to the file Multus's clusterNetwork named,
 * so a link is followed one step (the directory and the extension are the target's, as Multus saw them).
 */
export function namedPath(path: string): string {
  try {
    if (!lstatSync(path).isSymbolicLink()) return path;
    return resolve(dirname(path), readlinkSync(path));
  } catch {
    return path;
  }
}

/** Whether Multus would chain a network read from `path` that says `loadOnlyInlinedPlugins`. */
export const chainsFromDirectory = (path: string, loadOnlyInlinedPlugins: unknown): boolean =>
  namedPath(path).endsWith('.conflist') && loadOnlyInlinedPlugins !== true;

/** The `.conf` files of `<dir>/<network name>/` as plugins of `network`, in name order; none when it does not exist. */
export function subdirectoryPlugins(dir: string, network: ChainedNetwork): Result<PluginConfig[]> {
  if (!NETWORK_NAME.test(network.cniName)) return err(subdirectoryChainErrors.badName(network.cniName));
  const chainDir = join(dir, network.cniName);
  let names: string[];
  try {
    names = readdirSync(chainDir, { withFileTypes: true })
      .filter((e) => !e.isDirectory() && e.name.endsWith('.conf') && e.name !== '.conf')
      .map((e) => e.name)
      .sort();
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return ok([]);
    return err(subdirectoryChainErrors.unreadableDir(chainDir, errorMessage(e)));
  }
  const plugins: PluginConfig[] = [];
  for (const name of names) {
    const plugin = chainedPlugin(join(chainDir, name), network);
    if (!plugin.ok) return plugin;
    plugins.push(plugin.value);
  }
  return ok(plugins);
}

/** One chained file: a single plugin config, given the network's name and cniVersion as libcni gives them. */
function chainedPlugin(path: string, network: ChainedNetwork): Result<PluginConfig> {
  const read = readConfigFile(path);
  if (!read.ok) return err(subdirectoryChainErrors.unreadableFile(path, read.error.reason));
  const text = read.value.toString('utf8');
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (e) {
    return err(subdirectoryChainErrors.notJson(path, errorMessage(e)));
  }
  if (typeof json !== 'object' || json === null || Array.isArray(json) || 'plugins' in json)
    return err(subdirectoryChainErrors.notOnePlugin(path));
  // Parsed as a conf of its own, then renamed and versioned as the network's (libcni's buildOneConfig).
  const parsed = parseNetworkConfig(
    JSON.stringify({ ...json, cniVersion: network.cniVersion }),
    `chained plugin ${path}`,
    network.cniName,
    'the file',
  );
  if (!parsed.ok) return parsed;
  return ok({ ...parsed.value.plugins[0]!, name: network.cniName, cniVersion: network.cniVersion });
}

/** A network's plugins with its directory's appended; a network left with none is refused, as libcni refuses it. */
export function withSubdirectoryChain(
  inline: readonly PluginConfig[],
  dir: string,
  network: ChainedNetwork,
  where: string,
): Result<PluginConfig[], CniError> {
  const chained = subdirectoryPlugins(dir, network);
  if (!chained.ok) return err(chained.error.withContext(where));
  const plugins = [...inline, ...chained.value];
  if (plugins.length === 0) return err(subdirectoryChainErrors.noPlugins(where, join(dir, network.cniName)));
  return ok(plugins);
}
