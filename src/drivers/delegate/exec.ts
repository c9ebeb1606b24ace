/**
 * Exec'ing delegated CNI plugin binaries, per the CNI spec's execution protocol: CNI_* variables in the
 * environment, the config on stdin, a result or an error object on stdout.
 *
 * Besides the low-level `execPlugin`, this module holds every verb Plexus forwards to delegates:
 *
 *   runDelegateDel(step, opts?)                         DEL from a journaled undo step, with the exact ADD bytes.
 *                                                       undo.ts runs it for delegateDel steps.
 *   delegateCheck(invocations, prevResult, opts?)       CHECK every plugin of an attachment, in ADD order.
 *                                                       `invocations` are the attachment's journaled delegateDel
 *                                                       steps (plugin, config, env), in the order recorded; each
 *                                                       config gets `prevResult` replaced by the attachment's
 *                                                       stored final result (as libcni does). Plugins whose
 *                                                       cniVersion is below 0.4.0 have no CHECK and are skipped.
 *   delegateStatus(network, cniBinDir, opts?)           STATUS every plugin of a network, in order; stops at the
 *                                                       first failure. Networks below 1.1.0 have no STATUS: ok.
 *                                                       A missing binary is code 50 (cannot service ADD).
 *   delegateGc(network, validAttachments, cniBinDir, opts?)
 *                                                       GC every plugin of a network with
 *                                                       cni.dev/valid-attachments (and the older cni.dev/attachments);
 *                                                       runs every plugin even after a failure, returns the first.
 *                                                       Networks below 1.1.0 have no GC: ok.
 *
 * Every exec is bounded: a timeout (default 60 s) kills the child's process group and returns code 11 (try again later);
 * output beyond 4 MiB kills it too; how many run at once, per network and node-wide, is ExecLimits' to say.
 */
import { constants, existsSync } from 'node:fs';
import { access, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { CniCode, CniError, type Result, err, ok } from '../../cni/errors';
import type { AttachmentKey, CniResult } from '../../cni/types';
import { compareVersions, convertResult, isSupportedVersion } from '../../cni/version';
import type { NetworkDefinition, PluginConfig } from '../../networks/nad';
import { type ExecLimits } from './exec-limits';
import type { PluginProcesses } from './plugin-processes';
import { execOnce, type PluginCall, type PluginOutput } from './plugin-run';
import { errorMessage } from '../../common/error-message';

export const DEFAULT_TIMEOUT_MS = 60_000;

export interface ExecOptions {
  /** Kill the plugin and fail with code 11 after this long (default 60 s). */
  readonly timeoutMs?: number;
  /** How long to keep retrying an exec that fails with "text file busy" (default 5 s). */
  readonly busyRetryMs?: number;
  /** Shares and caps of concurrent execs; without it, this call is not limited. */
  readonly limits?: ExecLimits;
  /** The node's running plugins, stopped with plexusd; without it, this call's plugin is not tracked. */
  readonly processes?: PluginProcesses;
  /** Aborted when the call this exec serves was given up on (its runtime left): not started after, killed if running. */
  readonly signal?: AbortSignal;
}

/** The environment a delegated plugin was exec'd with (CNI_COMMAND aside), kept so DEL can repeat it exactly. */
export interface DelegateEnv {
  readonly containerId: string;
  readonly netns: string;
  readonly ifname: string;
  readonly args: string; // CNI_ARGS
  readonly path: string; // CNI_PATH
}

/** One journaled plugin invocation: which plugin, the exact config bytes, and the environment used at ADD. */
export interface DelegateInvocation {
  readonly plugin: string;
  readonly config: string;
  readonly env: DelegateEnv;
}

/** The undo step of an invocation: its DEL, with the very config bytes used at ADD (undo.ts). */
export type DelegateDelStep = DelegateInvocation;

/** Plugin types are file names inside the bin dir, never paths. */
export function validatePluginType(type: string): Result<string> {
  if (type === '' || type === '.' || type.includes('/') || type.includes('..') || type.includes('\0')) {
    return err(
      new CniError(
        CniCode.InvalidNetworkConfig,
        `plugin type "${type}" is not a plugin name`,
        'a plugin type must be a file name in the CNI bin dir, without "/" or ".."',
      ),
    );
  }
  return ok(type);
}

/** Finds the first directory of a CNI_PATH-style list holding an executable regular file named exactly `type`. */
export async function findPlugin(type: string, cniPath: string): Promise<Result<string>> {
  const valid = validatePluginType(type);
  if (!valid.ok) return valid;
  const dirs = cniPath.split(':').filter(Boolean);
  for (const dir of dirs) {
    const path = join(dir, type);
    try {
      if (!(await stat(path)).isFile()) continue;
      await access(path, constants.X_OK);
      return ok(path);
    } catch {
      // not here (or not executable): try the next directory
    }
  }
  return err(
    new CniError(
      CniCode.Internal,
      `plugin ${type} not found in ${dirs.join(':') || '(empty CNI path)'}`,
      'install the plugin binary on this node or fix the network\'s "type"',
    ),
  );
}

export type { PluginCall, PluginOutput } from './plugin-run';

/**
 * Runs one plugin. Exit 0 gives its stdout; a non-zero exit gives the plugin's own error (its code, its message
 * prefixed with `plugin <type>: `), or code 100 with an excerpt of its output when that is not an error object.
 */
export async function execPlugin(call: PluginCall, opts: ExecOptions = {}): Promise<Result<PluginOutput>> {
  const exec = (): Promise<Result<PluginOutput>> => execRetryingBusy(call, opts);
  if (!opts.limits) return exec();
  const ran = await opts.limits.run(call.network, exec);
  return ran ? ran.value : err(tooManyQueued(call));
}

const DEFAULT_BUSY_RETRY_MS = 5000;

const tooManyQueued = (call: PluginCall): CniError =>
  new CniError(
    CniCode.TryAgainLater,
    `plugin ${call.type} of network ${call.network}: too many plugin executions queued`,
    'retry later',
  );

/** The network a journaled plugin config belongs to: its CNI "name" (for its share of execs). */
function networkOfConfig(config: string): string {
  try {
    const name = (JSON.parse(config) as { name?: unknown }).name;
    return typeof name === 'string' ? name : '';
  } catch {
    return '';
  }
}

/**
 * An installer that rewrites a plugin binary (a DaemonSet upgrading /opt/cni/bin) holds it open for writing for a
 * moment, and an exec meanwhile fails with ETXTBSY. Nothing ran, so the exec is tried again, backing off from 50 ms,
 * for up to `opts.busyRetryMs` (libcni retries this error too).
 */
async function execRetryingBusy(call: PluginCall, opts: ExecOptions): Promise<Result<PluginOutput>> {
  const deadline = Date.now() + (opts.busyRetryMs ?? DEFAULT_BUSY_RETRY_MS);
  for (let wait = 50; ; wait = Math.min(wait * 2, 500)) {
    const { processes, signal } = opts;
    const r = await execOnce(call, { timeoutMs: opts.timeoutMs ?? DEFAULT_TIMEOUT_MS, processes, signal });
    if (r.ok || r.error.details !== 'ETXTBSY' || Date.now() + wait > deadline) return r;
    await new Promise((resolve) => setTimeout(resolve, wait));
  }
}

/**
 * DEL from a journaled step: the recorded environment and the very bytes used at ADD. The recorded netns is
 * passed only while it still exists, else "" (as containerd's last DEL does), so the plugin still releases what
 * lives outside the pod (IP leases, host links). A missing binary is an error: the engine keeps the record to retry.
 */
export async function runDelegateDel(step: DelegateDelStep, opts: ExecOptions = {}): Promise<Result<void>> {
  const path = await findPlugin(step.plugin, step.env.path);
  if (!path.ok) return err(path.error.withContext(`DEL ${step.env.containerId}/${step.env.ifname}`));
  const netns = step.env.netns !== '' && existsSync(step.env.netns) ? step.env.netns : '';
  const r = await execPlugin(
    {
      command: 'DEL',
      type: step.plugin,
      network: networkOfConfig(step.config),
      path: path.value,
      stdin: step.config,
      containerId: step.env.containerId,
      netns,
      ifname: step.env.ifname,
      args: step.env.args,
      cniPath: step.env.path,
    },
    opts,
  );
  return r.ok ? ok(undefined) : r;
}

/** CHECK each journaled invocation in ADD order, with prevResult = the attachment's stored final result. */
export async function delegateCheck(
  invocations: readonly DelegateInvocation[],
  prevResult: CniResult,
  opts: ExecOptions = {},
): Promise<Result<void>> {
  for (const [i, inv] of invocations.entries()) {
    const context = `CHECK ${inv.env.containerId}/${inv.env.ifname}, plugin ${i + 1}/${invocations.length} (${inv.plugin})`;
    let config: Record<string, unknown>;
    try {
      config = JSON.parse(inv.config) as Record<string, unknown>;
    } catch (e) {
      return err(new CniError(CniCode.Internal, `${context}: the journaled config is not JSON`, errorMessage(e)));
    }
    const version = config.cniVersion;
    if (!isSupportedVersion(version))
      return err(
        new CniError(
          CniCode.IncompatibleVersion,
          `${context}: journaled config has unsupported cniVersion "${String(version)}"`,
        ),
      );
    if (compareVersions(version, '0.4.0') < 0) continue;
    const path = await findPlugin(inv.plugin, inv.env.path);
    if (!path.ok) return err(path.error.withContext(context));
    const stdin = JSON.stringify({ ...config, prevResult: convertResult(prevResult, version) });
    const r = await execPlugin(
      {
        command: 'CHECK',
        type: inv.plugin,
        network: networkOfConfig(inv.config),
        path: path.value,
        stdin,
        containerId: inv.env.containerId,
        netns: inv.env.netns,
        ifname: inv.env.ifname,
        args: inv.env.args,
        cniPath: inv.env.path,
      },
      opts,
    );
    if (!r.ok) return err(r.error.withContext(context));
  }
  return ok(undefined);
}

/** STATUS each plugin of the network in order; the first failure, with context, is the network's status. */
export async function delegateStatus(
  network: NetworkDefinition,
  cniBinDir: string,
  opts: ExecOptions = {},
): Promise<Result<void>> {
  if (compareVersions(network.cniVersion, '1.1.0') < 0) return ok(undefined);
  for (const [i, plugin] of network.plugins.entries()) {
    const context = `STATUS of network ${network.key}, plugin ${i + 1}/${network.plugins.length} (${plugin.type})`;
    const path = await findPlugin(plugin.type, cniBinDir);
    if (!path.ok) {
      const code = path.error.code === CniCode.InvalidNetworkConfig ? path.error.code : CniCode.PluginNotAvailable;
      return err(new CniError(code, `${context}: ${path.error.message}`, path.error.details));
    }
    const r = await execPlugin(
      {
        command: 'STATUS',
        type: plugin.type,
        network: network.cniName,
        path: path.value,
        stdin: JSON.stringify(plugin),
        cniPath: cniBinDir,
      },
      opts,
    );
    if (!r.ok) return err(r.error.withContext(context));
  }
  return ok(undefined);
}

/** GC each plugin of the network, telling it which attachments are still valid; continues past failures. */
export async function delegateGc(
  network: NetworkDefinition,
  validAttachments: readonly AttachmentKey[],
  cniBinDir: string,
  opts: ExecOptions = {},
): Promise<Result<void>> {
  if (compareVersions(network.cniVersion, '1.1.0') < 0) return ok(undefined);
  const attachments = validAttachments.map((a) => ({ containerID: a.containerId, ifname: a.ifname }));
  let first: CniError | undefined;
  for (const [i, plugin] of network.plugins.entries()) {
    const context = `GC of network ${network.key}, plugin ${i + 1}/${network.plugins.length} (${plugin.type})`;
    const config: PluginConfig = {
      ...plugin,
      'cni.dev/valid-attachments': attachments,
      'cni.dev/attachments': attachments,
    };
    const path = await findPlugin(plugin.type, cniBinDir);
    const r = path.ok
      ? await execPlugin(
          {
            command: 'GC',
            type: plugin.type,
            network: network.cniName,
            path: path.value,
            stdin: JSON.stringify(config),
            cniPath: cniBinDir,
          },
          opts,
        )
      : path;
    if (!r.ok) first ??= r.error.withContext(context);
  }
  return first ? err(first) : ok(undefined);
}
