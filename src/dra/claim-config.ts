/**
 * The opaque config a claim (or its DeviceClass) gives driver plexus.io: which network the device is for, and
 * optionally the interface's name in the pod, its addresses and MAC.
 *
 *   config:
 *   - opaque:
 *       driver: plexus.io
 *       parameters: {network: fast/sriov-a, interfaceName: net1, ips: [10.1.0.5/24], mac: "02:00:00:00:00:05"}
 *
 * Validated once, at NodePrepareResources, into NetworkClaimConfig; a config that does not parse fails that claim
 * with the field and the reason.
 */
import { z } from 'zod';
import { interfaceNameProblem } from '../cni/ifname';
import { parseCidr } from '../common/ip';
import { firstIssue } from '../common/schema-issues';
import { err, ok, type Result } from '../common/result';
import { DRIVER_NAME } from './api';
import { definedFields } from '../common/defined-fields';

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;
const DNS_SUBDOMAIN = /^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const MAC = /^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}$/;

const networkRef = z.string().refine((ref) => {
  const parts = ref.split('/');
  if (parts.length > 2) return false;
  const [ns, name] = parts.length === 2 ? parts : [undefined, parts[0]];
  return (ns === undefined || DNS_LABEL.test(ns)) && DNS_SUBDOMAIN.test(name ?? '');
}, 'must be a NetworkAttachmentDefinition as [namespace/]name');

const ConfigSchema = z.strictObject({
  apiVersion: z.literal(`${DRIVER_NAME}/v1alpha1`).optional(),
  kind: z.literal('NetworkClaimConfig').optional(),
  network: networkRef,
  interfaceName: z
    .string()
    .superRefine((name, ctx) => {
      const problem = interfaceNameProblem(name);
      if (problem) ctx.addIssue({ code: 'custom', message: problem });
    })
    .optional(),
  ips: z
    .array(z.string().refine((c) => parseCidr(c) !== undefined, 'must be an address with its prefix, e.g. 10.1.0.5/24'))
    .optional(),
  mac: z.string().regex(MAC, 'must be a MAC address like 02:00:00:00:00:05').optional(),
});

export interface NetworkClaimConfig {
  /** The NAD; its namespace is the claim's when the reference has none. */
  readonly network: { readonly namespace: string; readonly name: string };
  readonly interfaceName?: string;
  readonly ips?: readonly string[];
  readonly mac?: string;
}

/** One config entry of a claim's allocation (status.allocation.devices.config[]). */
export interface AllocatedConfig {
  readonly source?: string;
  readonly requests?: readonly string[];
  readonly opaque?: { readonly driver?: string; readonly parameters?: unknown };
}

/** The parameters of one plexus.io opaque config, for a claim in `namespace`; an error names the field. */
export function parseClaimConfig(parameters: unknown, namespace: string): Result<NetworkClaimConfig, string> {
  const parsed = ConfigSchema.safeParse(parameters);
  if (!parsed.success) return err(firstIssue(parsed.error, 'parameters'));
  const { network, interfaceName, ips, mac } = parsed.data;
  const [ns, name] = network.includes('/') ? network.split('/') : [namespace, network];
  return ok({
    network: { namespace: ns!, name: name! },
    ...definedFields({ interfaceName, ips }),
    ...(mac !== undefined ? { mac: mac.toLowerCase() } : {}),
  });
}

/** Whether a config entry applies to a request (no requests: all; "req/sub" is a subrequest of req). */
const appliesTo = (config: AllocatedConfig, request: string): boolean =>
  !config.requests?.length || config.requests.some((r) => r === request || r === request.split('/')[0]);

/**
 * The plexus.io config for one allocated request: the last entry that applies (a claim's own entries come after its
 * class's), undefined when none does. An error says which entry and what is wrong with it.
 */
export function configForRequest(
  configs: readonly AllocatedConfig[],
  request: string,
  namespace: string,
): Result<NetworkClaimConfig | undefined, string> {
  let chosen: { index: number; config: AllocatedConfig } | undefined;
  configs.forEach((config, index) => {
    if (config.opaque?.driver === DRIVER_NAME && appliesTo(config, request)) chosen = { index, config };
  });
  if (!chosen) return ok(undefined);
  const parsed = parseClaimConfig(chosen.config.opaque?.parameters, namespace);
  if (parsed.ok) return parsed;
  const from = chosen.config.source === 'FromClass' ? 'its DeviceClass' : 'the claim';
  return err(
    `opaque config for ${DRIVER_NAME} from ${from} (config[${chosen.index}], request ${request}): ${parsed.error}`,
  );
}
