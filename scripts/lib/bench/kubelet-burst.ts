/**
 * A burst of pods through a real kubelet (SingleNode: a cluster of one node, in its own network and mount namespaces):
 * every pod created at once, timed from the first create to the last pod Running, then deleted until the node is
 * clean. Mode `bridge`: the reference bridge + host-local as the node's network, no Plexus. Mode `plexus`: plexus-cni
 * as the node's only CNI plugin, plexusd inside the node reading its networks from the API, each pod with the default
 * network and two more (eth0, net1, net2). The networks' bridges live in the node's network namespace and go with it.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { closeSync, copyFileSync, mkdirSync, mkdtempSync, openSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SingleNode } from '../../../test/support/cluster/single-node';
import { referencePlugins } from '../../../test/support/plugin-dir';
import { freeTenNet, linksOfBridge, uniquePrefix } from '../host';
import { daemonEntry, hostLocalLeftovers, httpOverSocket, plexusLeftovers, shimBinary } from '../plexusd';
import { round } from '../stats';
import { Teardown } from '../teardown';

export type BurstMode = 'bridge' | 'plexus';

const NETWORKS_ANNOTATION = 'k8s.v1.cni.cncf.io/networks';
const STATUS_ANNOTATION = 'k8s.v1.cni.cncf.io/network-status';

export interface KubeletBurstReport {
  readonly mode: BurstMode;
  readonly pods: number;
  /** First create request to the last pod Running. */
  readonly allRunningSeconds: number;
  /** First create request to the last create answered, and to the first pod Running. */
  readonly createSeconds: number;
  readonly firstRunningSeconds: number;
  /** Per pod, create request to Running. */
  readonly p50Seconds: number;
  readonly p95Seconds: number;
  readonly maxSeconds: number;
  /** Pods that did not reach Running, plus sandboxes the kubelet had to retry (FailedCreatePodSandBox). */
  readonly failures: number;
  readonly failureMessages: readonly string[];
  /** Deletion of every pod until the API has none and no sandbox is ready. */
  readonly deleteSeconds: number;
  /**
   * Pods found with the interfaces and addresses expected: in the API (plexus: every interface in the network-status
   * annotation; bridge: status.podIP), and inside the pod's netns (a few pods).
   */
  readonly verified: { readonly fromApi: number; readonly netns: number };
  /** VmHWM at the end; VmRSS sampled every 100 ms; CNI calls in flight and queued (its /readyz) at most, sampled alike. */
  readonly plexusd?: {
    readonly peakRssMiB: number;
    readonly sampledPeakRssMiB: number;
    readonly startRssMiB: number;
    readonly peakInFlight: number;
    readonly peakQueued: number;
  };
  /** Left after the pods were deleted: bridge ports, leases, journal records. */
  readonly leaks: readonly string[];
  /** What the node's tear-down reported. */
  readonly problems: readonly string[];
  readonly nodeStartSeconds: number;
}

export interface BurstOptions {
  readonly pods: number;
  readonly createConcurrency: number;
  readonly runningTimeoutMs: number;
  /** Pods whose netns is looked into. */
  readonly netnsChecks: number;
  /** More plexusd flags (e.g. --max-concurrent 32), after the burst's own. */
  readonly plexusdArgs: readonly string[];
  readonly log: (line: string) => void;
}

export interface Network {
  readonly name: string;
  readonly bridge: string;
  /** First three octets of its /24. */
  readonly net: string;
}

export const bridgeConfig = (n: Network, dataDir?: string): Record<string, unknown> => ({
  cniVersion: '1.0.0',
  name: n.name,
  type: 'bridge',
  bridge: n.bridge,
  isGateway: false,
  ipMasq: false,
  ipam: { type: 'host-local', ranges: [[{ subnet: `${n.net}.0/24` }]], ...(dataDir ? { dataDir } : {}) },
});

const kib = (pid: number, field: 'VmHWM' | 'VmRSS'): number | undefined => {
  try {
    const m = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m?.[1] !== undefined ? Number(m[1]) : undefined;
  } catch {
    return undefined;
  }
};

/**
 * The node's CNI conflist for a mode: the reference bridge on the default network, or plexus-cni (copied beside the
 * reference plugins plexusd delegates to, into `binDir`, a directory of the run's own) forwarding to `socket`.
 */
export function nodeConflist(
  mode: BurstMode,
  defaultNetwork: Network,
  socket: string,
  binDir: string,
): (nodeRoot: string) => string {
  if (mode === 'bridge') {
    return (nodeRoot) =>
      JSON.stringify({
        cniVersion: '1.0.0',
        name: 'podnet',
        plugins: [bridgeConfig(defaultNetwork, join(nodeRoot, 'cni-data'))],
      });
  }
  mkdirSync(binDir);
  copyFileSync(shimBinary(), join(binDir, 'plexus-cni'));
  for (const f of readdirSync(referencePlugins())) copyFileSync(join(referencePlugins(), f), join(binDir, f));
  return () =>
    JSON.stringify({
      cniVersion: '1.0.0',
      name: 'plexus',
      plugins: [
        { type: 'plexus-cni', socketPath: socket, capabilities: { 'io.kubernetes.cri.pod-annotations': true } },
      ],
    });
}

export interface PlexusdRun {
  /** The run's directory (on the host, which the node sees too): plexusd's state, networks directory and log. */
  readonly root: string;
  readonly socket: string;
  /** The plugins plexusd delegates to. */
  readonly binDir: string;
  /** The node plexusd runs in (as the DaemonSet's pod would): its namespaces, its name, the API as it reaches it. */
  readonly node: SingleNode;
  /** More plexusd flags, after the run's own. */
  readonly extra: readonly string[];
}

/**
 * plexusd as the brief of this burst runs it, inside the node (nsenter execs it: the PID kept is plexusd's): networks
 * from the API as the plexus user (the cluster's RBAC for it), the node's name, the private plugin directory.
 */
export async function startPlexusd(run: PlexusdRun): Promise<ChildProcess> {
  const { root, socket, binDir, node } = run;
  const networksDir = join(root, 'networks'); // empty: every network comes from the API
  mkdirSync(networksDir);
  const log = join(root, 'plexusd.log');
  const fd = openSync(log, 'a');
  const [command, ...before] = [...node.launcher, daemonEntry()];
  const child = spawn(
    command,
    [
      ...before,
      '--socket',
      socket,
      '--state-dir',
      join(root, 'state'),
      '--networks-dir',
      networksDir,
      '--cni-bin-dir',
      binDir,
      '--kubeconfig',
      node.nodeKubeconfig('plexus'),
      '--node-name',
      node.nodeName,
      '--default-network',
      'default/podnet',
      '--log-level',
      'warn',
      ...run.extra,
    ],
    { stdio: ['ignore', fd, fd] },
  );
  closeSync(fd);
  const text = (): string => readFileSync(log, 'utf8').slice(-5000);
  const deadline = Date.now() + 30000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`plexusd exited with ${child.exitCode}: ${text()}`);
    const ready = await httpOverSocket(socket, 'GET', '/readyz', undefined, 1000).catch(() => undefined);
    if (ready?.status === 200) return child;
    if (Date.now() > deadline) {
      await stopPlexusd(child); // not handed to the tear-down yet: stop it here, or it outlives the run
      throw new Error(`plexusd not ready after 30 s: ${text()}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}

export async function stopPlexusd(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 30000);
  await exited;
  clearTimeout(timer);
}

/** Interfaces in a pod's network namespace (by path) with their IPv4 addresses. */
function netnsAddresses(netnsPath: string): Map<string, string> {
  const r = spawnSync('nsenter', [`--net=${netnsPath}`, 'ip', '-o', '-4', 'addr', 'show'], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`nsenter --net=${netnsPath} ip addr: ${r.stderr}`);
  const found = new Map<string, string>();
  for (const line of r.stdout.split('\n')) {
    const m = /^\d+:\s+(\S+)\s+inet (\S+)\//.exec(line);
    if (m && m[1] !== 'lo') found.set(m[1]!, m[2]!);
  }
  return found;
}

/** One burst in one mode, on a node of its own; the node and everything made for it are gone when it returns. */
export async function runKubeletBurst(mode: BurstMode, options: BurstOptions): Promise<KubeletBurstReport> {
  const { log } = options;
  const teardown = new Teardown();
  const prefix = uniquePrefix('kb');
  const second = freeTenNet(100, 149); // the cluster's uplinks take 10.150-189

  const networks: Network[] = ['podnet', 'sec1', 'sec2'].map((name, i) => ({
    name,
    bridge: `${prefix}b${i}`,
    net: `10.${second}.${i}`,
  }));
  const root = mkdtempSync(join(tmpdir(), `plexus-${prefix}-`));
  const state: { node?: SingleNode; daemon?: ChildProcess; problems: string[] } = { problems: [] };
  // One step, in the order that works: the node's CRI tear-down needs plexusd alive for its CNI DELs, and plexusd's
  // watches must be gone before the API server stops. The bridges go with the node's network namespace.
  teardown.add('tear the node down', async () => {
    const t0 = performance.now();
    const daemon = state.daemon;
    const stopDaemon = async (): Promise<void> => {
      if (daemon) await stopPlexusd(daemon);
    };
    if (state.node) state.problems.push(...(await state.node.stop({ runtimeStopped: stopDaemon })));
    await stopDaemon(); // when the node never started
    log(`${mode}: node${daemon ? ' and plexusd' : ''} stopped in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
    rmSync(root, { recursive: true, force: true });
  });
  let report: KubeletBurstReport;
  try {
    const socket = join(root, 'plexus.sock');
    const binDir = join(root, 'bin');
    const conflist = nodeConflist(mode, networks[0]!, socket, binDir);
    const startedAt = performance.now();
    const node = (state.node = await SingleNode.start({
      cniConfList: conflist,
      cniBinDir: mode === 'bridge' ? referencePlugins() : binDir,
      prefix,
    }));
    const nodeStartSeconds = (performance.now() - startedAt) / 1000;
    log(
      `${mode}: node Ready in ${nodeStartSeconds.toFixed(1)} s (root ${node.dir}); ${options.pods} pods, subnets 10.${second}.{0,1,2}.0/24`,
    );
    let rssStart: number | undefined;
    let rssPeakSampled = 0;
    const calls = { inFlight: 0, queued: 0 };
    let sampler: NodeJS.Timeout | undefined;
    if (mode === 'plexus') {
      // The cluster has deploy/'s CRDs and plexusd's RBAC already, as after `kubectl apply -f deploy/`.
      for (const n of networks) {
        const made = await node.api.createNad('default', n.name, JSON.stringify(bridgeConfig(n)));
        if (made.status !== 201) throw new Error(`creating NAD ${n.name}: ${made.status} ${JSON.stringify(made.body)}`);
      }
      const daemon = (state.daemon = await startPlexusd({ root, socket, binDir, node, extra: options.plexusdArgs }));
      rssStart = kib(daemon.pid!, 'VmRSS');
      sampler = setInterval(() => {
        rssPeakSampled = Math.max(rssPeakSampled, kib(daemon.pid!, 'VmRSS') ?? 0);
        void httpOverSocket(socket, 'GET', '/readyz', undefined, 1000).then(
          (r) => {
            const { inFlight = 0, queued = 0 } = JSON.parse(r.body) as { inFlight?: number; queued?: number };
            calls.inFlight = Math.max(calls.inFlight, inFlight);
            calls.queued = Math.max(calls.queued, queued);
          },
          () => undefined,
        );
      }, 100);
    }

    const names = await node.createPods(options.pods, {
      namePrefix: 'burst-',
      concurrency: options.createConcurrency,
      ...(mode === 'plexus' ? { annotations: { [NETWORKS_ANNOTATION]: 'sec1,sec2' } } : {}),
    });
    let failureMessages: string[] = [];
    let failed = 0; // pods not Running, or without the interfaces expected
    const timings = await node.waitAllRunning(names, options.runningTimeoutMs).catch((e: Error) => {
      failed = options.pods;
      failureMessages = [e.message];
      return undefined;
    });
    if (timings) failureMessages = [...timings.failureMessages];
    log(`${mode}: ${timings ? `all Running in ${(timings.totalMs / 1000).toFixed(1)} s` : 'not all Running'}`);

    const verified = { fromApi: 0, netns: 0 };
    if (timings) {
      const expected =
        mode === 'plexus'
          ? networks.map((n, i) => ({ ifname: i === 0 ? 'eth0' : `net${i}`, net: n.net }))
          : [{ ifname: 'eth0', net: networks[0]!.net }];
      const wrong: string[] = [];
      for (const name of names) {
        // plexusd writes network-status in the background: give it a moment after Running.
        for (let attempt = 0; ; attempt++) {
          const pod = await node.pod('default', name);
          let problem: string | undefined;
          if (mode === 'plexus') {
            const text = pod.metadata.annotations?.[STATUS_ANNOTATION];
            const status = text ? (JSON.parse(text) as { interface?: string; ips?: string[] }[]) : [];
            const got = expected.map((e) =>
              status.find((s) => s.interface === e.ifname && (s.ips ?? []).some((ip) => ip.startsWith(`${e.net}.`))),
            );
            if (got.some((g) => g === undefined)) problem = `${name}: network-status ${text ?? '(none)'}`;
          } else if (!(pod.status?.podIP ?? '').startsWith(`${expected[0]!.net}.`)) {
            problem = `${name}: pod IP ${pod.status?.podIP ?? '(none)'}`;
          }
          if (!problem) {
            verified.fromApi++;
            break;
          }
          if (attempt >= 100) {
            wrong.push(problem);
            break;
          }
          await new Promise((r) => setTimeout(r, 100));
        }
      }
      const sample = [names[0]!, names[Math.floor(names.length / 2)]!, names[names.length - 1]!].slice(
        0,
        options.netnsChecks,
      );
      for (const name of [...new Set(sample)]) {
        const addresses = netnsAddresses(await node.podNetns('default', name));
        const missing = expected.filter((e) => !(addresses.get(e.ifname) ?? '').startsWith(`${e.net}.`));
        if (missing.length)
          wrong.push(
            `${name}'s netns: ${[...addresses].map(([k, v]) => `${k}=${v}`).join(' ')} (expected ${expected.map((e) => `${e.ifname} in ${e.net}.0/24`).join(', ')})`,
          );
        else verified.netns++;
      }
      failureMessages.push(...wrong);
      failed += wrong.length;
    }
    if (sampler) clearInterval(sampler);
    const peak = state.daemon ? kib(state.daemon.pid!, 'VmHWM') : undefined;

    const deleteMs = await node.deleteAllPods(300000);
    log(`${mode}: pods deleted and their sandboxes stopped in ${(deleteMs / 1000).toFixed(1)} s`);
    const leaks = [
      ...networks.flatMap((n) => linksOfBridge(n.bridge, node.netns).map((l) => `port ${n.bridge}:${l}`)),
      ...(mode === 'bridge'
        ? await hostLocalLeftovers(join(node.dir, 'cni-data'), 'podnet')
        : await plexusLeftovers(join(root, 'state'))),
    ];
    const per = timings?.perPodMs ?? [];
    const seconds = (ms: number): number => round(ms / 1000, 2);
    report = {
      mode,
      pods: options.pods,
      allRunningSeconds: timings ? seconds(timings.totalMs) : NaN,
      createSeconds: timings ? seconds(timings.createMs) : NaN,
      firstRunningSeconds: timings ? seconds(timings.firstRunningMs) : NaN,
      p50Seconds: timings ? seconds(timings.p50Ms) : NaN,
      p95Seconds: timings ? seconds(timings.p95Ms) : NaN,
      maxSeconds: per.length ? seconds(Math.max(...per)) : NaN,
      failures: failed + (timings?.sandboxFailures ?? 0),
      failureMessages: failureMessages.slice(0, 10),
      deleteSeconds: seconds(deleteMs),
      verified,
      ...(mode === 'plexus'
        ? {
            plexusd: {
              peakRssMiB: round((peak ?? NaN) / 1024, 1),
              sampledPeakRssMiB: round(rssPeakSampled / 1024, 1),
              startRssMiB: round((rssStart ?? NaN) / 1024, 1),
              peakInFlight: calls.inFlight,
              peakQueued: calls.queued,
            },
          }
        : {}),
      leaks,
      problems: state.problems,
      nodeStartSeconds: round(nodeStartSeconds, 1),
    };
  } finally {
    // Into the same array the report holds: what the node's stop() found, and any step that threw.
    state.problems.push(...(await teardown.run()));
  }
  return report;
}

export const summaryLine = (r: KubeletBurstReport): string =>
  `${r.mode}: ${r.pods} pods all Running in ${r.allRunningSeconds} s (first after ${r.firstRunningSeconds} s; per pod p50 ${r.p50Seconds} s, p95 ${r.p95Seconds} s), ` +
  `${r.failures} failures, deleted in ${r.deleteSeconds} s` +
  (r.plexusd ? `, plexusd peak RSS ${r.plexusd.peakRssMiB} MiB` : '') +
  (r.leaks.length || r.problems.length ? `, LEFT: ${[...r.leaks, ...r.problems].join('; ')}` : '');
