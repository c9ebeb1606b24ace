/**
 * NetworkAttachmentDefinition (k8s.cni.cncf.io/v1) parsing into network definitions the planner can use.
 * `spec.config` may be a single plugin config or a conflist; name and cniVersion are injected into each
 * plugin config as libcni does, so drivers and delegates see exactly what a runtime would hand a plugin.
 */
import { z } from 'zod';
import { CniCode, CniError, Result, err, ok } from '../cni/errors';
import { requireVersion, CniVersion } from '../cni/version';

export const DNS1123_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
export const DNS1123_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

const NadSchema = z.object({
  apiVersion: z.literal('k8s.cni.cncf.io/v1'),
  kind: z.literal('NetworkAttachmentDefinition'),
  metadata: z.object({
    name: z.string().max(253).regex(DNS1123_SUBDOMAIN, 'must be a DNS-1123 subdomain (lower case letters, digits, "-" and ".")'),
    namespace: z.string().max(63).regex(DNS1123_LABEL, 'must be a DNS-1123 label').optional(),
    annotations: z.record(z.string(), z.string()).optional(),
  }),
  spec: z.object({ config: z.string().optional() }).optional(),
});

export type PluginConfig = Readonly<Record<string, unknown>> & { readonly type: string; readonly name: string; readonly cniVersion: string };

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
}

const invalid = (source: string, msg: string, details = ''): Result<never> => err(new CniError(CniCode.InvalidNetworkConfig, `${source}: ${msg}`, details));

/** Parses a NAD object (already decoded from YAML or JSON). */
export function parseNad(obj: unknown, source: string): Result<NetworkDefinition> {
  const nad = NadSchema.safeParse(obj);
  if (!nad.success) {
    const issue = nad.error.issues[0];
    return invalid(source, `not a valid NetworkAttachmentDefinition: ${issue ? `${issue.path.join('.')}: ${issue.message}` : ''}`);
  }
  const { metadata, spec } = nad.data;
  const namespace = metadata.namespace ?? 'default';
  const configText = spec?.config ?? '';
  if (configText.trim() === '') return invalid(source, `spec.config of ${namespace}/${metadata.name} is empty (config files by name are not supported yet)`);
  const parsed = parseNetworkConfig(configText, `${source} (${namespace}/${metadata.name})`, metadata.name);
  if (!parsed.ok) return parsed;
  return ok({ namespace, name: metadata.name, key: `${namespace}/${metadata.name}`, annotations: metadata.annotations ?? {}, source, ...parsed.value });
}

/** Parses CNI JSON (conf or conflist) and injects name and cniVersion into each plugin. */
export function parseNetworkConfig(text: string, source: string, fallbackName: string): Result<{ cniVersion: CniVersion; cniName: string; plugins: PluginConfig[] }> {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (e) {
    return invalid(source, 'spec.config is not valid JSON', (e as Error).message);
  }
  if (typeof json !== 'object' || json === null || Array.isArray(json)) return invalid(source, 'spec.config must be a JSON object');
  const conf = json as Record<string, unknown>;
  const version = requireVersion(conf.cniVersion);
  if (!version.ok) return err(version.error.withContext(source));
  const cniName = typeof conf.name === 'string' && conf.name ? conf.name : fallbackName;
  const list = Array.isArray(conf.plugins) ? conf.plugins : [conf];
  if (list.length === 0) return invalid(source, 'the conflist has no plugins');
  const plugins: PluginConfig[] = [];
  for (const [i, p] of list.entries()) {
    if (typeof p !== 'object' || p === null || Array.isArray(p)) return invalid(source, `plugins[${i}] is not an object`);
    const type = (p as Record<string, unknown>).type;
    if (typeof type !== 'string' || type === '') return invalid(source, `${Array.isArray(conf.plugins) ? `plugins[${i}]` : 'the config'} has no "type"`);
    plugins.push({ ...(p as Record<string, unknown>), type, name: cniName, cniVersion: version.value });
  }
  return ok({ cniVersion: version.value, cniName, plugins });
}
