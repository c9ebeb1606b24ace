/**
 * Which network a pod gets as its default (CNI_IFNAME, `default: true` in its status): the pod's own choice in the
 * `v1.multus-cni.io/default-network` annotation (Multus's override), else the CNI config's "defaultNetwork", else
 * plexusd's --default-network. A configured default is a NAD reference (`[namespace/]name`) or the absolute path of
 * a CNI config file on the node (Multus's clusterNetwork as a file), which is always run by the node's own plugins.
 */
import { dirname } from 'node:path';
import { readConfigFile } from './conf-dir';
import { CniCode, CniError, err, ok, type Result } from '../cni/errors';
import { defaultNetworkErrors } from './errors';
import { isolationProblem, type IsolationSettings } from './isolation';
import { type NetworkDefinition, parseNetworkConfig, PLEXUS_PLUGIN_TYPE } from './nad';
import { parseNetworkRef } from './network-ref';
import { DELEGATE_ANNOTATION } from './planner';
import { parseSelection } from './selection';
import { chainsFromDirectory, namedPath, withSubdirectoryChain } from './subdirectory-chain';
import type { NetworkSource } from './source';

export const DEFAULT_NETWORK_ANNOTATION = 'v1.multus-cni.io/default-network';

export interface DefaultNetworkInput {
  /** The CNI config's "defaultNetwork", else --default-network. */
  readonly configured: string | undefined;
  readonly annotations: Readonly<Record<string, string>>;
  readonly podNamespace: string;
  readonly networks: NetworkSource;
  readonly isolation: IsolationSettings;
}

export function chooseDefaultNetwork(input: DefaultNetworkInput): Result<NetworkDefinition> {
  const override = input.annotations[DEFAULT_NETWORK_ANNOTATION];
  if (override !== undefined) return podOverride(override, input);
  const configured = input.configured;
  if (!configured) return err(defaultNetworkErrors.unset());
  if (configured.startsWith('/')) return fromFile(configured);
  const ref = parseNetworkRef(configured);
  if (!ref.ok) return ref;
  const network = input.networks.get(ref.value.namespace, ref.value.name);
  return network.ok ? network : err(network.error.withContext('the default network'));
}

/**
 * The annotation names exactly one network, with nothing else asked of it (its interface is CNI_IFNAME): `name`,
 * `namespace/name`, a JSON list of one element or that element alone (`{"name": ..., "namespace": ...}`).
 */
function podOverride(text: string, input: DefaultNetworkInput): Result<NetworkDefinition> {
  // One JSON object is read as the list of one that the selection annotation's JSON form is.
  const listed = text.trim().startsWith('{') ? `[${text}]` : text;
  const parsed = parseSelection(listed, input.podNamespace, DEFAULT_NETWORK_ANNOTATION);
  if (!parsed.ok) return parsed;
  const invalid = (why: string): Result<never> =>
    err(
      new CniError(
        CniCode.InvalidNetworkConfig,
        `${DEFAULT_NETWORK_ANNOTATION}: ${why}`,
        `value: ${JSON.stringify(text.slice(0, 200))}`,
      ),
    );
  if (parsed.value.length !== 1) return invalid(`must name exactly one network, not ${parsed.value.length}`);
  const sel = parsed.value[0]!;
  const extras = (
    ['interface', 'ips', 'mac', 'defaultRoute', 'portMappings', 'bandwidth', 'cniArgs', 'infinibandGUID'] as const
  ).filter((k) => sel[k] !== undefined);
  if (extras.length) {
    return invalid(
      `only selects the network; ${extras.join(', ')} cannot be set here ` +
        "(the default network's interface is the runtime's, its requests come from the runtime)",
    );
  }
  const refused = isolationProblem(input.isolation, input.podNamespace, sel, DEFAULT_NETWORK_ANNOTATION);
  if (refused) return err(refused);
  const network = input.networks.get(sel.namespace, sel.name);
  return network.ok
    ? network
    : err(network.error.withContext(`${DEFAULT_NETWORK_ANNOTATION} (the pod's default network)`));
}

/**
 * A `.conflist` file Multus would chain from its directory (subdirectory-chain.ts). One that has no plugin of its own
 * (neither "plugins" nor "type": libcni allows it there) is parsed as a list of a placeholder, dropped once the
 * directory's are added.
 */
function chainedFile(text: string, path: string): { text: string; fromDirectory: boolean; inline: boolean } {
  let conf: unknown;
  try {
    conf = JSON.parse(text);
  } catch {
    return { text, fromDirectory: false, inline: true };
  }
  if (typeof conf !== 'object' || conf === null || Array.isArray(conf))
    return { text, fromDirectory: false, inline: true };
  const record = conf as Record<string, unknown>;
  if (!chainsFromDirectory(path, record.loadOnlyInlinedPlugins)) return { text, fromDirectory: false, inline: true };
  // A single plugin's config in a .conflist file (libcni would find no plugins in it) is read as before: one plugin.
  if ('plugins' in record || 'type' in record) return { text, fromDirectory: true, inline: true };
  return { text: JSON.stringify({ ...record, plugins: [{ type: 'none' }] }), fromDirectory: true, inline: false };
}

/** A CNI config file on the node, read on each use so an update of the file applies to the next pod. */
function fromFile(path: string): Result<NetworkDefinition> {
  const read = readConfigFile(path);
  if (!read.ok) return err(defaultNetworkErrors.unreadableFile(path, read.error.reason));
  const text = read.value.toString('utf8');
  const where = `the default network (${path})`;
  const chained = chainedFile(text, path);
  const parsed = parseNetworkConfig(chained.text, where, '', 'the file');
  if (!parsed.ok) return parsed;
  if (!parsed.value.cniName) return err(defaultNetworkErrors.fileWithoutName(path));
  const plugins = chained.fromDirectory
    ? withSubdirectoryChain(chained.inline ? parsed.value.plugins : [], dirname(namedPath(path)), parsed.value, where)
    : ok(parsed.value.plugins);
  if (!plugins.ok) return plugins;
  if (plugins.value.some((p) => p.type === PLEXUS_PLUGIN_TYPE)) {
    return err(defaultNetworkErrors.fileIsPlexus(path, PLEXUS_PLUGIN_TYPE));
  }
  // Named by its CNI network name, as Multus reports a file-based cluster network in network-status. Run by the node's
  // own plugin binaries, never natively: their IPAM state (host-local's dataDir, say) is the node's, shared with pods
  // made before Plexus and after it is removed, so addresses are never handed out twice.
  return ok({
    namespace: '',
    name: parsed.value.cniName,
    key: parsed.value.cniName,
    annotations: { [DELEGATE_ANNOTATION]: 'true' },
    source: path,
    configFile: path,
    ...parsed.value,
    plugins: plugins.value,
  });
}
