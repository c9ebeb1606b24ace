/**
 * Running a CNI plugin executable the way containerd does: CNI_* environment, the network config on
 * stdin, the result on stdout, the exit code. Works for any plugin, so the same harness drives
 * bin/plexus-cni and the reference plugins.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export type CniCommand = 'ADD' | 'DEL' | 'CHECK' | 'STATUS' | 'VERSION';

/** A CNI plugin as a runtime knows it: the executable, its network config, extra environment. */
export interface Plugin {
  readonly binary: string;
  readonly config: Readonly<Record<string, unknown>>;
  /** Extra environment, e.g. CNI_PATH. */
  readonly env: Readonly<Record<string, string>>;
}

export interface Pod {
  readonly namespace: string;
  readonly name: string;
  readonly uid: string;
  /** The sandbox (pause) container ID: 64 hex digits, as containerd makes them. */
  readonly containerId: string;
  /** The pod's network namespace path. */
  readonly netns: string;
}

export const newPod = (namespace: string, name: string, netns: string): Pod => ({
  namespace,
  name,
  uid: randomUUID(),
  containerId: randomBytes(32).toString('hex'),
  netns,
});

/** CNI_ARGS as containerd 1.6 builds them. */
export const containerdArgs = (pod: Pod): string =>
  `IgnoreUnknown=1;K8S_POD_NAMESPACE=${pod.namespace};K8S_POD_NAME=${pod.name};K8S_POD_INFRA_CONTAINER_ID=${pod.containerId};K8S_POD_UID=${pod.uid}`;

export interface CallOptions {
  readonly ifname?: string;
  /** Overrides the pod's netns; `""` is what containerd sends on RemovePodSandbox. */
  readonly netns?: string;
  /** libcni adds the cached ADD result to the config of the first DEL (and of CHECK). */
  readonly prevResult?: unknown;
  /** Wraps the call in `/usr/bin/time -f %M` to learn the plugin's peak RSS (adds time: not for latency). */
  readonly measureRss?: boolean;
}

export interface Outcome {
  readonly command: CniCommand;
  readonly exitCode: number | null;
  readonly stdout: string;
  readonly stderr: string;
  /** Wall time from spawn to exit, in milliseconds. */
  readonly ms: number;
  /** Peak RSS of the plugin process in KiB, when measured. */
  readonly maxRssKiB?: number;
}

export const TIME_BINARY = '/usr/bin/time';

const live = new Map<ChildProcess, Promise<unknown>>();
let aborted = false;

/** Thrown by invoke() once abortCalls() ran: the script is stopping, not failing. */
export class CallsAborted extends Error {}

/**
 * After Ctrl-C: refuses any further call (so nothing is created while the teardown removes things),
 * kills the plugin processes still running, each by its own PID, and waits until they are gone.
 */
export async function abortCalls(): Promise<void> {
  aborted = true;
  for (const child of live.keys())
    if (child.pid !== undefined && child.exitCode === null && child.signalCode === null)
      process.kill(child.pid, 'SIGKILL');
  await Promise.all(live.values());
}

let rssFileCounter = 0;

export async function invoke(
  plugin: Plugin,
  command: CniCommand,
  pod: Pod | undefined,
  options: CallOptions = {},
): Promise<Outcome> {
  const config =
    options.prevResult !== undefined ? { ...plugin.config, prevResult: options.prevResult } : plugin.config;
  const env: Record<string, string> = {
    PATH: process.env['PATH'] ?? '/usr/sbin:/usr/bin:/sbin:/bin',
    CNI_COMMAND: command,
    ...(pod !== undefined
      ? {
          CNI_CONTAINERID: pod.containerId,
          CNI_NETNS: options.netns ?? pod.netns,
          CNI_IFNAME: options.ifname ?? 'eth0',
          CNI_ARGS: containerdArgs(pod),
        }
      : {}),
    ...plugin.env,
  };
  const rssFile = options.measureRss ? join(tmpdir(), `plexus-rss-${process.pid}-${rssFileCounter++}`) : undefined;
  const [file, args] =
    rssFile !== undefined ? [TIME_BINARY, ['-f', '%M', '-o', rssFile, plugin.binary]] : [plugin.binary, []];
  if (aborted) throw new CallsAborted(`${command} not started: the script is being stopped`);
  const started = process.hrtime.bigint();
  const child = spawn(file, args, { env, stdio: ['pipe', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
  child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
  child.stdin.on('error', () => undefined); // a plugin may exit without reading stdin (VERSION)
  child.stdin.end(JSON.stringify(config));
  const exited = new Promise<number | null>((resolve) => {
    child.on('error', (e) => {
      stderr += e.message;
      resolve(null);
    });
    child.on('close', (code) => resolve(code));
  });
  live.set(child, exited);
  const exitCode = await exited;
  const ms = Number(process.hrtime.bigint() - started) / 1e6;
  live.delete(child);
  let maxRssKiB: number | undefined;
  if (rssFile !== undefined) {
    const text = await readFile(rssFile, 'utf8').catch(() => '');
    await rm(rssFile, { force: true });
    // `time` writes "Command exited with non-zero status N" before the figure when the plugin fails.
    const last = text.trim().split('\n').pop() ?? '';
    if (/^\d+$/.test(last)) maxRssKiB = Number(last);
  }
  return { command, exitCode, stdout, stderr, ms, ...(maxRssKiB !== undefined ? { maxRssKiB } : {}) };
}

export interface ResultInterface {
  readonly name: string;
  readonly mac?: string;
  readonly sandbox?: string;
}

export interface AddResult {
  readonly cniVersion?: string;
  readonly interfaces: readonly ResultInterface[];
  readonly ips: readonly { readonly address: string; readonly gateway?: string; readonly interface?: number }[];
  readonly routes: readonly { readonly dst: string; readonly gw?: string }[];
}

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** The ADD result, or why the call did not produce one. */
export function parseAdd(outcome: Outcome): { ok: true; result: AddResult } | { ok: false; why: string } {
  if (outcome.exitCode !== 0) return { ok: false, why: describeFailure(outcome) };
  let parsed: unknown;
  try {
    parsed = JSON.parse(outcome.stdout);
  } catch {
    return { ok: false, why: `exit 0 but stdout is not JSON: ${outcome.stdout.slice(0, 200)}` };
  }
  if (!isRecord(parsed) || !Array.isArray(parsed['ips']) || parsed['ips'].length === 0) {
    return { ok: false, why: `result has no ips: ${outcome.stdout.slice(0, 200)}` };
  }
  const result = parsed as unknown as AddResult;
  return { ok: true, result: { ...result, interfaces: result.interfaces ?? [], routes: result.routes ?? [] } };
}

/** A one-line description of a failed call: the CNI error's code and message if there is one. */
export function describeFailure(outcome: Outcome): string {
  try {
    const e = JSON.parse(outcome.stdout) as unknown;
    if (isRecord(e) && typeof e['code'] === 'number') {
      const details = typeof e['details'] === 'string' ? e['details'] : JSON.stringify(e['details']);
      return `code ${e['code']}: ${String(e['msg'])}${e['details'] ? ` (${details})` : ''}`;
    }
  } catch {
    // not a CNI error object: fall through to the raw output
  }
  const text = `${outcome.stdout}${outcome.stderr}`.trim().replace(/\s+/g, ' ');
  return `exit ${String(outcome.exitCode)}${text ? `: ${text.slice(0, 300)}` : ''}`;
}

/** Addresses without prefix, e.g. 10.1.0.7. */
export const addressesOf = (result: AddResult): string[] => result.ips.map((i) => i.address.split('/')[0] ?? i.address);

/** Host-side links the plugin reports (no sandbox), except the named bridge(s). */
export function hostSideLinksOf(result: AddResult, bridges: string | readonly string[] | undefined): string[] {
  const skip = new Set(bridges === undefined ? [] : typeof bridges === 'string' ? [bridges] : bridges);
  return result.interfaces
    .filter((i) => (i.sandbox === undefined || i.sandbox === '') && !skip.has(i.name))
    .map((i) => i.name);
}

/** Pod interface name -> its addresses (without prefix), from a multi-interface result. */
export function addressesByInterface(result: AddResult): Map<string, { address: string; gateway?: string }[]> {
  const out = new Map<string, { address: string; gateway?: string }[]>();
  for (const entry of result.ips) {
    const name = entry.interface !== undefined ? result.interfaces[entry.interface]?.name : undefined;
    if (name === undefined) continue;
    const list = out.get(name) ?? [];
    list.push({
      address: entry.address.split('/')[0] ?? entry.address,
      ...(entry.gateway !== undefined ? { gateway: entry.gateway } : {}),
    });
    out.set(name, list);
  }
  return out;
}

/** The runtimeConfig containerd adds when the plugin declares the pod-annotations capability. */
export const POD_ANNOTATIONS_CAPABILITY = 'io.kubernetes.cri.pod-annotations';
export const SELECTION_ANNOTATION = 'k8s.v1.cni.cncf.io/networks';

/**
 * The plugin as containerd runs it for one pod: the config declares the pod-annotations capability and, when the
 * pod has annotations, carries them as runtimeConfig (libcni inserts runtimeConfig for declared capabilities only).
 */
export function withPodAnnotations(plugin: Plugin, annotations: Readonly<Record<string, string>>): Plugin {
  const capabilities = {
    ...(plugin.config['capabilities'] as Record<string, boolean> | undefined),
    [POD_ANNOTATIONS_CAPABILITY]: true,
  };
  const config: Record<string, unknown> = { ...plugin.config, capabilities };
  if (Object.keys(annotations).length > 0)
    config['runtimeConfig'] = { [POD_ANNOTATIONS_CAPABILITY]: { ...annotations } };
  return { ...plugin, config };
}
