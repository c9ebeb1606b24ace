/**
 * Pod-to-Running with one host device as a secondary network, through DRA (a ResourceClaimTemplate naming the NAD)
 * against the device-plugin path (resources.limits + the networks annotation + a NAD naming the resource), on one real
 * node (test/support/cluster/single-node.ts: a test cluster of one node, its kube-apiserver, scheduler and
 * controller-manager on the host, its kubelet and containerd in the node's own network and mount namespaces,
 * plexus-cni the node's CNI), side by side in one run: both pools are offered by one plexusd with --dra on, running
 * inside the node, and every pod of both batches goes through the scheduler. Then the same for one memif device
 * (socket directory and secret, no network): by the device plugin, or by a claim whose CDI spec hands the container
 * the same env and mount (containerd 2; containerd 1.6 has no CDI, and its claimed pods run without them, which the
 * table shows). The paths alternate which goes first from round to round. Then plexusd's peak RSS (VmHWM). veth pairs
 * the script creates in the node's network namespace stand in for NICs (they go with it). The pair it ran on
 * ($PLEXUS_STACK: 1.36 + containerd 2 by default, 1.35 + containerd 1.6; PLEXUS_K8S_BIN / PLEXUS_CONTAINERD override a
 * half) is read from the binaries and printed with the table, with the load average at the start and the end.
 *
 *   [PLEXUS_STACK=1.35] npm run bench:dra -- [--pods 30] [--rounds 1] [--json FILE]
 *
 * Needs root and what test/k8s needs (../shared/k8s, etcd, containerd, runc, CNI plugins, nsenter, unshare, busybox);
 * run it under `flock /tmp/plexus-heavy.lock`. Exits 1 when a pod did not run with its device or something was left
 * behind.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { DaemonFixture } from '../test/support/daemon';
import {
  claimingPod,
  create,
  devicePluginPod,
  draSettings,
  draNodeMissing,
  draTooOld,
  hostDeviceTemplate,
  installDra,
} from '../test/support/dra-node';
import { SingleNode } from '../test/support/cluster/single-node';
import { percentile } from '../test/support/cluster/node-pods';
import { plexusConflist } from '../test/support/kube-node';
import { uniquePrefix } from '../test/support/netns';
import { plexusPluginDir } from '../test/support/plugin-dir';
import { containerdMajor } from '../test/support/containerd';
import {
  DP_MEMIF,
  MEMIF_TEMPLATE,
  memifDevicePluginPod,
  memifResources,
  memifTemplate,
  withMemif,
} from './lib/bench/dra-memif';
import { loadAverage, run } from './lib/host';
import { type RunPair, describePair, pairTable, runPair } from './lib/pair';

const USAGE = 'usage: node dist/scripts/dra-bench.js [--pods N (default 30)] [--rounds N (default 1)] [--json FILE]';
const DRA_NIC = 'plexus.io/dranic';
const DP_NIC = 'plexus.io/dpnic';
const NS = 'default';
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

type Path = 'dra' | 'device-plugin';
type Device = 'host device' | 'memif';

interface Batch {
  readonly path: Path;
  readonly device: Device;
  readonly pods: number;
  /** Pods that got their device: net1 in the netns (host device), MEMIF_SOCKET and the mount (memif). */
  readonly equipped: number;
  readonly p50Ms: number;
  readonly p95Ms: number;
  readonly maxMs: number;
  readonly totalMs: number;
  /** Pods slower than 3x the median, each with its warning events (why its start was retried). */
  readonly slow: readonly string[];
}

/** Creates the pods, 10 requests at a time, and times each from its POST to Running (the pod list polled every 50 ms). */
async function runBatch(
  node: SingleNode,
  path: Path,
  objects: { name: string; body: unknown }[],
): Promise<Omit<Batch, 'device' | 'equipped'>> {
  const createdAt = new Map<string, number>();
  const runningAt = new Map<string, number>();
  let next = 0;
  const worker = async (): Promise<void> => {
    for (let i = next++; i < objects.length; i = next++) {
      const { name, body } = objects[i]!;
      createdAt.set(name, performance.now());
      await create(node, body);
    }
  };
  const started = performance.now();
  const creating = Promise.all(Array.from({ length: 10 }, worker));
  const deadline = Date.now() + 300_000;
  while (runningAt.size < objects.length) {
    if (Date.now() > deadline)
      throw new Error(
        `${path}: ${objects.length - runningAt.size} pods not Running after 300 s: ${await node.describePods(
          NS,
          objects
            .map((o) => o.name)
            .filter((n) => !runningAt.has(n))
            .slice(0, 3),
        )}`,
      );
    const list = await node.call('GET', `/api/v1/namespaces/${NS}/pods`);
    const now = performance.now();
    for (const pod of (list.body as { items?: { metadata: { name: string }; status?: { phase?: string } }[] }).items ??
      []) {
      if (pod.status?.phase === 'Running' && createdAt.has(pod.metadata.name) && !runningAt.has(pod.metadata.name))
        runningAt.set(pod.metadata.name, now);
    }
    await sleep(50);
  }
  await creating;
  const perPod = objects.map((o) => runningAt.get(o.name)! - createdAt.get(o.name)!);
  const median = percentile(perPod, 50);
  const slow: string[] = [];
  for (const [i, o] of objects.entries())
    if (perPod[i]! > 3 * median) slow.push(`${o.name} ${perPod[i]!.toFixed(0)} ms: ${await warnings(node, o.name)}`);
  return {
    path,
    pods: objects.length,
    p50Ms: percentile(perPod, 50),
    p95Ms: percentile(perPod, 95),
    maxMs: Math.max(...perPod),
    totalMs: performance.now() - started,
    slow,
  };
}

/** A pod's warning events (FailedPrepareDynamicResources, FailedScheduling, ...), oldest first, one line. */
async function warnings(node: SingleNode, name: string): Promise<string> {
  const selector = encodeURIComponent(`involvedObject.name=${name}`);
  const r = await node.call('GET', `/api/v1/namespaces/${NS}/events?fieldSelector=${selector}`);
  const items = (r.body as { items?: { type: string; reason: string; message: string; count?: number }[] }).items;
  const said = (items ?? []).filter((e) => e.type !== 'Normal');
  return said.length ? said.map((e) => `${e.reason} (x${e.count ?? 1}): ${e.message}`).join(' | ') : 'no warning event';
}

/** Every pod of the namespace deleted, and gone from the API. */
async function deleteAll(node: SingleNode): Promise<void> {
  await node.call('DELETE', `/api/v1/namespaces/${NS}/pods`);
  for (let i = 0; i < 1200; i++) {
    const left = ((await node.call('GET', `/api/v1/namespaces/${NS}/pods`)).body as { items?: unknown[] }).items ?? [];
    if (left.length === 0) return;
    await sleep(100);
  }
  throw new Error('pods still there after 120 s');
}

/** The number of pods whose netns has net1 (the device): every pod must have got it. */
async function withDevice(node: SingleNode, names: readonly string[]): Promise<number> {
  let n = 0;
  for (const name of names) {
    const netns = await node.podNetns(NS, name);
    if (spawnSync('nsenter', [`--net=${netns}`, 'ip', 'link', 'show', 'dev', 'net1']).status === 0) n++;
  }
  return n;
}

/** veth pairs standing in for NICs, both ends up, in the node's network namespace (they go with it). */
function makeNics(netns: string, names: readonly string[]): void {
  const lines = names.flatMap((name) => [
    `link add ${name} type veth peer name ${name}p`,
    `link set dev ${name}p up`,
    `link set dev ${name} up`,
  ]);
  const r = run('ip', ['-n', netns, '-batch', '-'], `${lines.join('\n')}\n`);
  if (r.status !== 0) throw new Error(`making the NICs in ${netns}: ${r.stderr.trim()}`);
}

const peakRssMib = (pid: number): number => {
  const kb = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1];
  return Math.round(Number(kb) / 1024);
};

async function main(): Promise<number> {
  const { values } = parseArgs({
    options: {
      pods: { type: 'string' },
      rounds: { type: 'string' },
      json: { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (values.help) {
    console.log(USAGE);
    return 0;
  }
  const pods = Number(values.pods ?? 30);
  const rounds = Number(values.rounds ?? 1);
  if (!Number.isInteger(pods) || pods < 1 || !Number.isInteger(rounds) || rounds < 1) throw new Error(USAGE);
  const missing = draNodeMissing() ?? draTooOld();
  if (missing) {
    console.error(`dra-bench: cannot run here: ${missing}`);
    return 2;
  }
  const pair = runPair();
  const load = { start: loadAverage(), end: NaN };
  console.log(`${describePair(pair)}; load average ${load.start}`);
  // containerd 1.6 ignores the CDI device IDs a claim's Prepare answers: its claimed memif pods run without them.
  const cdi = containerdMajor() >= 2;
  const prefix = uniquePrefix('drb');
  const nics = (tag: string): string[] => Array.from({ length: pods }, (_, i) => `${prefix}${tag}${i}`);
  const draNics = nics('d');
  const dpNics = nics('k');
  const all = [...draNics, ...dpNics];
  const work = mkdtempSync(join(tmpdir(), 'plexus-drb-'));
  const daemon = new DaemonFixture('podnet');
  let node: SingleNode | undefined;
  const problems: string[] = [];
  try {
    const binDir = join(work, 'bin');
    plexusPluginDir(binDir);
    writeFileSync(
      join(work, 'resources.yaml'),
      JSON.stringify({
        resources: [
          { name: DRA_NIC, kind: 'host-device', devices: draNics, offer: ['dra'] },
          { name: DP_NIC, kind: 'host-device', devices: dpNics, offer: ['device-plugin'] },
          ...memifResources(work, pods),
        ],
      }),
    );
    // The cluster has deploy/'s CRDs and plexusd's RBAC; plexusd runs in the node, as the DaemonSet's pod would.
    node = await SingleNode.start({ cniBinDir: binDir, cniConfList: plexusConflist(daemon.socket), prefix });
    daemon.launcher = node.launcher;
    makeNics(node.netns, all);
    await installDra(node);
    const subnet = `10.${100 + Math.floor(Math.random() * 50)}.${Math.floor(Math.random() * 250)}`;
    const nad = (name: string, config: unknown, annotations: Record<string, string> = {}): Promise<unknown> =>
      node!.api.createNad(NS, name, JSON.stringify(config), annotations);
    await nad('podnet', {
      cniVersion: '1.0.0',
      name: 'podnet',
      type: 'bridge',
      bridge: `${prefix}b0`,
      isGateway: true,
      ipam: { type: 'host-local', ranges: [[{ subnet: `${subnet}.0/24` }]] },
    });
    const fastConfig = (name: string): unknown => ({ cniVersion: '1.0.0', name, type: 'host-device' });
    await nad('dranet', fastConfig('dranet'));
    await nad('dpnet', fastConfig('dpnet'), { 'k8s.v1.cni.cncf.io/resourceName': DP_NIC });
    await create(
      node,
      hostDeviceTemplate(NS, 'dranic', `device.attributes["k8s.cni.cncf.io"].resourceName == "${DRA_NIC}"`, {
        network: 'dranet',
        interfaceName: 'net1',
      }),
    );
    await create(node, memifTemplate(NS));
    daemon.addSettings(draSettings(node, work, binDir));
    await daemon.start(30000);
    // Both offers ready: the device plugin's resource allocatable, the DRA pool's slice published.
    for (let i = 0; ; i++) {
      const n = (await node.call('GET', `/api/v1/nodes/${node.nodeName}`)).body as {
        status: { allocatable: Record<string, string> };
      };
      const slices = (await node.call('GET', '/apis/resource.k8s.io/v1/resourceslices')).body as { items?: unknown[] };
      const offered = [DP_NIC, DP_MEMIF].every((r) => n.status.allocatable[r] === String(pods));
      if (offered && (slices.items ?? []).length > 0) break;
      if (i > 300) throw new Error('the device plugin or the DRA pool is not ready after 30 s');
      await sleep(100);
    }
    const batches: Batch[] = [];
    for (let r = 0; r < rounds; r++) {
      for (const c of cases(r, pods)) {
        // Odd rounds run the DRA path first, so neither path always meets the node warmer.
        for (const path of r % 2 === 0 ? (['device-plugin', 'dra'] as const) : (['dra', 'device-plugin'] as const)) {
          const objects = c.objects[path];
          const batch = await runBatch(node, path, objects);
          const names = objects.map((o) => o.name);
          const equipped = c.device === 'memif' ? await withMemif(node, NS, names) : await withDevice(node, names);
          const expected = c.device === 'memif' && path === 'dra' && !cdi ? 0 : pods;
          if (equipped !== expected)
            problems.push(`${c.device} ${path} round ${r + 1}: ${equipped} of ${pods} pods got their device`);
          batches.push({ ...batch, device: c.device, equipped });
          await deleteAll(node);
        }
      }
    }
    const rss = peakRssMib(daemon.pid!);
    const claimsLeft = (() => {
      const dir = join(daemon.stateDir, 'dra', 'claims');
      return existsSync(dir) ? readdirSync(dir).filter((f) => f.endsWith('.json')).length : 0;
    })();
    if (claimsLeft) problems.push(`${claimsLeft} prepared-claim records left`);
    load.end = loadAverage();
    print(batches, { pods, rssMib: rss, pair, cdi, load });
    if (values.json)
      writeFileSync(
        values.json,
        JSON.stringify({ pair, load, pods, rounds, batches, plexusdPeakRssMib: rss, problems }, null, 2),
      );
  } catch (e) {
    problems.push((e as Error).message);
  } finally {
    const left = node ? await node.stop({ runtimeStopped: () => daemon.stop() }) : [];
    problems.push(...left);
    await daemon.stop();
    rmSync(work, { recursive: true, force: true });
  }
  for (const p of problems) console.error(`problem: ${p}`);
  return problems.length ? 1 : 0;
}

/** One round's pods of each device kind, per path. */
function cases(
  r: number,
  pods: number,
): { device: Device; objects: Record<Path, { name: string; body: unknown }[]> }[] {
  const named = (tag: string, body: (name: string) => unknown): { name: string; body: unknown }[] =>
    Array.from({ length: pods }, (_, i) => `${tag}-${r}-${i}`).map((name) => ({ name, body: body(name) }));
  return [
    {
      device: 'host device',
      objects: {
        'device-plugin': named('dp', (name) => devicePluginPod(NS, name, DP_NIC, 'dpnet')),
        dra: named('dra', (name) => claimingPod(NS, name, { template: 'dranic' })),
      },
    },
    {
      device: 'memif',
      objects: {
        'device-plugin': named('mdp', (name) => memifDevicePluginPod(NS, name)),
        dra: named('mdra', (name) => claimingPod(NS, name, { template: MEMIF_TEMPLATE })),
      },
    },
  ];
}

interface RunFacts {
  readonly pods: number;
  readonly rssMib: number;
  readonly pair: RunPair;
  /** Whether the runtime hands a container the CDI devices of its claims (containerd 2). */
  readonly cdi: boolean;
  /** The 1-minute load average at the start and at the end of the run. */
  readonly load: { readonly start: number; readonly end: number };
}

function print(batches: readonly Batch[], { pods, rssMib, pair, cdi, load }: RunFacts): void {
  const mean = (device: Device, path: Path, key: 'p50Ms' | 'p95Ms' | 'maxMs' | 'totalMs'): number => {
    const mine = batches.filter((b) => b.device === device && b.path === path);
    return mine.reduce((a, b) => a + b[key], 0) / mine.length;
  };
  const got = (device: Device, path: Path): string => {
    const mine = batches.filter((b) => b.device === device && b.path === path);
    return `${mine.reduce((a, b) => a + b.equipped, 0)}/${mine.reduce((a, b) => a + b.pods, 0)}`;
  };
  console.log(`\n${pairTable(pair)}`);
  console.log(`\n${pods} pods per path and device, created 10 at a time, each through the scheduler`);
  console.log('| device | pod created to Running | device plugin | DRA | DRA / device plugin |');
  console.log('|---|---|---|---|---|');
  for (const device of ['host device', 'memif'] as const) {
    for (const key of ['p50Ms', 'p95Ms', 'maxMs', 'totalMs'] as const) {
      const dp = mean(device, 'device-plugin', key);
      const dra = mean(device, 'dra', key);
      const label = key.replace('Ms', '').replace('total', `all ${pods}`);
      console.log(`| ${device} | ${label} | ${dp.toFixed(0)} ms | ${dra.toFixed(0)} ms | ${(dra / dp).toFixed(2)}x |`);
    }
    const what = device === 'memif' ? 'MEMIF_SOCKET and the socket mount' : 'net1';
    console.log(`| ${device} | pods with ${what} | ${got(device, 'device-plugin')} | ${got(device, 'dra')} | |`);
  }
  if (!cdi)
    console.log(
      `\nmemif through a claim: ${got('memif', 'dra')} pods with MEMIF_SOCKET, as expected here: containerd ${pair.containerd} has no CDI, so the CDI device IDs a claim's Prepare answers reach no container (containerd 2 has it)`,
    );
  console.log(`\nplexusd peak RSS (VmHWM) with --dra on: ${rssMib} MiB`);
  console.log(`load average (1 min): ${load.start} at the start, ${load.end} at the end`);
  for (const b of batches) for (const line of b.slow) console.log(`slow (${b.device}, ${b.path}): ${line}`);
}

main().then(
  (code) => process.exit(code),
  (e: unknown) => {
    console.error(e);
    process.exit(1);
  },
);
