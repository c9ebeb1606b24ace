/**
 * Multus's settings carried into plexusd's: every key of Multus's config is either carried (to a plexusd setting) or
 * named with the reason it is not, so an operator moving off Multus sees what changes (docs/migrate-from-multus.md).
 */
import { dirname, join } from 'node:path';
import type { MultusClusterNetwork, MultusInstallation } from './multus-config';

/** A Multus key and what became of it. */
export interface CarriedKey {
  readonly multus: string;
  readonly plexus: string;
}
export interface DroppedKey {
  readonly multus: string;
  readonly why: string;
}

export interface CarryOver {
  /** plexusd settings (the camelCase keys of its config file) that reproduce Multus's behaviour. */
  readonly settings: Readonly<Record<string, unknown>>;
  /** A CNI config that must be written to a file for the default network (Multus's inline `delegates[0]`). */
  readonly inlineDefaultNetwork?: Readonly<Record<string, unknown>>;
  /** The file the default-network link should point at, when the cluster network is one. */
  readonly defaultNetworkFile?: string;
  readonly carried: readonly CarriedKey[];
  readonly dropped: readonly DroppedKey[];
  /** Things that behave a little differently, for the log. */
  readonly warnings: readonly string[];
}

/** Keys that identify the config rather than set anything. */
const IDENTITY = new Set(['type', 'name', 'cniVersion']);

/** Keys with no Plexus equivalent, and why. */
const NO_EQUIVALENT: Readonly<Record<string, string>> = {
  kubeconfig: 'plexusd uses its own service account (or --kubeconfig)',
  logFile: 'plexusd logs JSON lines to stderr (the container log)',
  logLevel: "set plexusd's --log-level",
  logToStderr: 'plexusd always logs to stderr',
  logOptions: 'plexusd does not rotate logs: the container runtime does',
  retryDeleteOnError: "plexusd's DEL always goes on past a failing plugin, as this option asks",
  capabilities: "Plexus's conflist declares every capability its networks may use",
  chrootDir: "the Multus daemon's own plumbing",
  socketDir: "the Multus daemon's own plumbing",
  daemonSocketDir: "the Multus daemon's own plumbing",
  cniConfigDir: "the Multus daemon's own plumbing",
  multusAutoconfigDir: "the Multus daemon's own plumbing (plexus-install finds the primary config itself)",
  multusConfigFile: "the Multus daemon's own plumbing",
  multusMasterCNI: "the Multus daemon's own plumbing (plexus-install finds the primary config itself)",
  forceCNIVersion: 'plexusd answers in the version each runtime asks for',
  overrideNetworkName: "the Multus daemon's own plumbing",
  metricsPort: "set plexusd's --metrics-address",
  enablePprof: 'no equivalent',
  perNodeCertificate: 'plexusd uses its own service account',
  connectionLimit: "set plexusd's --max-concurrent and --max-queued",
  prevResult: 'not a setting',
  runtimeConfig: 'not a setting: the runtime sends it per call',
};

const MULTUS_DEFAULTS = { binDir: '/opt/cni/bin', cniDir: '/var/lib/cni/multus' };

export interface CarryOverOptions {
  /** The link plexusd's defaultNetwork points at when the cluster network is a file. */
  readonly defaultNetworkLink: string;
}

/** What plexusd should be told so that pods get what Multus gave them. */
export function carryOver(
  multus: MultusInstallation,
  cluster: MultusClusterNetwork,
  options: CarryOverOptions,
): CarryOver {
  const s = multus.settings;
  const settings: Record<string, unknown> = {};
  const carried: CarriedKey[] = [];
  const dropped: DroppedKey[] = [];
  const warnings: string[] = [];
  const carry = (multusKey: string, plexusKey: string, value: unknown): void => {
    settings[plexusKey] = value;
    carried.push({ multus: multusKey, plexus: plexusKey });
  };

  const where = clusterNetworkSetting(cluster, options.defaultNetworkLink);
  carry(s.clusterNetwork === undefined ? 'delegates[0]' : 'clusterNetwork', 'defaultNetwork', where);
  if (cluster.kind === 'nad' && cluster.alsoFile) {
    warnings.push(
      `clusterNetwork "${s.clusterNetwork}" is also the name of ${cluster.alsoFile}: ` +
        `Multus uses it when the NAD ${cluster.reference} does not exist; plexusd reads the NAD only`,
    );
  }
  for (const [i] of (s.delegates ?? []).entries()) {
    if (i === 0 && s.clusterNetwork === undefined) continue;
    dropped.push({
      multus: `delegates[${i}]`,
      why: "Multus runs it for every pod: make it a NAD and list it in plexusd's defaultNetworks",
    });
  }

  const { references, paths } = defaultNetworkReferences(s.defaultNetworks, s.multusNamespace);
  if (references.length > 0) carry('defaultNetworks', 'defaultNetworks', references);
  for (const p of paths)
    dropped.push({
      multus: `defaultNetworks (${p})`,
      why: 'a file path: make it a NAD, then list it in defaultNetworks',
    });
  carry('namespaceIsolation', 'namespaceIsolation', s.namespaceIsolation);
  carry('globalNamespaces', 'globalNamespaces', s.globalNamespaces);
  carry('systemNamespaces', 'systemNamespaces', s.systemNamespaces);
  if (s.readinessindicatorfile !== '')
    carry('readinessindicatorfile', 'readinessIndicatorFile', s.readinessindicatorfile);
  if (s.binDir !== MULTUS_DEFAULTS.binDir) carry('binDir', 'cniBinDir', s.binDir);
  carry('confDir', 'cniConfDir', s.confDir);
  // Multus's pods are removed as Multus would have removed them, from its cache of each.
  carry('cniDir', 'multusCacheDir', s.cniDir ?? MULTUS_DEFAULTS.cniDir);
  const chain = auxiliaryChain(s.auxiliaryCNIChainName, s.clusterNetwork);
  if (chain?.dir) carry('auxiliaryCNIChainName', 'auxiliaryChain', chain.dir);
  else if (chain?.why) dropped.push({ multus: 'auxiliaryCNIChainName', why: chain.why });
  carried.push({
    multus: 'multusNamespace',
    plexus: `the namespace of clusterNetwork and defaultNetworks (${s.multusNamespace})`,
  });

  const handled = new Set([
    'clusterNetwork',
    'delegates',
    'defaultNetworks',
    'namespaceIsolation',
    'globalNamespaces',
    'systemNamespaces',
    'readinessindicatorfile',
    'binDir',
    'confDir',
    'cniDir',
    'multusNamespace',
    'auxiliaryCNIChainName',
  ]);
  for (const key of Object.keys(s)) {
    if (handled.has(key) || IDENTITY.has(key)) continue;
    dropped.push({ multus: key, why: NO_EQUIVALENT[key] ?? 'not a Multus v4.3 setting Plexus knows' });
  }
  return {
    settings,
    ...(cluster.kind === 'inline' ? { inlineDefaultNetwork: cluster.config } : {}),
    ...(cluster.kind === 'file' ? { defaultNetworkFile: cluster.path } : {}),
    carried,
    dropped,
    warnings,
  };
}

/** Multus's (and the CNI spec's) rule for the chain's name, which goes into a path. */
const CHAIN_NAME = /^[a-zA-Z0-9][a-zA-Z0-9_.-]*$/;

/**
 * Where Multus v4.3.0 finds the auxiliary chain's plugins: `<filepath.Dir(clusterNetwork)>/<name>/`. Multus fails
 * every ADD when clusterNetwork is not a path, and runs no chain when the name is not a valid network name.
 */
function auxiliaryChain(name: unknown, clusterNetwork: string | undefined): { dir?: string; why?: string } | undefined {
  if (name === undefined || name === '') return undefined;
  if (typeof name !== 'string' || !CHAIN_NAME.test(name))
    return { why: `${JSON.stringify(name)} is not a valid network name: Multus runs no auxiliary chain with it` };
  if (!clusterNetwork?.includes('/'))
    return {
      why: `Multus fails every pod's ADD with it: clusterNetwork "${clusterNetwork ?? ''}" is not a path (give it as the path of the cluster network's config)`,
    };
  // Go's filepath.Dir: a trailing "/" names the directory itself.
  const dir = clusterNetwork.endsWith('/') ? clusterNetwork.replace(/\/+$/, '') || '/' : dirname(clusterNetwork);
  return { dir: join(dir, name) };
}

function clusterNetworkSetting(cluster: MultusClusterNetwork, link: string): string {
  return cluster.kind === 'nad' ? cluster.reference : link;
}

/** Multus's defaultNetworks: names are NADs in its namespace; an entry with a "/" is a file or directory path. */
function defaultNetworkReferences(
  names: readonly string[],
  namespace: string,
): { references: string[]; paths: string[] } {
  const references: string[] = [];
  const paths: string[] = [];
  for (const name of names)
    (name.includes('/') ? paths : references).push(name.includes('/') ? name : `${namespace}/${name}`);
  return { references, paths };
}
