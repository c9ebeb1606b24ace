/**
 * Which cniVersion Plexus's conflist carries (docs/configuration.md, "Which cniVersion"): the highest the node's
 * container runtime reads. It matters both ways: containerd 2 sends CNI STATUS, which makes the node's readiness
 * follow plexusd, only to a conflist of 1.1.0 or later; containerd 1.6/1.7 and CRI-O before 1.31 (libcni < 1.2) fail
 * every sandbox on a 1.1.0 result. The runtime is the one the kubelet reports in its Node's status
 * (`nodeInfo.containerRuntimeVersion`, "containerd://2.1.9"): the runtime's own answer to the CRI Version call.
 */
import { z } from 'zod';
import { type CniVersion, compareVersions, SUPPORTED_VERSIONS } from '../cni/version';

/** The conflist's cniVersion as an operator sets it (--install-cni-version): a version, or `auto`. */
export const INSTALL_CNI_VERSIONS = ['auto', ...SUPPORTED_VERSIONS] as const;
export type InstallCniVersion = (typeof INSTALL_CNI_VERSIONS)[number];

/** What every runtime Plexus knows reads (and the version when nothing is known). */
export const SAFE_CNI_VERSION: CniVersion = '1.0.0';

export interface ContainerRuntime {
  /** As the kubelet reports it: "containerd://2.1.9". */
  readonly reported: string;
  /** "containerd", "cri-o", "docker", ... */
  readonly name: string;
  readonly major: number;
  readonly minor: number;
}

/** The node's runtime, or why it is not known (said in the log beside the version chosen without it). */
export type RuntimeLookup =
  | { readonly kind: 'known'; readonly runtime: ContainerRuntime }
  | { readonly kind: 'unknown'; readonly reason: string };

export const runtimeUnknown = (reason: string): RuntimeLookup => ({ kind: 'unknown', reason });

/** "<name>://<version>", the version with or without a "v" and with any suffix ("1.6.20~ds1"). */
const REPORTED_RUNTIME = /^([a-z][a-z0-9.-]{0,62}):\/\/v?(\d{1,6})\.(\d{1,6})(?:[.~+-]|$)/;

export function parseContainerRuntime(reported: string): ContainerRuntime | undefined {
  const m = REPORTED_RUNTIME.exec(reported);
  if (!m) return undefined;
  return { reported, name: m[1]!, major: Number(m[2]), minor: Number(m[3]) };
}

/**
 * The first release of each runtime whose libcni (containernetworking/cni ≥ 1.2.0, in its go.mod at the release tag)
 * reads 1.1.0; every release before it reads up to 1.0.0.
 */
const READS_1_1_0_FROM: ReadonlyMap<string, readonly [number, number]> = new Map([
  ['containerd', [2, 0]],
  ['cri-o', [1, 31]],
]);

/** The highest cniVersion `runtime` reads; undefined for a runtime Plexus has no facts about. */
export function highestCniVersionOf(runtime: ContainerRuntime): CniVersion | undefined {
  const from = READS_1_1_0_FROM.get(runtime.name);
  if (!from) return undefined;
  const [major, minor] = from;
  return runtime.major > major || (runtime.major === major && runtime.minor >= minor) ? '1.1.0' : SAFE_CNI_VERSION;
}

const NodeRuntimeSchema = z.object({
  status: z.object({ nodeInfo: z.object({ containerRuntimeVersion: z.string().min(1).max(256) }) }),
});

/** The runtime a Node object (from the API: untrusted) reports. */
export function runtimeOfNode(node: unknown, nodeName: string): RuntimeLookup {
  const parsed = NodeRuntimeSchema.safeParse(node);
  if (!parsed.success) return runtimeUnknown(`the Node ${nodeName} reports no status.nodeInfo.containerRuntimeVersion`);
  const reported = parsed.data.status.nodeInfo.containerRuntimeVersion;
  const runtime = parseContainerRuntime(reported);
  if (runtime) return { kind: 'known', runtime };
  return runtimeUnknown(
    `the Node ${nodeName} reports a runtime version Plexus cannot read: ${JSON.stringify(reported)}`,
  );
}

export interface ConflistVersionInputs {
  readonly setting: InstallCniVersion;
  readonly runtime: RuntimeLookup;
  /** The --default-network file's cniVersion, when the default network is a file: the runtime that used it read it. */
  readonly defaultNetworkVersion?: string | undefined;
}

export interface ConflistVersion {
  readonly cniVersion: string;
  /** Why this version, for the log. */
  readonly why: string;
  /** An explicit setting the node's runtime does not read: every sandbox will fail. */
  readonly warning?: string;
}

/**
 * The conflist's cniVersion. `auto`: the highest the runtime reads; for a runtime not known, the default network
 * file's version (what the runtime read until now), else 1.0.0.
 */
export function conflistVersion(inputs: ConflistVersionInputs): ConflistVersion {
  const { setting, runtime } = inputs;
  const known = runtime.kind === 'known' ? runtime.runtime : undefined;
  const highest = known ? highestCniVersionOf(known) : undefined;
  if (setting !== 'auto') {
    const why = 'set by --install-cni-version';
    if (!known || !highest || compareVersions(setting, highest) <= 0) return { cniVersion: setting, why };
    const warning = `${known.reported} reads cniVersion up to ${highest}: every sandbox fails on a ${setting} result (set --install-cni-version auto)`;
    return { cniVersion: setting, why, warning };
  }
  if (known && highest) return { cniVersion: highest, why: `the highest version ${known.reported} reads` };
  const reason = known
    ? `Plexus has no facts about the runtime ${known.reported}`
    : (runtime as { reason: string }).reason;
  if (inputs.defaultNetworkVersion)
    return { cniVersion: inputs.defaultNetworkVersion, why: `${reason}: the default network file's version` };
  return { cniVersion: SAFE_CNI_VERSION, why: `${reason}: ${SAFE_CNI_VERSION}, which every runtime reads` };
}
