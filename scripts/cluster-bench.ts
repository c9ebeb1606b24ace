/**
 * Issue 37's benchmarks on the three-node test cluster (test/support/cluster/, docs/testing.md): each node its own
 * network and mount namespace with its own containerd 2, kubelet and plexusd, one control plane on the host.
 *
 *   npm run build && flock /tmp/plexus-heavy.lock node dist/scripts/cluster-bench.js [--pods-per-node 20]
 *        [--rounds 1] [--lease-seconds 10] [--grace-seconds 20] [--no-reuse] [--json FILE]
 *   (npm run bench:cluster; npm run bench:burst is the bursts alone)
 *
 * 1. The burst: N pods bound to each node, all created at once, with the nodes' own network only (plain: the
 *    reference bridge + host-local, Plexus uninstalled) and with Plexus installed, each pod on its default network and
 *    three more (a bridge with host-local, macvlan on uplink0 and a second bridge, both with cluster IPAM `plexus`).
 *    Per pod, create to Running p50 / p99, and first create to all Running; the ratio plexus / plain (goal <= 1.05x).
 *    Each round runs both, the order swapped every other round.
 * 2. Cluster IPAM during each Plexus burst: addresses it gave per second across the nodes, and API writes per
 *    address (the API server's apiserver_request_total for ipam.plexus.io, read before and after).
 * 3. A node's death to its addresses reused (cluster-reuse.ts), with the Lease and grace given here.
 *
 * The load average is printed with each figure. Exits 1 when a pod failed, an address was given twice, a reuse came
 * too early, or the cluster left something behind.
 */
import { writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { clusterMissing, TestCluster } from '../test/support/cluster/cluster';
import { macvlanPoolNad } from '../test/support/cluster/node-death';
import { ensureNamespace } from '../test/support/cluster/pods';
import { type BurstReport, burstRatio, type ClusterBurstMode, runClusterBurst } from './lib/bench/cluster-burst';
import { type ReuseReport, timeNodeDeathReuse } from './lib/bench/cluster-reuse';
import { loadAverage, machine } from './lib/host';
import { pairTable, runPair } from './lib/pair';
import { fmt, table } from './lib/stats';

const NS = 'bench';
const USAGE = `usage: node dist/scripts/cluster-bench.js [--pods-per-node N] [--rounds R] [--lease-seconds S]
        [--grace-seconds S] [--no-reuse] [--json FILE]`;

/** The secondary networks of the Plexus burst: one object each for the whole cluster. */
function networkNads(): { nads: Record<string, string>; clusterNetworks: string[] } {
  const o = 100 + Math.floor(Math.random() * 40);
  const t = 16 * Math.floor(Math.random() * 15);
  const bridge = (name: string, bridgeName: string, ipam: Record<string, unknown>): string =>
    JSON.stringify({ cniVersion: '1.0.0', name, type: 'bridge', bridge: bridgeName, isGateway: false, ipam });
  return {
    nads: {
      // Each node's own bridge: host-local's addresses repeat across nodes, as they may on separate segments.
      'net-bridge': bridge('net-bridge', 'benchbr0', {
        type: 'host-local',
        ranges: [[{ subnet: `10.${o}.${t}.0/24` }]],
      }),
      'net-macvlan': macvlanPoolNad('net-macvlan', `10.${o}.${t + 4}.0/22`),
      'net-pool': bridge('net-pool', 'benchbr1', { type: 'plexus', ranges: [[{ subnet: `10.${o}.${t + 8}.0/22` }]] }),
    },
    clusterNetworks: ['net-macvlan', 'net-pool'],
  };
}

const positive = (flag: string, v: string | undefined, dflt: number): number => {
  const n = v === undefined ? dflt : Number(v);
  if (!Number.isInteger(n) || n < 1) throw new Error(`--${flag} needs a positive integer, got ${v}\n${USAGE}`);
  return n;
};

/**
 * Plexus on every node (as the DaemonSet would put it), or every node back on its own network only; then waits
 * until each node's runtime says its network is ready and its kubelet has reported Ready after that. Between
 * plexusd's stop and the removal of its conflist, containerd 2's STATUS call to the 1.1.0 conflist fails and the
 * node may turn NotReady; a burst started then waits out the kubelet's retries (one plain burst took 65 s so).
 */
async function switchTo(
  c: TestCluster,
  mode: ClusterBurstMode,
  installed: boolean,
  log: (line: string) => void,
): Promise<boolean> {
  if ((mode === 'plexus') === installed) return installed;
  if (mode === 'plexus') await Promise.all(c.nodes.map((n) => n.startPlexus()));
  else for (const n of c.nodes) await n.uninstallPlexus();
  const waits = await Promise.all(
    c.nodes.map(async (n) => {
      const network = await n.waitNetworkReady();
      const reported = await c.waitReadyReportedSince(n.name, new Date());
      const why = network.reasons.length ? ` (${network.reasons.join('; then ')})` : '';
      return `${n.name} network ${(network.waitedMs / 1000).toFixed(1)} s${why}, Ready reported ${(reported / 1000).toFixed(1)} s`;
    }),
  );
  log(`${mode}: ${waits.join('; ')}`);
  return mode === 'plexus';
}

function render(bursts: readonly BurstReport[], reuse: ReuseReport | undefined): string {
  const burstRows = bursts.map((b) => [
    `${b.mode} (round ${b.round})`,
    String(b.pods),
    fmt(b.p50Seconds, 2),
    fmt(b.p99Seconds, 2),
    fmt(b.allRunningSeconds, 2),
    String(b.pods - b.running),
    String(b.sandboxFailures),
    `${b.load.start} / ${b.load.end}`,
  ]);
  for (const p of bursts.filter((b) => b.mode === 'plexus')) {
    const plain = bursts.find((b) => b.mode === 'plain' && b.round === p.round);
    if (!plain) continue;
    const r = burstRatio(p, plain);
    burstRows.push([`plexus / plain (round ${p.round})`, '', `${r.p50}x`, `${r.p99}x`, `${r.allRunning}x`, '', '', '']);
  }
  const header = ['burst', 'pods', 'p50 s', 'p99 s', 'all Running s', 'not Running', 'sandbox retries', 'load'];
  const ipamRows = bursts
    .filter((b) => b.mode === 'plexus')
    .map((b) => [
      String(b.round),
      String(b.clusterAddresses),
      String(b.duplicateAddresses),
      fmt(b.addressesPerSecond, 1),
      String(b.ipamWrites),
      fmt(b.ipamWritesPerAddress, 3),
      `${fmt(b.allWritesPerPod, 1)} (plain ${fmt(bursts.find((x) => x.mode === 'plain' && x.round === b.round)?.allWritesPerPod, 1)})`,
      `${b.load.start} / ${b.load.end}`,
    ]);
  const ipamHeader = [
    'round',
    'addresses',
    'twice',
    'addresses/s',
    'IPAM writes',
    'per address',
    'all writes/pod',
    'load',
  ];
  const parts = [table(header, burstRows), table(ipamHeader, ipamRows)];
  if (reuse)
    parts.push(
      table(
        ['Lease s', 'grace s', 'replicas', 'earliest allowed s', 'first reused s', 'all reused s', 'too early', 'load'],
        [
          [
            String(reuse.leaseSeconds),
            String(reuse.graceSeconds),
            String(reuse.replicas),
            fmt(reuse.earliestAllowedSeconds, 1),
            fmt(reuse.firstReusedSeconds, 1),
            fmt(reuse.allReusedSeconds, 1),
            String(reuse.tooEarly),
            `${reuse.load.start} / ${reuse.load.end}`,
          ],
        ],
      ),
    );
  return parts.join('\n\n');
}

async function main(): Promise<number> {
  const { values } = parseArgs({
    options: {
      'pods-per-node': { type: 'string' },
      rounds: { type: 'string' },
      'lease-seconds': { type: 'string' },
      'grace-seconds': { type: 'string' },
      'no-reuse': { type: 'boolean' },
      json: { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (values.help) {
    console.log(USAGE);
    return 0;
  }
  const podsPerNode = positive('pods-per-node', values['pods-per-node'], 20);
  const rounds = positive('rounds', values.rounds, 1);
  const timing = {
    leaseSeconds: positive('lease-seconds', values['lease-seconds'], 10),
    graceSeconds: positive('grace-seconds', values['grace-seconds'], 20),
  };
  const missing = clusterMissing();
  if (missing) {
    console.error(`cluster bench: cannot run here: ${missing}`);
    return 2;
  }
  process.env.PLEXUS_CONTAINERD ||= '2'; // the cluster's nodes run containerd 2: the pair printed says so
  const m = machine();
  const log = (line: string): void => console.log(`  ${line}`);
  console.log(`cluster bench: ${m.cpus} CPUs (${m.cpuModel}), kernel ${m.kernel}, load average ${loadAverage()}`);
  console.log(pairTable(runPair()));
  const cluster = await TestCluster.start({
    plexusAtStart: false,
    timing: {
      nodeLeaseSeconds: timing.leaseSeconds,
      ipamNodeGraceSeconds: timing.graceSeconds,
      ipamReconcileSeconds: 1,
      orphanSweepSeconds: 5,
    },
  });
  const bursts: BurstReport[] = [];
  let reuse: ReuseReport | undefined;
  let problems: string[];
  try {
    log(`${cluster.nodes.length} nodes Ready in ${(cluster.nodesStartMs / 1000).toFixed(1)} s`);
    await ensureNamespace(cluster.api, NS);
    const { nads, clusterNetworks } = networkNads();
    for (const [name, config] of Object.entries(nads)) {
      const made = await cluster.api.createNad(NS, name, config);
      if (made.status !== 201) throw new Error(`NAD ${name}: ${made.status} ${JSON.stringify(made.body)}`);
    }
    let installed = false;
    for (let round = 1; round <= rounds; round++) {
      const order: ClusterBurstMode[] = round % 2 === 1 ? ['plain', 'plexus'] : ['plexus', 'plain'];
      for (const mode of order) {
        installed = await switchTo(cluster, mode, installed, log);
        const networks = Object.keys(nads);
        const plan = { mode, round, namespace: NS, podsPerNode, networks, clusterNetworks, timeoutMs: 600000, log };
        bursts.push(await runClusterBurst(cluster, plan));
      }
    }
    if (!values['no-reuse']) {
      installed = await switchTo(cluster, 'plexus', installed, log);
      reuse = await timeNodeDeathReuse(cluster, { ...timing, namespace: NS, log });
    }
  } finally {
    problems = await cluster.stop();
  }
  console.log(`\n${render(bursts, reuse)}\n`);
  const failed = [
    ...bursts
      .filter((b) => b.running < b.pods)
      .map((b) => `${b.mode} round ${b.round}: ${b.pods - b.running} not Running`),
    ...bursts.filter((b) => b.duplicateAddresses > 0).map((b) => `round ${b.round}: ${b.duplicateAddresses} twice`),
    ...(reuse && reuse.tooEarly > 0 ? [`${reuse.tooEarly} addresses of the dead node reused too early`] : []),
    ...problems,
  ];
  for (const b of bursts)
    console.log(`API writes, ${b.mode} round ${b.round}: ${b.writes.map(([r, n]) => `${r} ${n}`).join(', ')}`);
  for (const b of bursts)
    for (const a of b.adds)
      console.log(
        `plexusd's ADDs on ${a.node} by round ${b.round}: ${a.calls}, p50 <= ${a.p50AtMost} s, p90 <= ${a.p90AtMost} s`,
      );
  for (const f of failed) console.log(`  problem: ${f}`);
  if (values.json)
    writeFileSync(
      values.json,
      `${JSON.stringify({ machine: m, podsPerNode, timing, bursts, reuse, problems }, null, 2)}\n`,
    );
  return failed.length ? 1 : 0;
}

main().then(
  (code) => process.exit(code),
  (e: unknown) => {
    console.error(e instanceof Error ? (e.stack ?? e.message) : e);
    process.exit(1);
  },
);
