/**
 * The `delegate` driver: runs a network's whole plugin list (a conf is a list of one, a conflist a chain) by
 * exec'ing each plugin binary from the CNI bin dir, exactly as libcni would. The engine picks it for networks
 * whose plugin types Plexus does not run natively, or when a NetworkAttachmentDefinition forces delegation.
 *
 * Journal-first: before plugin i's ADD runs, a `delegateDel` step with the exact config bytes that ADD receives
 * is recorded, so a crash mid-ADD still DELs it, and DEL (steps undone in reverse) runs the chain backwards
 * with byte-identical configs.
 */
import { CniCode, CniError, type Result, err, ok } from '../../cni/errors';
import type { CniResult } from '../../cni/types';
import { isSupportedVersion } from '../../cni/version';
import type { PluginConfig } from '../../networks/nad';
import type { AttachRequest, Driver, DriverEnv } from '../driver';
import { buildPluginConfig } from './config';
import {
  type DelegateEnv,
  delegateCheck,
  delegateGc,
  delegateStatus,
  type ExecOptions,
  execPlugin,
  findPlugin,
  validatePluginType,
} from './exec';
import { ExecLimits } from './exec-limits';
import { parseCniResult } from './result';
import { delegateDelStep, delegateStepKinds, invocationsIn } from './undo';
import { errorMessage } from '../../common/error-message';

/** A delegate driver; its plugins run within `options.limits` (plexusd's), or limits of its own (DEFAULT_EXEC_LIMITS). */
export function createDelegateDriver(options: ExecOptions = {}): Driver<readonly PluginConfig[]> {
  const opts: ExecOptions = { ...options, limits: options.limits ?? new ExecLimits() };
  return {
    type: 'delegate',
    // What reaches a delegate depends on the capabilities each plugin declares (see declaredCapabilities).
    capabilities: ['ips', 'mac', 'bandwidth', 'portMappings', 'deviceID', 'infinibandGUID', 'dns'],
    // The chain is exec'd as it is; what a plugin thinks of its config is the plugin's to say.
    parse: (plugins) => {
      if (plugins.length === 0) return err(new CniError(CniCode.InvalidNetworkConfig, 'the network has no plugins'));
      for (const plugin of plugins) {
        const valid = validatePluginType(plugin.type);
        if (!valid.ok) return valid;
      }
      return ok(plugins);
    },
    attach: (req, plugins, env) => attachChain(req, plugins, env, opts),
    // libcni's CHECK: each plugin again, with the recorded bytes, and the attachment's final result as prevResult.
    check: (a) => delegateCheck(invocationsIn(a.steps), a.result, opts),
    gc: (network, live, cniBinDir) => delegateGc(network, live, cniBinDir, opts),
    status: (network, cniBinDir) => delegateStatus(network, cniBinDir, opts),
    undo: delegateStepKinds(opts),
  };
}

/** Plugins that read a selection's ipam-claim-reference from the pod's annotation themselves (OVN-Kubernetes does). */
const CLAIM_READERS: ReadonlySet<string> = new Set(['ovn-k8s-cni-overlay']);

/**
 * An IPAMClaim a delegated chain would not honour. Multus hands ipam-claim-reference to no plugin (not in the config,
 * not in CNI_ARGS), so the chain's addresses would not follow the claim: refused rather than silently dropped. A chain
 * with a plugin that reads the claim from the pod itself gets it as under Multus, that is, nothing in its config.
 */
function unhonouredClaim(req: AttachRequest, plugins: readonly PluginConfig[]): CniError | undefined {
  const claim = req.options?.ipamClaim;
  if (!claim || plugins.some((p) => CLAIM_READERS.has(p.type))) return undefined;
  return new CniError(
    CniCode.InvalidNetworkConfig,
    `network ${req.network.key} is delegated to ${plugins.map((p) => p.type).join(', ')}, which cannot honour IPAMClaim ${claim} (ipam-claim-reference): Multus passes it to no plugin`,
    'drop ipam-claim-reference from the selection, or give the network plexus or whereabouts IPAM with a driver Plexus runs natively (docs/ipam.md)',
  );
}

/** Runs the chain `parse` accepted: each plugin's type is a file name, and there is at least one. */
async function attachChain(
  req: AttachRequest,
  plugins: readonly PluginConfig[],
  env: DriverEnv,
  opts: ExecOptions,
): Promise<Result<CniResult>> {
  const refused = unhonouredClaim(req, plugins);
  if (refused) return err(refused);
  const delegateEnv: DelegateEnv = {
    containerId: req.containerId,
    netns: req.netns,
    ifname: req.ifname,
    args: req.cniArgs ?? '',
    path: env.cniBinDir,
  };

  let result: CniResult | undefined = req.options?.chainPrevResult;
  for (const [i, plugin] of plugins.entries()) {
    const context = `network ${req.network.key}, plugin ${i + 1}/${plugins.length} (${plugin.type})`;
    if (!isSupportedVersion(plugin.cniVersion))
      return err(
        new CniError(CniCode.IncompatibleVersion, `${context}: unsupported cniVersion "${plugin.cniVersion}"`),
      );
    // Found before anything is recorded: a missing binary then leaves no step that DEL could never run.
    const path = await findPlugin(plugin.type, env.cniBinDir);
    if (!path.ok) return err(path.error.withContext(context));
    // Serialized once: these bytes are what ADD reads and what the journal keeps for DEL.
    const config = JSON.stringify(buildPluginConfig(plugin, req, result));
    await env.record(delegateDelStep({ plugin: plugin.type, config, env: delegateEnv }));
    const added = await execPlugin(
      {
        command: 'ADD',
        type: plugin.type,
        network: req.network.cniName,
        path: path.value,
        stdin: config,
        containerId: req.containerId,
        netns: req.netns,
        ifname: req.ifname,
        args: delegateEnv.args,
        cniPath: env.cniBinDir,
      },
      env.signal ? { ...opts, signal: env.signal } : opts,
    );
    if (!added.ok) return err(added.error.withContext(context));
    let json: unknown;
    try {
      json = JSON.parse(added.value.stdout);
    } catch (e) {
      return err(
        new CniError(
          CniCode.Internal,
          `${context}: plugin ${plugin.type} printed no JSON result`,
          // stderr too: a plugin that exits 0 with nothing on stdout says why there, if anywhere.
          `${errorMessage(e)}; stdout: ${added.value.stdout.slice(0, 500)}; stderr: ${added.value.stderr.slice(0, 500)}`,
        ),
      );
    }
    const parsed = parseCniResult(json, plugin.cniVersion);
    if (!parsed.ok)
      return err(
        new CniError(
          parsed.error.code,
          `${context}: plugin ${plugin.type} returned an invalid result: ${parsed.error.message}`,
          added.value.stdout.slice(0, 500),
        ),
      );
    result = parsed.value;
  }
  // The chain's last result is the attachment's result (it may have no sandbox interface, e.g. IPAM-only chains).
  return ok(result ?? { interfaces: [], ips: [], routes: [] });
}
