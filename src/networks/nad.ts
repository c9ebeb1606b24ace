/**
 * NetworkAttachmentDefinition (k8s.cni.cncf.io/v1) parsing into network definitions the planner can use.
 * `spec.config` may be a single plugin config or a conflist; name and cniVersion are injected into each
 * plugin config as libcni does, so drivers and delegates see exactly what a runtime would hand a plugin.
 *
 * A NAD may instead leave its config to a file in the CNI config dir: with `spec.config` empty, the file whose
 * "name" is the NAD's name (NPWG spec 3.4.1); with the `plexus.io/config-id` annotation, the file `<id>.conf`
 * (DANM's static configs). Reading files is the caller's business: it passes a NadConfigSource (see conf-dir.ts).
 */
import { firstIssue } from '../common/schema-issues';
import { z } from 'zod';
import { CniCode, CniError, type Result, err, ok } from '../cni/errors';
import { requireVersion, type CniVersion } from '../cni/version';
import { errorMessage } from '../common/error-message';

export const DNS1123_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
export const DNS1123_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

const NadSchema = z.object({
  apiVersion: z.literal('k8s.cni.cncf.io/v1'),
  kind: z.literal('NetworkAttachmentDefinition'),
  metadata: z.object({
    name: z
      .string()
      .max(253)
      .regex(DNS1123_SUBDOMAIN, 'must be a DNS-1123 subdomain (lower case letters, digits, "-" and ".")'),
    namespace: z.string().max(63).regex(DNS1123_LABEL, 'must be a DNS-1123 label').optional(),
    annotations: z.record(z.string(), z.string()).optional(),
  }),
  spec: z.object({ config: z.string().optional() }).optional(),
});

/** Names a config file in the CNI config dir by id: `<dir>/<id>.conf`. */
export const CONFIG_ID_ANNOTATION = 'plexus.io/config-id';
/** The runtime-facing plugin type of Plexus itself; a network whose config names it would call Plexus again. */
export const PLEXUS_PLUGIN_TYPE = 'plexus-cni';
/** The name of the conflist plexus-install writes: the network the runtime calls (and GCs) Plexus under. */
export const PLEXUS_NETWORK_NAME = 'plexus';

export interface ConfigFile {
  readonly path: string;
  readonly text: string;
}

/** Finds CNI config files for NADs that do not carry their config in spec.config. */
export interface NadConfigSource {
  /** Where the files are, for messages. */
  readonly dir: string;
  /** The conflist, else the conf, whose "name" is `name`. */
  byName(name: string): Result<ConfigFile>;
  /** `<dir>/<id>.conf`; ids that would leave the directory are refused. */
  byId(id: string): Result<ConfigFile>;
}

export type PluginConfig = Readonly<Record<string, unknown>> & {
  readonly type: string;
  readonly name: string;
  readonly cniVersion: string;
};

export interface NetworkDefinition {
  readonly namespace: string;
  readonly name: string;
  /** "namespace/name", the key networks are selected by. */
  readonly key: string;
  readonly annotations: Readonly<Record<string, string>>;
  readonly cniVersion: CniVersion;
  /** The CNI network name (the config's "name"), which may differ from the NAD name. */
  readonly cniName: string;
  readonly plugins: readonly PluginConfig[];
  readonly source: string;
  /** The CNI config file the plugins were read from, when spec.config was empty or a config id was given. */
  readonly configFile?: string;
}

const invalid = (
  source: string,
  msg: string,
  details = '',
  code: number = CniCode.InvalidNetworkConfig,
): Result<never> => err(new CniError(code, `${source}: ${msg}`, details));

/**
 * Parses a NAD object (already decoded from YAML or JSON). Without `configs`, a NAD whose config lives in a file
 * (empty spec.config, or a config id) is an error; with it, the file is read through it.
 */
export function parseNad(obj: unknown, source: string, configs?: NadConfigSource): Result<NetworkDefinition> {
  const nad = NadSchema.safeParse(obj);
  if (!nad.success) {
    return invalid(source, `not a valid NetworkAttachmentDefinition: ${firstIssue(nad.error, '(document)')}`);
  }
  const { metadata, spec } = nad.data;
  const namespace = metadata.namespace ?? 'default';
  const key = `${namespace}/${metadata.name}`;
  const base = { namespace, name: metadata.name, key, annotations: metadata.annotations ?? {}, source };
  const configText = spec?.config ?? '';
  const configId = metadata.annotations?.[CONFIG_ID_ANNOTATION];

  if (configId === undefined && configText.trim() !== '') {
    const parsed = parseNetworkConfig(configText, `${source} (${key})`, metadata.name);
    return parsed.ok ? ok({ ...base, ...parsed.value }) : parsed;
  }

  let file: Result<ConfigFile>;
  if (configId !== undefined) {
    if (configText.trim() !== '')
      return invalid(source, `${key} has both spec.config and the ${CONFIG_ID_ANNOTATION} annotation; keep one`);
    if (!configs)
      return invalid(
        source,
        `${key} names config id "${configId}" but there is no CNI config directory to read it from`,
      );
    file = configs.byId(configId);
    if (!file.ok)
      return invalid(
        source,
        `${key}: ${CONFIG_ID_ANNOTATION} "${configId}": ${file.error.message}`,
        file.error.details,
        file.error.code,
      );
  } else {
    if (!configs)
      return invalid(
        source,
        `spec.config of ${key} is empty (and there is no CNI config directory to find a config named "${metadata.name}" in)`,
      );
    file = configs.byName(metadata.name);
    if (!file.ok)
      return invalid(
        source,
        `spec.config of ${key} is empty and ${file.error.message}`,
        file.error.details,
        file.error.code,
      );
  }
  const parsed = parseNetworkConfig(
    file.value.text,
    `${source} (${key} from ${file.value.path})`,
    metadata.name,
    'the file',
  );
  if (!parsed.ok) return parsed;
  const self = parsed.value.plugins.find((p) => p.type === PLEXUS_PLUGIN_TYPE);
  if (self)
    return invalid(
      source,
      `${key}: ${file.value.path} is Plexus's own config (type "${PLEXUS_PLUGIN_TYPE}"); using it would call Plexus recursively`,
    );
  return ok({ ...base, ...parsed.value, configFile: file.value.path });
}

/**
 * Parses CNI JSON (conf or conflist) and injects name and cniVersion into each plugin.
 * `what` names the text in messages: "spec.config", or the file it was read from.
 */
export function parseNetworkConfig(
  text: string,
  source: string,
  fallbackName: string,
  what = 'spec.config',
): Result<{ cniVersion: CniVersion; cniName: string; plugins: PluginConfig[] }> {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (e) {
    return invalid(source, `${what} is not valid JSON`, errorMessage(e));
  }
  if (typeof json !== 'object' || json === null || Array.isArray(json))
    return invalid(source, `${what} must be a JSON object`);
  const conf = json as Record<string, unknown>;
  const version = requireVersion(conf.cniVersion);
  if (!version.ok) return err(version.error.withContext(source));
  const cniName = typeof conf.name === 'string' && conf.name ? conf.name : fallbackName;
  const list = Array.isArray(conf.plugins) ? conf.plugins : [conf];
  if (list.length === 0) return invalid(source, 'the conflist has no plugins');
  const plugins: PluginConfig[] = [];
  for (const [i, p] of list.entries()) {
    if (typeof p !== 'object' || p === null || Array.isArray(p))
      return invalid(source, `plugins[${i}] is not an object`);
    const type = (p as Record<string, unknown>).type;
    if (typeof type !== 'string' || type === '')
      return invalid(source, `${Array.isArray(conf.plugins) ? `plugins[${i}]` : 'the config'} has no "type"`);
    plugins.push({ ...(p as Record<string, unknown>), type, name: cniName, cniVersion: version.value });
  }
  return ok({ cniVersion: version.value, cniName, plugins });
}

/** The capability names a plugin declares with `"capabilities": {"name": true}` (NPWG: the config decides). */
export function declaredCapabilities(plugin: PluginConfig): string[] {
  const caps = plugin.capabilities;
  if (typeof caps !== 'object' || caps === null || Array.isArray(caps)) return [];
  return Object.entries(caps)
    .filter(([, on]) => on === true)
    .map(([name]) => name);
}
