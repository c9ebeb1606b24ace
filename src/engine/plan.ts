/**
 * From one CNI ADD to the list of attachments a pod gets: its annotations (from the runtime's
 * io.kubernetes.cri.pod-annotations capability), the selection annotation, the plan, and for each attachment
 * the driver that runs it and the request that driver receives. Nothing here touches the kernel.
 */
import { existsSync } from 'node:fs';
import { RuntimeConfig } from '../cni/args';
import { type CniVersion, LATEST_VERSION } from '../cni/version';
import type { AttachmentRecord } from './journal';
import { CniCode, CniError, type Result, err, ok } from '../cni/errors';
import type { CniRequest } from '../cni/request';
import type { AttachmentOptions, AttachRequest } from '../drivers/driver';
import type { PodIdentity } from '../cni/types';
import type { DriverRegistry } from '../drivers/registry';
import type { NetworkSource } from '../networks/source';
import { declaredCapabilities, type NetworkDefinition } from '../networks/nad';
import { delegationForced, type NamingScheme, type PlannedAttachment, planAttachments } from '../networks/planner';
import {
  describeSelection,
  type NetworkSelection,
  parsePodAnnotations,
  parseSelection,
  POD_ANNOTATIONS_CAPABILITY,
  SELECTION_ANNOTATION,
} from '../networks/selection';
import { chooseDefaultNetwork } from '../networks/default-network';
import { isolationProblem, type IsolationSettings } from '../networks/isolation';
import type { ClaimedNetworkDevice } from './claims/ports';
import { withClaimedNetworkDevices, withClaimedSelections } from './claims/networks';
import type { AttachmentStep } from './attachment-step';
import { auxiliaryChainStep } from './auxiliary-chain-step';
import { definedFields } from '../common/defined-fields';

type AddRequest = Extract<CniRequest, { command: 'ADD' | 'CHECK' | 'DEL' }>;

export interface PlanSettings extends IsolationSettings {
  readonly defaultNetwork?: string;
  readonly naming: NamingScheme;
  readonly selectionAnnotation: boolean;
  readonly defaultNetworks: readonly string[];
  /** Pods of these namespaces do not get defaultNetworks (Multus's systemNamespaces). */
  readonly systemNamespaces?: readonly string[];
  /** While this file does not exist, ADD answers "try again later" (Multus's readinessindicatorfile). */
  readonly readinessIndicatorFile?: string;
  /** Its `.conf` files run as a chain after every pod's networks (Multus's auxiliaryCNIChainName). */
  readonly auxiliaryChain?: string;
  /** What one pod may ask for (plexusd flags); unbounded where not set. */
  readonly limits?: PodLimits;
}

export interface PodLimits {
  /** Interfaces in one pod: the default network, defaultNetworks and every selection element (--max-interfaces-per-pod). */
  readonly interfacesPerPod: number;
  /** Bytes of the k8s.v1.cni.cncf.io/networks annotation (--max-annotation-bytes). */
  readonly annotationBytes: number;
}

export type { AttachmentStep } from './attachment-step';

/** runtimeConfig keys that belong to the pod's default network only (portMappings per the NPWG spec). */
const DEFAULT_NETWORK_ONLY = ['portmappings', 'ips', 'mac', 'bandwidth', 'deviceid', 'infinibandguid'];

/** The pod a CNI call names (CNI_ARGS K8S_POD_NAMESPACE, K8S_POD_NAME, K8S_POD_UID). */
export const podIdentityOf = (req: {
  args: { podNamespace?: string; podName?: string; podUid?: string };
}): PodIdentity =>
  definedFields({
    namespace: req.args.podNamespace || undefined,
    name: req.args.podName || undefined,
    uid: req.args.podUid || undefined,
  });

/**
 * The request a running pod's networks are planned from when they change (hot-plug): what its journal record says of
 * its sandbox, and the CNI_ARGS a runtime would pass for it (delegated plugins get them as they got them at ADD).
 */
export function runningPodRequest(record: AttachmentRecord): AddRequest {
  const { containerId, netns, ifname, pod, cniNetwork } = record.meta;
  const raw: [string, string][] = [['IgnoreUnknown', '1']];
  if (pod.namespace) raw.push(['K8S_POD_NAMESPACE', pod.namespace]);
  if (pod.name) raw.push(['K8S_POD_NAME', pod.name]);
  raw.push(['K8S_POD_INFRA_CONTAINER_ID', containerId]);
  if (pod.uid) raw.push(['K8S_POD_UID', pod.uid]);
  const version = (record.cniVersion ?? LATEST_VERSION) as CniVersion;
  return {
    command: 'ADD',
    containerId,
    netns,
    ifname,
    version,
    rawConfig: '{}',
    config: {},
    networkName: cniNetwork,
    runtimeConfig: new RuntimeConfig({}),
    args: {
      ...definedFields({
        podNamespace: pod.namespace || undefined,
        podName: pod.name || undefined,
        podUid: pod.uid || undefined,
      }),
      ignoreUnknown: true,
      ips: [],
      raw,
    },
  };
}

const clusterNetworkNotReady = (file: string): CniError =>
  new CniError(
    CniCode.TryAgainLater,
    `the cluster network is not ready: ${file} does not exist`,
    "the runtime retries; the cluster's network plugin writes this file once it serves the node (--readiness-indicator-file)",
  );

/** The CNI config's "defaultNetwork", else plexusd's --default-network. */
export const configuredDefaultNetwork = (
  req: { config: Record<string, unknown> },
  settings: PlanSettings,
): string | undefined =>
  typeof req.config.defaultNetwork === 'string' ? req.config.defaultNetwork : settings.defaultNetwork;

/** Where a plan comes from: the node's settings, its networks and the drivers that run them. */
export interface PlanSources {
  readonly settings: PlanSettings;
  readonly networks: NetworkSource;
  readonly drivers: DriverRegistry;
}

/** One pod's plan, asked of planPod. */
export interface PodPlanRequest extends PlanSources {
  readonly req: AddRequest;
  /**
   * The pod's annotations from the Kubernetes API. Without them (a standalone node), the runtime's
   * io.kubernetes.cri.pod-annotations are read instead.
   */
  readonly annotations?: Readonly<Record<string, string>> | undefined;
  /** The plan of a running pod's secondary networks (hot-plug): no default network (the pod keeps its own). */
  readonly runningPod?: boolean;
  /** The devices of the pod's DRA claims, whose networks join the selected ones (claimed-networks.ts). */
  readonly claimed?: readonly ClaimedNetworkDevice[];
}

export function planPod(asked: PodPlanRequest): Result<AttachmentStep[]> {
  const { req, settings, networks, drivers, annotations: podAnnotations, runningPod = false, claimed = [] } = asked;
  const delegate = drivers.delegate;
  let annotations: Readonly<Record<string, string>> = podAnnotations ?? {};
  const rawAnnotations = req.runtimeConfig.get(POD_ANNOTATIONS_CAPABILITY);
  if (!podAnnotations && rawAnnotations !== undefined) {
    const parsed = parsePodAnnotations(rawAnnotations);
    if (!parsed.ok) return parsed;
    annotations = parsed.value;
  }
  const podNamespace = req.args.podNamespace ?? 'default';
  if (!runningPod && settings.readinessIndicatorFile && !existsSync(settings.readinessIndicatorFile))
    return err(clusterNetworkNotReady(settings.readinessIndicatorFile));
  const defaultNetworks = settings.systemNamespaces?.includes(podNamespace) ? [] : settings.defaultNetworks;
  const defaultNetwork = runningPod
    ? ok(undefined)
    : chooseDefaultNetwork({
        configured: configuredDefaultNetwork(req, settings),
        annotations,
        podNamespace,
        networks,
        isolation: settings,
      });
  if (!defaultNetwork.ok) return defaultNetwork;
  const selectionText = settings.selectionAnnotation ? annotations[SELECTION_ANNOTATION] : undefined;
  const limits = settings.limits;
  if (limits && selectionText !== undefined && Buffer.byteLength(selectionText) > limits.annotationBytes) {
    return err(
      new CniError(
        CniCode.InvalidNetworkConfig,
        `${SELECTION_ANNOTATION} is ${Buffer.byteLength(selectionText)} bytes, more than this node allows (--max-annotation-bytes ${limits.annotationBytes})`,
        "select fewer networks, or ask the node's operator to raise the limit",
      ),
    );
  }
  const annotated = settings.selectionAnnotation ? parseSelection(selectionText, podNamespace) : ok([]);
  if (!annotated.ok) return annotated;
  const { selections: merged, deviceOf } = withClaimedSelections(annotated.value, claimed);
  const selections = { value: merged };
  for (const sel of selections.value) {
    const refused = isolationProblem(settings, podNamespace, sel, `${SELECTION_ANNOTATION}: ${describeSelection(sel)}`);
    if (refused) return err(refused);
  }
  const interfaces = 1 + defaultNetworks.length + selections.value.length;
  if (limits && interfaces > limits.interfacesPerPod) {
    return err(
      new CniError(
        CniCode.InvalidNetworkConfig,
        `the pod asks for ${interfaces} interfaces (the default network, ${defaultNetworks.length} from defaultNetworks, ${selections.value.length} selected), more than this node allows (--max-interfaces-per-pod ${limits.interfacesPerPod})`,
        "select fewer networks, or ask the node's operator to raise the limit",
      ),
    );
  }

  // The network's config decides (NPWG 4.1.2.1.3.x): a capability counts only where a plugin declares it, for native
  // and delegated drivers alike, so one NAD behaves the same whatever runs it. A native driver must also support it,
  // as the reference plugin it stands in for would.
  const capabilitiesOf = (network: NetworkDefinition, forceDelegate: boolean): ReadonlySet<string> => {
    const driver = drivers.for(network, forceDelegate);
    const declared = network.plugins.flatMap((p) => declaredCapabilities(p));
    return new Set(
      driver === delegate ? declared : declared.filter((c) => (driver.capabilities as readonly string[]).includes(c)),
    );
  };
  const plan = planAttachments({
    ...definedFields({ defaultNetwork: defaultNetwork.value }),
    selections: selections.value,
    resolve: (ns, name) => networks.get(ns, name),
    declaredCapabilities: (n) => capabilitiesOf(n, delegationForced(n)),
    options: {
      naming: settings.naming,
      defaultIfname: req.ifname,
      sources: { selectionAnnotation: settings.selectionAnnotation || deviceOf.size > 0, defaultNetworks },
    },
  });
  if (!plan.ok) return plan;

  const pod = podIdentityOf(req);
  const secondaryRuntimeConfig = new RuntimeConfig(
    Object.fromEntries(
      Object.entries(req.runtimeConfig.raw).filter(([k]) => !DEFAULT_NETWORK_ONLY.includes(k.toLowerCase())),
    ),
  );
  const steps: AttachmentStep[] = [];
  for (const planned of plan.value) {
    const driver = drivers.for(planned.network, planned.forceDelegate);
    const where = `${planned.isDefault ? 'default network' : 'network'} ${planned.network.key} (${planned.ifname})`;
    const config = driver.parse(planned.network.plugins);
    if (!config.ok) return err(config.error.withContext(where));
    const request = planned.isDefault
      ? defaultRequest(req, planned, pod)
      : secondaryRequest(req, planned, pod, secondaryRuntimeConfig);
    if (!request.ok) return err(request.error.withContext(where));
    steps.push({ planned, driver, config: config.value, request: request.value });
  }
  if (!runningPod && settings.auxiliaryChain) {
    const chain = auxiliaryChainStep({
      chainDir: settings.auxiliaryChain,
      version: req.version,
      before: steps,
      drivers,
      requestFor: (planned) => secondaryRequest(req, planned, pod, secondaryRuntimeConfig),
    });
    if (!chain.ok) return chain;
    if (chain.value) steps.push(chain.value);
  }
  return ok(withClaimedNetworkDevices(steps, claimed, deviceOf));
}

function defaultRequest(req: AddRequest, planned: PlannedAttachment, pod: PodIdentity): Result<AttachRequest> {
  const fromRuntime = req.runtimeConfig.get('ips');
  if (fromRuntime !== undefined && (!Array.isArray(fromRuntime) || !fromRuntime.every((x) => typeof x === 'string'))) {
    return err(new CniError(CniCode.InvalidNetworkConfig, 'runtimeConfig.ips must be a list of IP addresses'));
  }
  const runtimeMac = req.runtimeConfig.get('mac');
  if (
    runtimeMac !== undefined &&
    (typeof runtimeMac !== 'string' || !/^([0-9a-fA-F]{2}:){5}[0-9a-fA-F]{2}$/.test(runtimeMac))
  ) {
    return err(
      new CniError(
        CniCode.InvalidNetworkConfig,
        `runtimeConfig.mac ${JSON.stringify(runtimeMac)} is not a MAC address`,
      ),
    );
  }
  const mac = (req.args.mac ?? runtimeMac)?.toLowerCase();
  const options: AttachmentOptions = {
    ...objectOption(req.runtimeConfig.get('bandwidth'), 'bandwidth'),
    ...listOption(req.runtimeConfig.get('portMappings'), 'portMappings'),
    ...stringOption(req.runtimeConfig.get('deviceID'), 'deviceID'),
    ...stringOption(req.runtimeConfig.get('infinibandGUID'), 'infinibandGUID'),
  };
  return ok({
    containerId: req.containerId,
    netns: req.netns,
    ifname: planned.ifname,
    runtimeIfname: req.ifname,
    pod,
    network: planned.network,
    plugin: planned.network.plugins[0]!,
    ips: [...req.args.ips, ...(fromRuntime ?? [])],
    ...definedFields({ mac: mac || undefined }),
    runtimeConfig: req.runtimeConfig,
    options,
    cniArgs: rawArgs(req),
  });
}

function secondaryRequest(
  req: AddRequest,
  planned: PlannedAttachment,
  pod: PodIdentity,
  runtimeConfig: RuntimeConfig,
): Result<AttachRequest> {
  const sel = planned.selection;
  const options: AttachmentOptions = {
    ...(sel?.bandwidth ? { bandwidth: sel.bandwidth } : {}),
    ...(sel?.portMappings ? { portMappings: sel.portMappings } : {}),
    ...(sel?.cniArgs ? { cniArgs: sel.cniArgs } : {}),
    ...(sel?.infinibandGUID ? { infinibandGUID: sel.infinibandGUID } : {}),
    ...(sel?.ipamClaimReference ? { ipamClaim: sel.ipamClaimReference } : {}),
  };
  return ok({
    containerId: req.containerId,
    netns: req.netns,
    ifname: planned.ifname,
    runtimeIfname: req.ifname,
    pod,
    network: planned.network,
    plugin: planned.network.plugins[0]!,
    ips: sel?.ips ?? [],
    ...(sel?.mac ? { mac: sel.mac } : {}),
    runtimeConfig,
    options,
    cniArgs: [rawArgs(req, DEFAULT_NETWORK_ONLY_ARGS), ...selectionArgs(sel)].filter(Boolean).join(';'),
  });
}

/** CNI_ARGS keys that request something of the default network (podman's static IP and MAC). */
const DEFAULT_NETWORK_ONLY_ARGS = ['IP', 'MAC'];

/**
 * The selection's "mac" and "ips" as CNI_ARGS MAC= and IP= (comma separated), as Multus passes them to every plugin
 * whatever its capabilities (static IPAM and host-local read IP, macvlan and bridge read MAC).
 */
const selectionArgs = (sel: NetworkSelection | undefined): string[] => [
  ...(sel?.mac ? [`MAC=${sel.mac}`] : []),
  ...(sel?.ips ? [`IP=${sel.ips.join(',')}`] : []),
];

/** The runtime's CNI_ARGS as delegated plugins receive them, less the keys meant for another attachment. */
const rawArgs = (req: AddRequest, without: readonly string[] = []): string =>
  req.args.raw
    .filter(([k]) => !without.includes(k))
    .map(([k, v]) => `${k}=${v}`)
    .join(';');

const objectOption = (v: unknown, key: 'bandwidth'): Partial<AttachmentOptions> =>
  v !== null && typeof v === 'object' && !Array.isArray(v) ? { [key]: v as Record<string, unknown> } : {};
const listOption = (v: unknown, key: 'portMappings'): Partial<AttachmentOptions> =>
  Array.isArray(v) ? { [key]: v.filter((x): x is Record<string, unknown> => x !== null && typeof x === 'object') } : {};
const stringOption = (v: unknown, key: 'deviceID' | 'infinibandGUID'): Partial<AttachmentOptions> =>
  typeof v === 'string' && v ? { [key]: v } : {};
