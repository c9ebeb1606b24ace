/**
 * Planning: which networks a pod gets, in which order, under which interface names, with which requests.
 * Pure: the engine supplies the resolved default network, the parsed selections, a lookup and the capabilities
 * each network declares, and gets back the ordered attachments, or the one error that makes the plan invalid.
 *
 * Order (NPWG spec 6.2): the cluster default network first, as CNI_IFNAME; then the configured defaultNetworks;
 * then the selection annotation's networks, in annotation order.
 * Names: an explicit interface wins; otherwise the NAD's `plexus.io/interface-prefix` plus the next free index for
 * that prefix, else "net" ("multus") or "eth" ("eth") plus the attachment's position in the plan, the default network
 * being 0, as Multus numbers its delegates (`a@data0, b` gives data0 and net2). Explicit names are reserved before
 * any name is generated; a generated name one of them holds takes the next free number (where Multus fails the pod).
 */
import { CniCode, CniError, type Result, err, ok } from '../cni/errors';
import type { NetworkDefinition } from './nad';
import { interfaceNameProblem } from '../cni/ifname';
import { describeSelection, type NetworkSelection, parseNetworkReference, SELECTION_ANNOTATION } from './selection';
import { definedFields } from '../common/defined-fields';

/** Interface names a pod may not ask for: every netns has them, and Plexus neither makes nor deletes them. */
const RESERVED_IFNAMES: readonly string[] = ['lo'];

/** The prefix for generated interface names of one network (DANM's container_prefix). */
export const INTERFACE_PREFIX_ANNOTATION = 'plexus.io/interface-prefix';
/** "true": run this network's plugins as delegates even where a native driver exists. */
export const DELEGATE_ANNOTATION = 'plexus.io/delegate';

/** Whether the network's NAD asks for its plugins to be exec'd (an invalid value is refused when a pod is planned). */
export const delegationForced = (network: NetworkDefinition): boolean =>
  network.annotations[DELEGATE_ANNOTATION] === 'true';

export type NamingScheme = 'multus' | 'eth';

export interface PlanOptions {
  readonly naming: NamingScheme;
  /** CNI_IFNAME: the default network's interface, normally eth0. */
  readonly defaultIfname: string;
  readonly sources: {
    /** Read the pod's k8s.v1.cni.cncf.io/networks annotation. */
    readonly selectionAnnotation: boolean;
    /** `[namespace/]name[@interface]` references attached to every pod after the default network; namespace "default". */
    readonly defaultNetworks: readonly string[];
  };
}

export interface PlannedAttachment {
  readonly ifname: string;
  /** The interface name was asked for (the selection's "interface", or "@name"), not generated. */
  readonly explicitName: boolean;
  readonly network: NetworkDefinition;
  /** The annotation element this attachment comes from; absent for the default network and defaultNetworks. */
  readonly selection?: NetworkSelection;
  /** The cluster default network (network-status `default: true`). */
  readonly isDefault: boolean;
  /** From the NAD annotation plexus.io/delegate: "true". */
  readonly forceDelegate: boolean;
  /**
   * The attachment that owns the pod's default route: the element with "default-route" (its gateways are in
   * selection.defaultRoute), else the default network. Exactly one attachment of a plan has it.
   */
  readonly defaultRoute: boolean;
}

export interface PlanInput {
  /**
   * The pod's default network, attached as defaultIfname; absent when a running pod's networks change (hot-plug):
   * the pod keeps its default network, whose interface name stays reserved.
   */
  readonly defaultNetwork?: NetworkDefinition;
  readonly selections: readonly NetworkSelection[];
  readonly resolve: (namespace: string, name: string) => Result<NetworkDefinition>;
  readonly declaredCapabilities: (network: NetworkDefinition) => ReadonlySet<string>;
  readonly options: PlanOptions;
}

/**
 * Selection fields that a plugin must declare as a capability to honour (CNI conventions' names). Not "ips" and
 * "mac": as Multus does, they also go to every plugin as CNI_ARGS IP= and MAC=, which static IPAM, host-local and
 * the interface plugins read whatever they declare.
 */
const CAPABILITY_FIELDS = [
  { field: 'bandwidth', capability: 'bandwidth', present: (s: NetworkSelection) => s.bandwidth !== undefined },
  { field: 'portMappings', capability: 'portMappings', present: (s: NetworkSelection) => s.portMappings !== undefined },
  {
    field: 'infiniband-guid',
    capability: 'infinibandGUID',
    present: (s: NetworkSelection) => s.infinibandGUID !== undefined,
  },
] as const;

/** One attachment while planning, before it has a name. */
interface Pending {
  /** Where the attachment comes from, for messages: "the default network (...)", "element 2 (...)". */
  readonly who: string;
  /** `who` with the source it is part of, to start a message with. */
  readonly label: string;
  readonly network: NetworkDefinition;
  readonly explicit?: string;
  readonly selection?: NetworkSelection;
  readonly isDefault: boolean;
  readonly forceDelegate: boolean;
}

const invalid = (msg: string, details = ''): Result<never> =>
  err(new CniError(CniCode.InvalidNetworkConfig, msg, details));

function forceDelegate(network: NetworkDefinition, label: string): Result<boolean> {
  const value = network.annotations[DELEGATE_ANNOTATION];
  if (value === undefined || value === 'false') return ok(false);
  if (value === 'true') return ok(true);
  return invalid(`${label}: network ${network.key} has ${DELEGATE_ANNOTATION}: "${value}"; use "true" or "false"`);
}

export function planAttachments(input: PlanInput): Result<PlannedAttachment[]> {
  const { defaultNetwork, options } = input;
  const pending: Pending[] = [];

  if (defaultNetwork) {
    const defaultLabel = `the default network (${defaultNetwork.key})`;
    const defaultDelegate = forceDelegate(defaultNetwork, defaultLabel);
    if (!defaultDelegate.ok) return defaultDelegate;
    pending.push({
      who: defaultLabel,
      label: defaultLabel,
      network: defaultNetwork,
      explicit: options.defaultIfname,
      isDefault: true,
      forceDelegate: defaultDelegate.value,
    });
  }

  for (const [i, text] of options.sources.defaultNetworks.entries()) {
    const ref = parseNetworkReference(text, 'default', i);
    if (!ref.ok) return invalid(`defaultNetworks[${i}] (${JSON.stringify(text)}): ${ref.error}`);
    const label = `defaultNetworks[${i}] (${ref.value.namespace}/${ref.value.name})`;
    const network = input.resolve(ref.value.namespace, ref.value.name);
    if (!network.ok) return err(network.error.withContext(label));
    const delegate = forceDelegate(network.value, label);
    if (!delegate.ok) return delegate;
    const explicit = ref.value.interface;
    pending.push({
      who: label,
      label,
      network: network.value,
      explicit,
      isDefault: false,
      forceDelegate: delegate.value,
    });
  }

  if (options.sources.selectionAnnotation) {
    for (const sel of input.selections) {
      const who = describeSelection(sel);
      const label = `${SELECTION_ANNOTATION}: ${who}`;
      const network = input.resolve(sel.namespace, sel.name);
      if (!network.ok) return err(network.error.withContext(label));
      const declared = input.declaredCapabilities(network.value);
      for (const { field, capability, present } of CAPABILITY_FIELDS) {
        if (present(sel) && !declared.has(capability)) {
          const plugins = network.value.plugins.map((p) => p.type).join(', ');
          return invalid(
            `${label}: "${field}" needs a plugin with the "${capability}" capability, ` +
              `and network ${network.value.key} (${plugins}) does not declare it`,
            `declared capabilities: ${[...declared].sort().join(', ') || 'none'}`,
          );
        }
      }
      const delegate = forceDelegate(network.value, label);
      if (!delegate.ok) return delegate;
      const entry = { who, label, network: network.value, explicit: sel.interface, selection: sel, isDefault: false };
      pending.push({ ...entry, forceDelegate: delegate.value });
    }
  }

  // Reserve every explicit name first; a name asked for twice fails naming both requests.
  const owners = new Map<string, string>();
  if (!defaultNetwork) owners.set(options.defaultIfname, `the default network (${options.defaultIfname})`);
  for (const p of pending) {
    if (p.explicit === undefined) continue;
    if (RESERVED_IFNAMES.includes(p.explicit)) {
      const message = `${p.label}: interface "${p.explicit}" is the pod's loopback, which no network may be attached as`;
      return invalid(message, 'choose another interface name');
    }
    const earlier = owners.get(p.explicit);
    if (earlier) return invalid(`${p.label}: interface "${p.explicit}" is already taken by ${earlier}`);
    owners.set(p.explicit, p.who);
  }

  const taken = new Set(owners.keys());
  const nextIndex = new Map<string, number>();
  const planned: PlannedAttachment[] = [];
  const routed =
    pending.find((p) => p.selection?.defaultRoute !== undefined) ?? (defaultNetwork ? pending[0] : undefined);
  // Without the default network (a running pod's change), position 0 is still its.
  const first = defaultNetwork ? 0 : 1;
  for (const [position, p] of pending.entries()) {
    let ifname = p.explicit;
    if (ifname === undefined) {
      const annotated = p.network.annotations[INTERFACE_PREFIX_ANNOTATION];
      if (annotated === '')
        return invalid(`${p.label}: network ${p.network.key} has an empty ${INTERFACE_PREFIX_ANNOTATION}`);
      const prefix = annotated ?? (options.naming === 'eth' ? 'eth' : 'net');
      let n = annotated === undefined ? position + first : (nextIndex.get(prefix) ?? 1);
      while (taken.has(`${prefix}${n}`)) n++;
      ifname = `${prefix}${n}`;
      if (annotated !== undefined) nextIndex.set(prefix, n + 1);
      const problem = interfaceNameProblem(ifname);
      if (problem) {
        return invalid(
          `${p.label}: the generated interface name "${ifname}" ${problem}`,
          annotated !== undefined ? `network ${p.network.key} has ${INTERFACE_PREFIX_ANNOTATION}: "${annotated}"` : '',
        );
      }
      taken.add(ifname);
    }
    planned.push({
      ifname,
      explicitName: p.explicit !== undefined,
      network: p.network,
      ...definedFields({ selection: p.selection }),
      isDefault: p.isDefault,
      forceDelegate: p.forceDelegate,
      defaultRoute: p === routed,
    });
  }
  return ok(planned);
}
