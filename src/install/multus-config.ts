/**
 * Multus's configuration on a node, read as Multus v4 reads it, so that Plexus can take its settings over.
 *
 * Thin Multus: one file in the CNI conf dir with `"type": "multus"` holding every setting. Thick Multus: a file with
 * `"type": "multus-shim"` that the daemon generated, and the daemon's own config file (default
 * /etc/cni/net.d/multus.d/daemon-config.json), whose keys the daemon copies over the shim's config on every call.
 * Either way the settings start from Multus's defaults (kube-system as its namespace and the one system namespace,
 * "default" as the one global namespace, /etc/cni/multus/net.d for named configs).
 */
import { basename } from 'node:path';
import { z } from 'zod';
import { ok, type Result } from '../common/result';
import { type ConfFileReader, type InstallProblem, problem, readConfFile } from './conf-files';
import { errorMessage } from '../common/error-message';
import { definedFields } from '../common/defined-fields';

/** The plugin types of Multus's own configs: thin and thick. */
export const MULTUS_TYPES: ReadonlySet<string> = new Set(['multus', 'multus-shim']);
export const DEFAULT_MULTUS_DAEMON_CONFIG = '/etc/cni/net.d/multus.d/daemon-config.json';

const commaList = z.string().transform((v) =>
  v
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean),
);

/** The keys Multus reads from its config, with its defaults; anything else is kept as it is, to be named. */
const MultusSettingsSchema = z
  .object({
    type: z.string(),
    clusterNetwork: z.string().optional(),
    delegates: z.array(z.record(z.string(), z.unknown())).optional(),
    defaultNetworks: z.array(z.string()).default([]),
    namespaceIsolation: z.boolean().default(false),
    globalNamespaces: commaList.default(['default']),
    systemNamespaces: z.array(z.string()).default(['kube-system']),
    multusNamespace: z.string().min(1).default('kube-system'),
    readinessindicatorfile: z.string().default(''),
    confDir: z.string().default('/etc/cni/multus/net.d'),
    /** Multus's per-sandbox cache (its default: /var/lib/cni/multus). */
    cniDir: z.string().optional(),
    binDir: z.string().default('/opt/cni/bin'),
  })
  .passthrough();
export type MultusSettings = z.infer<typeof MultusSettingsSchema>;

export interface MultusInstallation {
  readonly mode: 'thin' | 'thick';
  /** The file in the CNI conf dir that makes the runtime call Multus. */
  readonly configFile: string;
  /** Thick only: the daemon's config file, when one was found. */
  readonly daemonConfigFile?: string;
  readonly settings: MultusSettings;
}

/** Files whose config runs Multus (its type, or a conflist's first plugin), in the runtime's order. */
export function findMultusConfigs(files: readonly ConfFileReader[]): { path: string; text: string }[] {
  return files.flatMap((f) => {
    const text = f.read();
    return text !== undefined && multusTypeOf(text) ? [{ path: f.path, text }] : [];
  });
}

function multusTypeOf(text: string): string | undefined {
  try {
    const conf = JSON.parse(text) as Record<string, unknown>;
    const first = Array.isArray(conf.plugins) ? (conf.plugins[0] as Record<string, unknown> | undefined) : conf;
    const type = first?.type;
    return typeof type === 'string' && MULTUS_TYPES.has(type) ? type : undefined;
  } catch {
    return undefined;
  }
}

/** One Multus config's own settings: a conflist's Multus plugin, or the conf itself. */
function ownSettings(path: string, text: string): Result<Record<string, unknown>, InstallProblem> {
  let conf: unknown;
  try {
    conf = JSON.parse(text);
  } catch (e) {
    return problem(`Multus's config ${path} is not JSON: ${errorMessage(e)}`);
  }
  if (typeof conf !== 'object' || conf === null || Array.isArray(conf))
    return problem(`Multus's config ${path} is not a JSON object`);
  const record = conf as Record<string, unknown>;
  const plugins = record.plugins;
  return ok(
    Array.isArray(plugins) && typeof plugins[0] === 'object' && plugins[0] !== null
      ? (plugins[0] as Record<string, unknown>)
      : record,
  );
}

/**
 * The node's Multus, if any: none (undefined), or one config with its settings. Two Multus configs, a config that
 * does not parse, or a thick daemon config that does not parse are problems: the installer stops and changes nothing.
 */
export function readMultus(
  confDirFiles: readonly ConfFileReader[],
  daemonConfigPath: string,
): Result<MultusInstallation | undefined, InstallProblem> {
  const found = findMultusConfigs(confDirFiles);
  if (found.length === 0) return ok(undefined);
  if (found.length > 1) {
    const names = found.map((f) => basename(f.path)).join(', ');
    return problem(
      `${found.length} Multus configs in the CNI conf dir (${names}): the runtime uses only the first; ` +
        'remove the stale ones, then install again',
    );
  }
  const { path, text } = found[0]!;
  const own = ownSettings(path, text);
  if (!own.ok) return own;
  const thick = own.value.type === 'multus-shim';
  let merged = own.value;
  let daemonConfigFile: string | undefined;
  if (thick) {
    const daemon = readConfFile(daemonConfigPath);
    if (daemon.kind === 'problem') return problem(`Multus's daemon config ${daemonConfigPath}: ${daemon.message}`);
    if (daemon.kind === 'file') {
      const settings = ownSettings(daemonConfigPath, daemon.text);
      if (!settings.ok) return settings;
      // As the daemon does on each call: its config's keys over the shim's.
      merged = { ...own.value, ...settings.value };
      daemonConfigFile = daemonConfigPath;
    }
  }
  const parsed = MultusSettingsSchema.safeParse(merged);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    return problem(
      `Multus's config ${daemonConfigFile ?? path}: "${issue?.path.join('.') ?? ''}" ${issue?.message ?? 'is invalid'}`,
    );
  }
  if (parsed.data.clusterNetwork === undefined && (parsed.data.delegates?.length ?? 0) === 0) {
    return problem(`Multus's config ${path} has neither clusterNetwork nor delegates: Multus itself refuses it`);
  }
  return ok({
    mode: thick ? 'thick' : 'thin',
    configFile: path,
    ...definedFields({ daemonConfigFile: daemonConfigFile || undefined }),
    settings: parsed.data,
  });
}

/** Where Multus's cluster network is: a NAD in its namespace, a CNI config file, or a config inline in `delegates`. */
export type MultusClusterNetwork =
  | { readonly kind: 'nad'; readonly reference: string; readonly alsoFile?: string }
  | { readonly kind: 'file'; readonly path: string }
  | { readonly kind: 'inline'; readonly config: Record<string, unknown> };

/**
 * Resolves the cluster network as Multus does (k8sclient getNetDelegate): a name is a NAD in multusNamespace, or else
 * a config of that CNI name in Multus's confDir; a path is a directory (its first config) or a file; without
 * clusterNetwork, the first of `delegates`. A name is resolved to the NAD when no file has it, because the installer
 * cannot ask the API: plexusd then reads the NAD, as Multus would first.
 */
export function resolveClusterNetwork(
  settings: MultusSettings,
  listDir: (dir: string) => readonly ConfFileReader[] | undefined,
): Result<MultusClusterNetwork, InstallProblem> {
  const name = settings.clusterNetwork;
  if (name === undefined) return ok({ kind: 'inline', config: settings.delegates![0]! });
  if (!name.includes('/')) {
    const file = listDir(settings.confDir)?.find((f) => configName(f.read()) === name);
    return ok({
      kind: 'nad',
      reference: `${settings.multusNamespace}/${name}`,
      ...(file ? { alsoFile: file.path } : {}),
    });
  }
  const inDir = listDir(name);
  if (inDir !== undefined) {
    const first = inDir.find((f) => f.path.endsWith('.conf') || f.path.endsWith('.conflist'));
    return first
      ? ok({ kind: 'file', path: first.path })
      : problem(`Multus's clusterNetwork ${name} is a directory with no .conf or .conflist file`);
  }
  const file = readConfFile(name);
  if (file.kind === 'file') return ok({ kind: 'file', path: name });
  return problem(`Multus's clusterNetwork ${name} ${file.kind === 'problem' ? file.message : 'does not exist'}`);
}

function configName(text: string | undefined): string | undefined {
  try {
    const name = text === undefined ? undefined : (JSON.parse(text) as { name?: unknown }).name;
    return typeof name === 'string' ? name : undefined;
  } catch {
    return undefined;
  }
}
