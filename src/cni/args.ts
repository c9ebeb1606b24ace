/** CNI_ARGS ("K=V;K=V") and runtimeConfig parsing. */
import { definedFields } from '../common/defined-fields';
import { isIP } from 'node:net';
import { CniCode, CniError, type Result, err, ok } from './errors';

export interface CniArgs {
  readonly podNamespace?: string;
  readonly podName?: string;
  readonly podUid?: string;
  readonly podInfraContainerId?: string;
  /** Static IPs requested with IP= (comma separated, as host-local and static accept). */
  readonly ips: readonly string[];
  readonly mac?: string;
  readonly ignoreUnknown: boolean;
  /** Every pair as given, including ones Plexus does not know (for delegation). */
  readonly raw: ReadonlyArray<readonly [string, string]>;
}

const KNOWN = new Set([
  'K8S_POD_NAMESPACE',
  'K8S_POD_NAME',
  'K8S_POD_UID',
  'K8S_POD_INFRA_CONTAINER_ID',
  'IgnoreUnknown',
  'IP',
  'MAC',
]);
const MAC_RE = /^([0-9a-fA-F]{2}[:-]){5}[0-9a-fA-F]{2}$/;

const invalid = (msg: string, details = ''): Result<never> =>
  err(new CniError(CniCode.InvalidEnvironment, msg, details));

export function parseCniArgs(text: string | undefined): Result<CniArgs> {
  const pairs: [string, string][] = [];
  for (const part of (text ?? '').split(';')) {
    if (part === '') continue;
    const eq = part.indexOf('=');
    if (eq <= 0) return invalid(`CNI_ARGS: "${part}" is not a KEY=VALUE pair`, `CNI_ARGS=${text}`);
    pairs.push([part.slice(0, eq), part.slice(eq + 1)]);
  }
  const get = (k: string): string | undefined => pairs.find(([key]) => key === k)?.[1];
  const ignoreRaw = get('IgnoreUnknown');
  const ignoreUnknown = ignoreRaw !== undefined && ['1', 'true', 'True', 'TRUE'].includes(ignoreRaw);
  if (!ignoreUnknown) {
    const unknown = pairs.filter(([k]) => !KNOWN.has(k)).map(([k]) => k);
    if (unknown.length)
      return invalid(
        `CNI_ARGS: unknown argument ${unknown.map((k) => `"${k}"`).join(', ')} (set IgnoreUnknown=1 to allow)`,
        `CNI_ARGS=${text}`,
      );
  }
  const ips: string[] = [];
  for (const ip of (get('IP') ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean)) {
    const [addr = '', prefix, ...extra] = ip.split('/');
    const family = isIP(addr);
    const prefixOk = prefix === undefined || (/^\d{1,3}$/.test(prefix) && Number(prefix) <= (family === 6 ? 128 : 32));
    if (!family || !prefixOk || extra.length)
      return invalid(`CNI_ARGS: IP "${ip}" is not an IP address or CIDR`, `CNI_ARGS=${text}`);
    ips.push(ip);
  }
  const mac = get('MAC');
  if (mac !== undefined && !MAC_RE.test(mac))
    return invalid(`CNI_ARGS: MAC "${mac}" is not a MAC address`, `CNI_ARGS=${text}`);
  const opt = (k: string): string | undefined => {
    const v = get(k);
    return v === undefined || v === '' ? undefined : v;
  };
  return ok({
    ...definedFields({
      podNamespace: opt('K8S_POD_NAMESPACE'),
      podName: opt('K8S_POD_NAME'),
      podUid: opt('K8S_POD_UID'),
      podInfraContainerId: opt('K8S_POD_INFRA_CONTAINER_ID'),
    }),
    ips,
    ...(mac ? { mac: mac.toLowerCase().replace(/-/g, ':') } : {}),
    ignoreUnknown,
    raw: pairs,
  });
}

/**
 * runtimeConfig with case-insensitive keys: containerd capitalises some (e.g. "PortMappings" in places),
 * so every lookup goes through the lower-cased name.
 */
export class RuntimeConfig {
  private readonly byLower = new Map<string, unknown>();
  constructor(readonly raw: Readonly<Record<string, unknown>>) {
    for (const [k, v] of Object.entries(raw)) this.byLower.set(k.toLowerCase(), v);
  }
  get(key: string): unknown {
    return this.byLower.get(key.toLowerCase());
  }
  has(key: string): boolean {
    return this.byLower.has(key.toLowerCase());
  }
}
