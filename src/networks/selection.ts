/**
 * The network selection annotation (`k8s.v1.cni.cncf.io/networks`, NPWG multi-network spec v1.3), validated once
 * into precise selections. Both forms are read: the short form (`[namespace/]name[@interface]`, comma separated)
 * and the JSON list form with per-attachment requests (ips, mac, default-route, ...). An invalid annotation fails
 * the pod with code 7 and a message naming the offending element, so the pod's owner can fix it.
 */
import { definedFields } from '../common/defined-fields';
import { interfaceNameProblem } from '../cni/ifname';
import { fieldPath } from '../common/schema-issues';
import { z } from 'zod';
import { CniCode, CniError, type Result, err, ok } from '../cni/errors';
import { parseCidr, parseIp } from '../common/ip';
import { DNS1123_LABEL, DNS1123_SUBDOMAIN } from './nad';
import { errorMessage } from '../common/error-message';

export const SELECTION_ANNOTATION = 'k8s.v1.cni.cncf.io/networks';
/** The runtime capability (runtimeConfig key) containerd and CRI-O pass pod annotations under. */
export const POD_ANNOTATIONS_CAPABILITY = 'io.kubernetes.cri.pod-annotations';

export interface NetworkSelection {
  readonly namespace: string;
  /** The NetworkAttachmentDefinition name. */
  readonly name: string;
  readonly interface?: string;
  readonly ips?: readonly string[];
  readonly mac?: string;
  /** Gateway IPs from "default-route": this attachment should carry the pod's default route. */
  readonly defaultRoute?: readonly string[];
  readonly portMappings?: readonly Record<string, unknown>[];
  readonly bandwidth?: Record<string, unknown>;
  readonly cniArgs?: Record<string, unknown>;
  readonly infinibandGUID?: string;
  readonly ipamClaimReference?: string;
  /** Position in the annotation, from 0; messages count from 1 ("element 1"). */
  readonly index: number;
}

const invalid = (msg: string, details = ''): CniError => new CniError(CniCode.InvalidNetworkConfig, msg, details);

/** How errors and logs name a selection: `element 2 (team-a/blue@net1)`. */
export function describeSelection(sel: NetworkSelection): string {
  return `element ${sel.index + 1} (${sel.namespace}/${sel.name}${sel.interface !== undefined ? `@${sel.interface}` : ''})`;
}

const nameProblem = (name: string): string | undefined =>
  name.length > 253 || !DNS1123_SUBDOMAIN.test(name)
    ? `network name "${name}" is not a DNS-1123 subdomain (lower case letters, digits, "-" and "."; at most 253 characters)`
    : undefined;

const namespaceProblem = (namespace: string): string | undefined =>
  namespace.length > 63 || !DNS1123_LABEL.test(namespace)
    ? `namespace "${namespace}" is not a DNS-1123 label (lower case letters, digits and "-"; at most 63 characters)`
    : undefined;

/** Colon (or dash) separated hex pairs of one of the given byte lengths, normalised to lower case with colons. */
function hexAddress(text: string, lengths: readonly number[]): string | undefined {
  const parts = text.split(/[:-]/);
  if (!lengths.includes(parts.length) || !parts.every((p) => /^[0-9a-fA-F]{2}$/.test(p))) return undefined;
  if (text.includes(':') && text.includes('-')) return undefined;
  return parts.join(':').toLowerCase();
}

/** What one element asks for before validation, whichever form it came in. */
interface RawElement {
  readonly name: string;
  readonly namespace?: string;
  readonly interface?: string;
  readonly ips?: readonly string[];
  readonly mac?: string;
  readonly 'default-route'?: readonly string[];
  readonly portMappings?: readonly Record<string, unknown>[];
  readonly bandwidth?: Record<string, unknown>;
  readonly 'cni-args'?: Record<string, unknown>;
  readonly 'infiniband-guid'?: string;
  readonly 'ipam-claim-reference'?: string;
}

/** Unknown keys are dropped (the spec reserves dotted keys for extensions); known keys must have the right type. */
const JsonElementSchema = z.object({
  name: z.string(),
  namespace: z.string().optional(),
  interface: z.string().optional(),
  ips: z.array(z.string()).optional(),
  mac: z.string().optional(),
  'default-route': z.array(z.string()).optional(),
  portMappings: z.array(z.record(z.string(), z.unknown())).optional(),
  bandwidth: z.record(z.string(), z.unknown()).optional(),
  'cni-args': z.record(z.string(), z.unknown()).optional(),
  'infiniband-guid': z.string().optional(),
  'ipam-claim-reference': z.string().optional(),
});

const TYPE_NAMES: Readonly<Record<string, string>> = {
  string: 'a string',
  array: 'a list',
  record: 'a JSON object',
  object: 'a JSON object',
};

function describeIssue(issue: z.core.$ZodIssue): string {
  const path = fieldPath(issue.path);
  if (issue.code === 'invalid_type') {
    return `"${path}" must be ${TYPE_NAMES[issue.expected] ?? issue.expected}`;
  }
  return `"${path}": ${issue.message}`;
}

/** Validates one element into a selection; the reason if it is invalid. */
function validateElement(raw: RawElement, index: number, podNamespace: string): Result<NetworkSelection, string> {
  if (raw.name === '') return err('the network name is empty');
  const badName = nameProblem(raw.name);
  if (badName) return err(badName);
  const namespace = raw.namespace === undefined || raw.namespace === '' ? podNamespace : raw.namespace;
  const badNamespace = namespaceProblem(namespace);
  if (badNamespace) return err(badNamespace);
  // An empty "interface" means none was asked for, as in Multus.
  const ifname = raw.interface === '' ? undefined : raw.interface;
  if (ifname !== undefined) {
    const problem = interfaceNameProblem(ifname);
    if (problem) return err(`interface "${ifname}" ${problem}`);
  }
  if (raw.ips !== undefined) {
    if (raw.ips.length === 0) return err('"ips" is an empty list');
    for (const [i, ip] of raw.ips.entries()) {
      if ((ip.includes('/') ? parseCidr(ip) : parseIp(ip)) === undefined)
        return err(`ips[${i}] "${ip}" is not an IP address or CIDR`);
    }
  }
  let mac: string | undefined;
  if (raw.mac !== undefined) {
    mac = hexAddress(raw.mac, [6, 20]);
    if (mac === undefined)
      return err(`mac "${raw.mac}" is not a MAC address (6 hex pairs, or 20 for IP over InfiniBand, separated by ":")`);
  }
  const gateways = raw['default-route'];
  if (gateways !== undefined) {
    if (gateways.length === 0) return err('"default-route" is an empty list');
    for (const [i, gw] of gateways.entries()) {
      if (parseIp(gw) === undefined) return err(`default-route[${i}] "${gw}" is not an IP address`);
    }
  }
  let guid: string | undefined;
  if (raw['infiniband-guid'] !== undefined) {
    guid = hexAddress(raw['infiniband-guid'], [8]);
    if (guid === undefined)
      return err(`infiniband-guid "${raw['infiniband-guid']}" is not a GUID (8 hex pairs separated by ":")`);
  }
  const claim = raw['ipam-claim-reference'];
  if (claim !== undefined) {
    if (claim.length > 253 || !DNS1123_SUBDOMAIN.test(claim))
      return err(`ipam-claim-reference "${claim}" is not a DNS-1123 subdomain`);
    if (raw.ips !== undefined)
      return err('"ipam-claim-reference" and "ips" may not be used together: the claim decides the addresses');
  }
  const cniArgs = raw['cni-args'];
  return ok(
    definedFields({
      namespace,
      name: raw.name,
      interface: ifname,
      ips: raw.ips && [...raw.ips],
      mac,
      defaultRoute: gateways && [...gateways],
      portMappings: raw.portMappings?.map((m) => ({ ...m })),
      bandwidth: raw.bandwidth && { ...raw.bandwidth },
      cniArgs: cniArgs && { ...cniArgs },
      infinibandGUID: guid,
      ipamClaimReference: claim,
      index,
    }),
  );
}

/** One short-form reference, `[namespace/]name[@interface]` (already trimmed); parts are trimmed as Multus does. */
function parseShortElement(text: string): Result<RawElement, string> {
  if (text === '') return err('is empty (remove the extra ",")');
  const slash = text.split('/');
  if (slash.length > 2) return err('has more than one "/" (expected [namespace/]name[@interface])');
  const namespace = slash.length === 2 ? (slash[0] ?? '').trim() : undefined;
  if (namespace === '') return err('the namespace before "/" is empty');
  const at = (slash[slash.length - 1] ?? '').split('@');
  if (at.length > 2) return err('has more than one "@" (expected [namespace/]name[@interface])');
  const name = (at[0] ?? '').trim();
  const ifname = at.length === 2 ? (at[1] ?? '').trim() : undefined;
  if (ifname === '') return err('the interface after "@" is empty');
  return ok(definedFields({ name, namespace, interface: ifname }));
}

/**
 * A network reference as plexusd's configuration writes one (`[namespace/]name[@interface]`), validated like a
 * short-form element. Used for the `defaultNetworks` source; index is the reference's position in its list.
 */
export function parseNetworkReference(
  text: string,
  defaultNamespace: string,
  index = 0,
): Result<NetworkSelection, string> {
  const raw = parseShortElement(text.trim());
  return raw.ok ? validateElement(raw.value, index, defaultNamespace) : raw;
}

const quote = (text: string): string => JSON.stringify(text.length > 80 ? `${text.slice(0, 77)}...` : text);

/**
 * Parses the selection annotation. Missing, empty or whitespace-only: no selections. Text containing "[", "{" or
 * '"' is read as the JSON form (Multus's rule: none of those can appear in the short form, so a mistyped JSON
 * annotation fails as JSON rather than as a strange network name); anything else is the short form. Messages name
 * `annotationName`: the same grammar serves the default-network override.
 */
export function parseSelection(
  annotation: string | undefined,
  podNamespace: string,
  annotationName = SELECTION_ANNOTATION,
): Result<NetworkSelection[]> {
  const text = (annotation ?? '').trim();
  if (text === '') return ok([]);
  const fail = (index: number, shown: string, problem: string): Result<never> =>
    err(invalid(`${annotationName}: element ${index + 1} (${quote(shown)}): ${problem}`));

  const selections: NetworkSelection[] = [];
  if (/[[{"]/.test(text)) {
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch (e) {
      return err(invalid(`${annotationName}: not valid JSON`, errorMessage(e)));
    }
    if (!Array.isArray(json))
      return err(
        invalid(
          `${annotationName}: the JSON form must be a list of objects (or use the short form: [namespace/]name[@interface], comma separated)`,
        ),
      );
    for (const [index, element] of json.entries()) {
      const shown = JSON.stringify(element) ?? String(element);
      if (typeof element !== 'object' || element === null || Array.isArray(element))
        return fail(index, shown, 'must be a JSON object');
      if (!('name' in element)) return fail(index, shown, '"name" is required');
      const parsed = JsonElementSchema.safeParse(element);
      if (!parsed.success) return fail(index, shown, parsed.error.issues.map(describeIssue).join('; '));
      const sel = validateElement(parsed.data, index, podNamespace);
      if (!sel.ok) return fail(index, shown, sel.error);
      selections.push(sel.value);
    }
  } else {
    for (const [index, part] of text.split(',').entries()) {
      const shown = part.trim();
      const raw = parseShortElement(shown);
      if (!raw.ok) return fail(index, shown, raw.error);
      const sel = validateElement(raw.value, index, podNamespace);
      if (!sel.ok) return fail(index, shown, sel.error);
      selections.push(sel.value);
    }
  }

  // Rules across elements.
  const routed = selections.filter((s) => s.defaultRoute !== undefined);
  if (routed.length > 1) {
    const [first, second] = routed as [NetworkSelection, NetworkSelection];
    const again = `${describeSelection(second)}: "default-route" is already set by ${describeSelection(first)}`;
    return err(invalid(`${annotationName}: ${again}; only one element may carry the default route`));
  }
  const byInterface = new Map<string, NetworkSelection>();
  for (const sel of selections) {
    if (sel.interface === undefined) continue;
    const earlier = byInterface.get(sel.interface);
    if (earlier)
      return err(
        invalid(
          `${annotationName}: ${describeSelection(sel)}: interface "${sel.interface}" is already requested by ${describeSelection(earlier)}`,
        ),
      );
    byInterface.set(sel.interface, sel);
  }
  return ok(selections);
}

/**
 * The pod annotations a runtime passes as the `io.kubernetes.cri.pod-annotations` capability. Absent: none.
 * Anything but a map of strings to strings is code 7.
 */
export function parsePodAnnotations(runtimeConfigValue: unknown): Result<Record<string, string>> {
  if (runtimeConfigValue === undefined) return ok({});
  if (typeof runtimeConfigValue !== 'object' || runtimeConfigValue === null || Array.isArray(runtimeConfigValue)) {
    return err(invalid(`runtimeConfig "${POD_ANNOTATIONS_CAPABILITY}" must be a map of annotation names to strings`));
  }
  const annotations: Record<string, string> = {};
  for (const [key, value] of Object.entries(runtimeConfigValue)) {
    if (typeof value !== 'string') {
      const kind = value === null ? 'null' : Array.isArray(value) ? 'a list' : typeof value;
      return err(
        invalid(`runtimeConfig "${POD_ANNOTATIONS_CAPABILITY}": annotation "${key}" must be a string, not ${kind}`),
      );
    }
    annotations[key] = value;
  }
  return ok(annotations);
}
