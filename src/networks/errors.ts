/** The errors of finding and reading network definitions: what is missing or unreadable, and where. */
import { CniCode, CniError } from '../cni/errors';
import { cappedList, formatBytes } from '../common/bounded-file';

const invalid = (msg: string, details?: string): CniError => new CniError(CniCode.InvalidNetworkConfig, msg, details);
const io = (msg: string, details?: string): CniError => new CniError(CniCode.IoFailure, msg, details);

/** A network outside the pod's namespace under --namespace-isolation. */
export function isolatedNetwork(
  who: string,
  network: { readonly namespace: string; readonly name: string },
  podNamespace: string,
  shared: readonly string[],
): CniError {
  const globals = [...new Set(shared)].join(', ');
  return invalid(
    `${who}: network ${network.namespace}/${network.name} is in namespace ${network.namespace}, ` +
      `and namespace isolation is on (--namespace-isolation): pods of ${podNamespace} may use only networks ` +
      `of ${podNamespace} and of the global namespaces (${globals})`,
    `create the NetworkAttachmentDefinition in ${podNamespace}, ` +
      `or ask the node's operator to add ${network.namespace} to --global-namespaces`,
  );
}

export const confDirErrors = {
  missing: (dir: string): CniError => invalid(`the CNI config directory ${dir} does not exist`),
  unreadable: (dir: string, why: string): CniError => io(`cannot read the CNI config directory ${dir}`, why),
  noSuchName: (dir: string, name: string, skipped: readonly string[], lookedAt: string): CniError => {
    const unread = skipped.length ? ` (${skipped.length} file(s) could not be read or parsed)` : '';
    return invalid(
      `no CNI config file in ${dir} has "name": "${name}"${unread}`,
      skipped.length ? `skipped: ${cappedList(skipped)}` : lookedAt,
    );
  },
  badId: (id: string, why: string): CniError => invalid(`config id "${id}" ${why}`),
  unreadableFile: (path: string, reason: string, io: boolean): CniError =>
    new CniError(io ? CniCode.IoFailure : CniCode.InvalidNetworkConfig, `${path} ${reason}`),
};

export const directoryErrors = {
  unreadableDir: (dir: string, why: string): CniError => io(`cannot read networks directory ${dir}`, why),
  unreadableFile: (path: string, why: string): CniError => io(`cannot read ${path}`, why),
  /** `broken`: the definitions that could not be read, which may be where the missing one is. */
  undefinedNetwork: (namespace: string, name: string, dir: string, broken: string): CniError =>
    invalid(`network ${namespace}/${name} is not defined in ${dir}${broken}`),
  refusedFile: (path: string, reason: string, maxBytes: number): CniError =>
    invalid(
      `${path} ${reason}`,
      `a definition file must be a regular file (or a symlink to one) of at most ${formatBytes(maxBytes)}`,
    ),
  notYaml: (where: string, why: string): CniError =>
    new CniError(CniCode.DecodeFailure, `${where}: not valid YAML/JSON`, why),
  itemsNotList: (where: string): CniError => invalid(`${where}: "items" of a List must be a list`),
};

export const defaultNetworkErrors = {
  unset: (): CniError =>
    invalid('no default network: set "defaultNetwork" in the CNI config or start plexusd with --default-network'),
  unreadableFile: (path: string, reason: string): CniError =>
    invalid(`the default network's CNI config file ${path} cannot be read: it ${reason}`),
  fileWithoutName: (path: string): CniError => invalid(`the default network's CNI config file ${path} has no "name"`),
  fileIsPlexus: (path: string, pluginType: string): CniError =>
    invalid(
      `the default network's CNI config file ${path} is Plexus's own config (type "${pluginType}"); ` +
        'using it would call Plexus recursively',
    ),
};

export const subdirectoryChainErrors = {
  badName: (name: string): CniError =>
    invalid(
      `"${name}" is not a valid network name for chaining plugins from a directory`,
      'a letter or digit, then letters, digits, "_", "." or "-" (the CNI spec\'s rule)',
    ),
  unreadableDir: (dir: string, why: string): CniError => io(`cannot read the chained plugins in ${dir}`, why),
  unreadableFile: (path: string, reason: string): CniError => invalid(`chained plugin ${path} ${reason}`),
  notJson: (path: string, why: string): CniError => invalid(`chained plugin ${path} is not valid JSON`, why),
  notOnePlugin: (path: string): CniError =>
    invalid(`chained plugin ${path} must be one plugin's config (a JSON object with "type", no "plugins")`),
  noPlugins: (where: string, dir: string): CniError =>
    invalid(`${where}: no plugins: the config lists none and ${dir} has no .conf file`),
};

export const notANetworkRef = (text: string): CniError =>
  invalid(`"${text}" is not a network reference ([namespace/]name)`);
