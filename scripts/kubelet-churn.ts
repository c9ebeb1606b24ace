/**
 * Pod churn through a real kubelet, as users see it (issue 24, "Through a real kubelet"): pods created and deleted in
 * waves, timed from each pod's DELETE to the pod object gone from the API, to its sandbox stopped (CRI NOTREADY: its
 * pause container stopped; containerd 1.6 runs the CNI DEL right after) and to its sandbox removed from CRI. Mode `bridge`: the node's plain bridge network (reference
 * bridge + host-local), pods with no secondary network. Mode `plexus`: plexus-cni as the node's only plugin, the same
 * default network and two secondary ones per pod (three native bridges). Mode `multus`: the real Multus v4.3.0 thin
 * plugin (../shared/multus or $PLEXUS_MULTUS_BIN) with the same three networks, each the reference bridge plugin with
 * host-local, as NADs Multus reads from the API. Each mode gets a fresh node: a test cluster of one node
 * (test/support/cluster/single-node.ts) in its own network and mount namespaces, where the bridges, the pods' host
 * ends, plexusd and Multus's delegates live; the control plane runs on the host.
 *
 *   npm run build && flock /tmp/plexus-heavy.lock node dist/scripts/kubelet-churn.js [--pods 100] [--wave 20]
 *        [--mode bridge,plexus (any of bridge, plexus, multus, in the order to run)] [--dwell S] [--json FILE]
 *   (npm run bench:churn: both, bridge first)
 *
 * --dwell S keeps each wave Running S seconds before its pods are deleted (default 0: deleted as soon as all run).
 *
 * For Plexus it also reads plexusd's histogram of its CNI DELs (as the runtime waited for them) from its /metrics.
 *
 * The pair it runs on is test/support's ($PLEXUS_STACK: 1.36 + containerd 2 by default, 1.35 + containerd 1.6;
 * PLEXUS_K8S_BIN / PLEXUS_CONTAINERD override a half), printed with the table as the binaries report it, beside the
 * reference plugins' version and the load average at the start and the end.
 *
 * Needs what scripts/kubelet-burst.ts needs (root, ../shared/k8s, Debian's etcd, containerd, runc, CNI plugins,
 * nsenter, unshare, busybox).
 * Exits 1 when a pod failed or something was left behind.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import type { ChildProcess } from 'node:child_process';
import { SingleNode, singleNodeMissing } from '../test/support/cluster/single-node';
import { multusMissing, multusPluginDir } from '../test/support/multus';
import { referencePlugins } from '../test/support/plugin-dir';
import { listMultusCaches } from '../src/adopt/multus-cache';
import { type Network, bridgeConfig, nodeConflist, startPlexusd, stopPlexusd } from './lib/bench/kubelet-burst';
import { type CallDurations, callDurations, scrapeMetrics } from './lib/bench/cni-durations';
import { freeTenNet, linksOfBridge, loadAverage, machine, uniquePrefix } from './lib/host';
import { hostLocalLeftovers, plexusLeftovers } from './lib/plexusd';
import { type Summary, fmt, round, summarize, table } from './lib/stats';
import { Teardown } from './lib/teardown';
import { pairTable, runPair } from './lib/pair';

const MODES = ['bridge', 'plexus', 'multus'] as const;
type Mode = (typeof MODES)[number];

interface PodClock {
  deletedAt: number;
  goneAt?: number;
  stoppedAt?: number;
  removedAt?: number;
}

export interface ChurnReport {
  readonly mode: Mode;
  readonly pods: number;
  readonly wave: number;
  /** Per pod, create request to Running (the ADD side, for reference). */
  readonly running: Summary;
  readonly podGone: Summary;
  readonly sandboxStopped: Summary;
  readonly sandboxRemoved: Summary;
  /** Sandboxes not removed by the kubelet within the wait after the last wave. */
  readonly notRemoved: number;
  /** Plexus: its DELs as the runtime waited for them (plexusd's own histogram). */
  readonly dels?: CallDurations;
  readonly failures: readonly string[];
  readonly leaks: readonly string[];
  readonly problems: readonly string[];
}

const NETWORKS_ANNOTATION = 'k8s.v1.cni.cncf.io/networks';
/** containerd reloads its CNI config on its own schedule after a file changes. */
const CONFIG_RELOAD_MS = 2000;

/**
 * Multus thin as its docs write it, with the cluster network in a single-plugin .conf file: Multus v4.3.0 runs the DEL
 * of a .conflist cluster network with a copy of its config that has lost every plugin-specific field (host-local's
 * ranges among them: "no IP ranges specified"), which its upstream fixed after that release (multus-cni PR 1521).
 */
function multusConf(root: string, binDir: string, dataDir: string, podnet: Network, kubeconfig: string): string {
  const clusterNetwork = join(root, 'podnet.conf');
  writeFileSync(clusterNetwork, JSON.stringify(bridgeConfig(podnet, dataDir)));
  return JSON.stringify({
    cniVersion: '1.0.0',
    name: 'multus-cni-network',
    type: 'multus',
    kubeconfig,
    cniDir: join(root, 'multus-cache'),
    binDir,
    clusterNetwork,
    logFile: join(root, 'multus.log'),
    logLevel: 'error',
    capabilities: { 'io.kubernetes.cri.pod-annotations': true },
  });
}

const POLL_MS = 100;
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Polls the API and CRI until every pod of `clocks` is gone and its sandbox stopped (and, with `removed`, removed). */
async function follow(
  node: SingleNode,
  clocks: Map<string, PodClock>,
  removed: boolean,
  timeoutMs: number,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const list = await node.call('GET', '/api/v1/namespaces/default/pods');
    const now = performance.now();
    const present = new Set(
      ((list.body as { items?: { metadata: { name: string } }[] }).items ?? []).map((p) => p.metadata.name),
    );
    const sandboxes = await node.sandboxes();
    const at = performance.now();
    for (const [name, c] of clocks) {
      if (!present.has(name)) c.goneAt ??= now;
      const mine = sandboxes.filter((s) => s.namespace === 'default' && s.name === name);
      if (mine.every((s) => !s.ready)) c.stoppedAt ??= at;
      if (mine.length === 0) c.removedAt ??= at;
    }
    const done = [...clocks.values()].every(
      (c) => c.goneAt !== undefined && c.stoppedAt !== undefined && (!removed || c.removedAt !== undefined),
    );
    if (done || Date.now() > deadline) return;
    await sleep(POLL_MS);
  }
}

interface ChurnOptions {
  readonly pods: number;
  readonly wave: number;
  readonly removeWaitMs: number;
  /** How long a wave stays Running before its pods are deleted. */
  readonly dwellMs: number;
  readonly log: (line: string) => void;
}

async function runChurn(mode: Mode, options: ChurnOptions): Promise<ChurnReport> {
  const { log } = options;
  const teardown = new Teardown();
  const prefix = uniquePrefix('kc');
  const second = freeTenNet(100, 149); // the cluster's uplinks take 10.150-189
  const networks: Network[] = ['podnet', 'sec1', 'sec2'].map((name, i) => ({
    name,
    bridge: `${prefix}b${i}`,
    net: `10.${second}.${i}`,
  }));
  const root = mkdtempSync(join(tmpdir(), `plexus-${prefix}-`));
  const state: { node?: SingleNode; daemon?: ChildProcess; metrics?: string; problems: string[] } = {
    problems: [],
  };
  teardown.add('tear the node down', async () => {
    const daemon = state.daemon;
    const stopDaemon = async (): Promise<void> => {
      if (daemon) await stopPlexusd(daemon);
    };
    if (state.node) state.problems.push(...(await state.node.stop({ runtimeStopped: stopDaemon })));
    await stopDaemon();
    rmSync(root, { recursive: true, force: true });
  });
  try {
    const socket = join(root, 'plexus.sock');
    const binDir = join(root, 'bin');
    // Multus starts from the node's plain bridge network; its own config goes in front of it once the API is up.
    const conflist = nodeConflist(mode === 'multus' ? 'bridge' : mode, networks[0]!, socket, binDir);
    if (mode === 'multus') multusPluginDir(binDir, referencePlugins());
    const node = (state.node = await SingleNode.start({
      cniConfList: conflist,
      cniBinDir: mode === 'bridge' ? referencePlugins() : binDir,
      prefix,
    }));
    const dataDir = join(node.dir, 'cni-data');
    // The cluster has deploy/'s CRDs (the NAD's among them) and plexusd's RBAC already.
    if (mode === 'multus') {
      for (const n of networks.slice(1)) {
        const made = await node.api.createNad('default', n.name, JSON.stringify(bridgeConfig(n, dataDir)));
        if (made.status !== 201) throw new Error(`creating NAD ${n.name}: ${made.status} ${JSON.stringify(made.body)}`);
      }
      // Multus runs in the node, where the API is the relay's address: the admin's identity, as before.
      const kubeconfig = node.nodeKubeconfig('admin', ['system:masters']);
      const conf = multusConf(root, binDir, dataDir, networks[0]!, kubeconfig);
      writeFileSync(join(node.cniConfDir, '00-multus.conf'), conf, { mode: 0o600 });
      await sleep(CONFIG_RELOAD_MS);
    }
    if (mode === 'plexus') {
      for (const n of networks) {
        const made = await node.api.createNad('default', n.name, JSON.stringify(bridgeConfig(n)));
        if (made.status !== 201) throw new Error(`creating NAD ${n.name}: ${made.status} ${JSON.stringify(made.body)}`);
      }
      // plexusd's loopback is the node's: its metrics listen on the node's uplink address, which the host reaches.
      const metrics = `${node.node.address}:${20000 + Math.floor(Math.random() * 20000)}`;
      state.metrics = metrics;
      const extra = ['--metrics-address', metrics];
      state.daemon = await startPlexusd({ root, socket, binDir, node, extra });
    }
    log(`${mode}: node Ready; ${options.pods} pods in waves of ${options.wave}`);
    const running: number[] = [];
    const clocks = new Map<string, PodClock>();
    const failures: string[] = [];
    for (let w = 0; w * options.wave < options.pods; w++) {
      const n = Math.min(options.wave, options.pods - w * options.wave);
      const names = await node.createPods(n, {
        namePrefix: `churn-w${w}-`,
        concurrency: n,
        ...(mode !== 'bridge' ? { annotations: { [NETWORKS_ANNOTATION]: 'sec1,sec2' } } : {}),
      });
      const timings = await node.waitAllRunning(names, 300000);
      running.push(...timings.perPodMs);
      failures.push(...timings.failureMessages);
      if (options.dwellMs) await sleep(options.dwellMs);
      const wave = new Map<string, PodClock>();
      await Promise.all(
        names.map(async (name) => {
          const c: PodClock = { deletedAt: performance.now() };
          wave.set(name, c);
          clocks.set(name, c);
          const r = await node.call('DELETE', `/api/v1/namespaces/default/pods/${name}`);
          if (r.status !== 200) failures.push(`DELETE ${name}: ${r.status}`);
        }),
      );
      await follow(node, wave, false, 120000);
      const stuck = [...wave]
        .filter(([, c]) => c.goneAt === undefined || c.stoppedAt === undefined)
        .map(([name]) => name);
      if (stuck.length)
        failures.push(`wave ${w}: ${stuck.length} pods not gone or their sandboxes not stopped after 120 s`);
      log(`${mode}: wave ${w}: ${n} pods Running and deleted`);
    }
    // The kubelet removes stopped sandboxes of deleted pods on its own schedule: give it a while.
    await follow(node, clocks, true, options.removeWaitMs);
    const ms = (pick: (c: PodClock) => number | undefined): number[] =>
      [...clocks.values()].flatMap((c) => (pick(c) !== undefined ? [pick(c)! - c.deletedAt] : []));
    const leaks = [
      ...networks.flatMap((n) => linksOfBridge(n.bridge, node.netns).map((l) => `port ${n.bridge}:${l}`)),
      ...(mode === 'plexus'
        ? await plexusLeftovers(join(root, 'state'))
        : (
            await Promise.all(
              (mode === 'multus' ? networks : networks.slice(0, 1)).map((n) => hostLocalLeftovers(dataDir, n.name)),
            )
          ).flat()),
      // Sandboxes Multus still has cached delegates for (it removes each after that sandbox's DEL).
      ...(mode === 'multus' ? listMultusCaches(join(root, 'multus-cache')).map((id) => `multus cache ${id}`) : []),
    ];
    const dels = state.metrics ? callDurations(await scrapeMetrics(state.metrics), 'DEL') : undefined;
    return {
      mode,
      pods: options.pods,
      wave: options.wave,
      running: summarize(running),
      podGone: summarize(ms((c) => c.goneAt)),
      sandboxStopped: summarize(ms((c) => c.stoppedAt)),
      sandboxRemoved: summarize(ms((c) => c.removedAt)),
      notRemoved: [...clocks.values()].filter((c) => c.removedAt === undefined).length,
      ...(dels ? { dels } : {}),
      failures: failures.slice(0, 10),
      leaks,
      problems: state.problems,
    };
  } finally {
    state.problems.push(...(await teardown.run()));
  }
}

function render(reports: readonly ChurnReport[]): string {
  const cell = (s: Summary): string[] => [fmt(s.median / 1000, 2), fmt(s.p90 / 1000, 2)];
  const rows = reports.map((r) => [
    r.mode,
    String(r.pods),
    ...cell(r.podGone),
    ...cell(r.sandboxStopped),
    ...cell(r.sandboxRemoved),
    String(r.notRemoved),
    ...cell(r.running),
    String(r.failures.length),
    String(r.leaks.length),
  ]);
  const b = reports.find((r) => r.mode === 'bridge');
  const x = (a: number, c: number): string => `${fmt(a / c, 2)}x`;
  for (const p of reports.filter((r) => r.mode !== 'bridge')) {
    if (!b) break;
    rows.push([
      `${p.mode}/bridge`,
      '',
      x(p.podGone.median, b.podGone.median),
      x(p.podGone.p90, b.podGone.p90),
      x(p.sandboxStopped.median, b.sandboxStopped.median),
      x(p.sandboxStopped.p90, b.sandboxStopped.p90),
      x(p.sandboxRemoved.median, b.sandboxRemoved.median),
      x(p.sandboxRemoved.p90, b.sandboxRemoved.p90),
      '',
      x(p.running.median, b.running.median),
      x(p.running.p90, b.running.p90),
      '',
      '',
    ]);
  }
  return table(
    [
      'network',
      'pods',
      'gone p50 s',
      'gone p90 s',
      'stopped p50 s',
      'stopped p90 s',
      'removed p50 s',
      'removed p90 s',
      'not removed',
      'Running p50 s',
      'Running p90 s',
      'failures',
      'leaks',
    ],
    rows,
  );
}

async function main(): Promise<number> {
  const { values } = parseArgs({
    options: {
      pods: { type: 'string' },
      wave: { type: 'string' },
      mode: { type: 'string' },
      'remove-wait': { type: 'string' },
      dwell: { type: 'string' },
      json: { type: 'string' },
    },
  });
  const positive = (flag: string, v: string | undefined, dflt: number): number => {
    const n = v === undefined ? dflt : Number(v);
    if (!Number.isInteger(n) || n < 1) throw new Error(`--${flag} needs a positive integer, got ${v}`);
    return n;
  };
  // In the order given (e.g. plexus,bridge), so a second run can swap which node meets the machine first.
  const modes = (values.mode ?? 'bridge,plexus').split(',') as Mode[];
  if (modes.some((m) => !MODES.includes(m)))
    throw new Error(
      `--mode is any of ${MODES.join(', ')}, in the order to run them (bridge,plexus), not ${values.mode}`,
    );
  const dwell = Number(values.dwell ?? '0');
  if (!Number.isFinite(dwell) || dwell < 0 || dwell > 600)
    throw new Error(`--dwell needs seconds from 0 to 600, got ${values.dwell}`);
  const missing = singleNodeMissing() ?? (modes.includes('multus') ? multusMissing() : undefined);
  if (missing) {
    console.error(`kubelet churn: cannot run here: ${missing}`);
    return 2;
  }
  const options = {
    pods: positive('pods', values.pods, 100),
    wave: positive('wave', values.wave, 20),
    removeWaitMs: positive('remove-wait', values['remove-wait'], 90) * 1000,
    dwellMs: dwell * 1000,
    log: (line: string) => console.log(`  ${line}`),
  };
  const m = machine();
  const pair = runPair();
  const load = { start: loadAverage(), end: NaN };
  console.log(
    `kubelet churn: ${m.cpus} CPUs (${m.cpuModel}), kernel ${m.kernel}, node ${m.node}, load average ${load.start}`,
  );
  console.log(pairTable(pair));
  const reports: ChurnReport[] = [];
  for (const mode of modes) reports.push(await runChurn(mode, options));
  load.end = loadAverage();
  console.log(
    `\ntimes from each pod's DELETE (gone: the pod object; stopped: its sandbox NOTREADY, pause container stopped, CNI DEL next; removed: gone from CRI)\n`,
  );
  console.log(`${pairTable(pair)}\n`);
  console.log(render(reports));
  const b = reports.find((r) => r.mode === 'bridge');
  if (options.dwellMs) console.log(`\neach wave ran ${dwell} s before its pods were deleted`);
  for (const p of reports.filter((r) => r.mode !== 'bridge')) {
    if (b)
      console.log(
        `${p.mode}/bridge, delete to pod gone (median): ${round(p.podGone.median / b.podGone.median)}x${p.mode === 'plexus' ? ' (goal <= 1.05x)' : ''}`,
      );
  }
  for (const r of reports) {
    const d = r.dels;
    if (d)
      console.log(`${r.mode}: ${d.calls} CNI DELs, p50 <= ${d.p50AtMost * 1000} ms, p90 <= ${d.p90AtMost * 1000} ms`);
  }
  console.log(`load average (1 min): ${load.start} at the start, ${load.end} at the end`);
  for (const r of reports) for (const f of [...r.failures, ...r.leaks, ...r.problems]) console.log(`  ${r.mode}: ${f}`);
  if (values.json)
    writeFileSync(
      values.json,
      `${JSON.stringify({ machine: m, pair, load, dwellSeconds: dwell, reports }, null, 2)}\n`,
    );
  return reports.every((r) => r.failures.length === 0 && r.leaks.length === 0 && r.problems.length === 0) ? 0 : 1;
}

main().then(
  (code) => process.exit(code),
  (e: unknown) => {
    console.error(e instanceof Error ? (e.stack ?? e.message) : e);
    process.exit(1);
  },
);
