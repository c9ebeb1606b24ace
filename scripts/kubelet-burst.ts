/**
 * A burst of pods through a real kubelet, with and without Plexus (scripts/lib/bench/kubelet-burst.ts):
 *
 *   npm run build && node dist/scripts/kubelet-burst.js [--pods 110] [--mode bridge|plexus] [--compare] [--json FILE]
 *        [--create-concurrency N] [--timeout S] [--plexusd-args="--max-concurrent 64"]
 *
 * Each mode runs on a fresh node: a test cluster of one node (test/support/cluster/single-node.ts) in its own network
 * and mount namespaces, plexusd inside it; the control plane runs on the host. The pair is test/support's
 * ($PLEXUS_STACK: 1.36 + containerd 2 by default, 1.35 + containerd 1.6; PLEXUS_K8S_BIN / PLEXUS_CONTAINERD override
 * a half). Needs root, the Kubernetes binaries of ../shared/k8s, Debian's etcd, runc and CNI plugins, nsenter, unshare
 * and busybox. Exits 1 when a pod failed or something was left behind.
 */
import { writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { k8sVersion } from '../test/support/k8s';
import { singleNodeMissing } from '../test/support/cluster/single-node';
import { type BurstMode, type KubeletBurstReport, runKubeletBurst, summaryLine } from './lib/bench/kubelet-burst';
import { machine } from './lib/host';
import { round } from './lib/stats';

const USAGE = `usage: node dist/scripts/kubelet-burst.js [options]
  --pods N                pods in the burst (default 110, the kubelet's usual maxPods)
  --mode bridge|plexus    the node's network: the reference bridge alone, or plexus-cni with 3 networks per pod (default plexus)
  --compare               bridge, then plexus, each on a fresh node, and the ratios
  --create-concurrency N  create requests in flight (default 16)
  --timeout S             seconds for all pods to be Running (default 600)
  --plexusd-args="ARGS"   more plexusd flags, space-separated (e.g. --plexusd-args="--max-concurrent 64")
  --json FILE             also write the report as JSON`;

async function main(): Promise<number> {
  const { values } = parseArgs({
    options: {
      pods: { type: 'string' },
      mode: { type: 'string' },
      compare: { type: 'boolean' },
      'create-concurrency': { type: 'string' },
      timeout: { type: 'string' },
      json: { type: 'string' },
      'plexusd-args': { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (values.help) {
    console.log(USAGE);
    return 0;
  }
  const positive = (flag: string, v: string | undefined, dflt: number): number => {
    if (v === undefined) return dflt;
    const n = Number(v);
    if (!Number.isInteger(n) || n < 1) throw new Error(`--${flag} needs a positive integer, got ${v}\n${USAGE}`);
    return n;
  };
  const mode = values.mode ?? 'plexus';
  if (mode !== 'bridge' && mode !== 'plexus') throw new Error(`--mode is bridge or plexus, not ${mode}\n${USAGE}`);
  const missing = singleNodeMissing();
  if (missing) {
    console.error(`kubelet burst: cannot run here: ${missing}`);
    return 2;
  }
  const options = {
    pods: positive('pods', values.pods, 110),
    createConcurrency: positive('create-concurrency', values['create-concurrency'], 16),
    runningTimeoutMs: positive('timeout', values.timeout, 600) * 1000,
    netnsChecks: 3,
    plexusdArgs: (values['plexusd-args'] ?? '').split(/\s+/).filter(Boolean),
    log: (line: string) => console.log(`  ${line}`),
  };
  const m = machine();
  const kubernetes = k8sVersion()?.text;
  console.log(
    `kubelet burst: ${m.cpus} CPUs (${m.cpuModel}), kernel ${m.kernel}, node ${m.node}, Kubernetes ${kubernetes}`,
  );
  const modes: BurstMode[] = values.compare ? ['bridge', 'plexus'] : [mode];
  const reports: KubeletBurstReport[] = [];
  for (const mo of modes) reports.push(await runKubeletBurst(mo, options));
  const [bridge, plexus] = [reports.find((r) => r.mode === 'bridge'), reports.find((r) => r.mode === 'plexus')];
  const ratio =
    bridge && plexus
      ? {
          allRunning: round(plexus.allRunningSeconds / bridge.allRunningSeconds),
          p50: round(plexus.p50Seconds / bridge.p50Seconds),
          p95: round(plexus.p95Seconds / bridge.p95Seconds),
        }
      : undefined;
  const out = {
    machine: m,
    kubernetes,
    command: process.argv.slice(2).join(' '),
    reports,
    ...(ratio ? { ratio } : {}),
  };
  console.log(JSON.stringify(out, null, 2));
  if (values.json) writeFileSync(values.json, `${JSON.stringify(out, null, 2)}\n`);
  for (const r of reports) console.log(summaryLine(r));
  if (ratio)
    console.log(`plexus/bridge: all Running ${ratio.allRunning}x, per-pod p50 ${ratio.p50}x, p95 ${ratio.p95}x`);
  return reports.every((r) => r.failures === 0 && r.leaks.length === 0 && r.problems.length === 0) ? 0 : 1;
}

main().then(
  (code) => process.exit(code),
  (e: unknown) => {
    console.error(e instanceof Error ? e.message : e);
    process.exit(1);
  },
);
