/**
 * --install-cni-config: Plexus's conflist for the runtime. What it needs from disk (the default network file) is read
 * before anything starts, so a file plexusd cannot use stops it at once; the file is written only once plexusd is
 * ready, so the runtime never sends a pod to a daemon that cannot answer, at the cniVersion the node's runtime reads
 * (src/install/runtime-cni-version.ts), learnt then from this node's Node object.
 */
import { dirname } from 'node:path';
import type { Logger } from 'pino';
import { conflistForDaemon, defaultNetworkFileVersion, replaceFile } from '../install/cni-conf';
import { reportMultusServing } from '../install/multus-takeover';
import { conflistVersion, type RuntimeLookup, runtimeOfNode, runtimeUnknown } from '../install/runtime-cni-version';
import { segment } from '../common/api-object';
import type { ApiConnection } from '../k8s/connect';
import type { DaemonConfig } from './config';

/** What the conflist is made from, read at start. */
export interface ConflistPlan {
  readonly path: string;
  readonly defaultNetworkVersion: string | undefined;
}

/**
 * The plan, or undefined (and nothing to install) without --install-cni-config; `false` (logged as fatal) when the
 * default network file cannot be used.
 */
export function planConflist(config: DaemonConfig, log: Logger): ConflistPlan | undefined | false {
  if (!config.installCniConfig) return undefined;
  const version = defaultNetworkFileVersion(config.defaultNetwork);
  if (version.ok) return { path: config.installCniConfig, defaultNetworkVersion: version.value };
  log.fatal({ installCniConfig: config.installCniConfig }, version.error.message);
  return false;
}

/**
 * The conflist's writer, at the version the node's runtime reads (asked of the API now): called the moment plexusd is
 * ready, synchronously, so whoever sees plexusd ready also finds the conflist (unchanged bytes are not rewritten).
 */
export async function conflistWriter(
  config: DaemonConfig,
  plan: ConflistPlan,
  api: ApiConnection | undefined,
  log: Logger,
): Promise<() => void> {
  const runtime = config.installCniVersion === 'auto' ? await nodeRuntime(api) : runtimeUnknown('not asked');
  const chosen = conflistVersion({
    setting: config.installCniVersion,
    runtime,
    defaultNetworkVersion: plan.defaultNetworkVersion,
  });
  return () => {
    if (chosen.warning) log.warn({ path: plan.path, cniVersion: chosen.cniVersion }, chosen.warning);
    const changed = replaceFile(plan.path, conflistForDaemon(chosen.cniVersion, config.socket), 0o644);
    log.info(
      { path: plan.path, changed, cniVersion: chosen.cniVersion, why: chosen.why },
      'CNI config installed: the runtime sends new pods to plexus-cni',
    );
    if (!config.takeOverMultus) reportMultusServing(dirname(plan.path), log);
  };
}

/** The runtime the kubelet reports for this node; unknown without an API, or when the Node cannot be read. */
async function nodeRuntime(api: ApiConnection | undefined): Promise<RuntimeLookup> {
  if (!api) return runtimeUnknown('no Kubernetes API to read the Node from (standalone)');
  const node = await api.client.request('GET', `/api/v1/nodes/${segment(api.nodeName)}`, 'nodes');
  if (!node.ok) return runtimeUnknown(`the Node ${api.nodeName} could not be read (${node.error.message})`);
  return runtimeOfNode(node.value, api.nodeName);
}
