/**
 * A runtime that gives up on an ADD kills plexus-cni (containerd does at its call's deadline), which closes the
 * connection to plexusd: the work for that ADD stops at its next safe point, the delegated plugin still running is
 * killed, and the ADD is rolled back from the journal as a failed one is. Real plexusd and plexus-cni; the slow
 * plugin is the fail-plugin test double sleeping in ADD.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, it } from 'node:test';
import { DaemonFixture, podArgs, podMaker, ROOT, SHIM, type TestPod } from '../support/daemon';
import { restoreForwardingAfterwards } from '../support/forwarding';
import { NetnsFixture, podLinks, uniquePrefix } from '../support/netns';
import { untilTrue } from '../support/until';

const prefix = uniquePrefix('ab');
const fx = new NetnsFixture(prefix);
const dir = mkdtempSync(join(tmpdir(), `plexus-${prefix}-`));
const binDir = join(dir, 'cni-bin');
const slowLog = join(dir, 'slow.log');
/** Long enough that a plugin still alive a few seconds after its runtime left was not killed. */
const SLOW_MS = 8000;
const daemon = new DaemonFixture('podnet', { cniBinDir: binDir });
const newPod = podMaker(fx, prefix, ['eth0']);
const o = 200 + Math.floor(Math.random() * 50);
const t = Math.floor(Math.random() * 250);

restoreForwardingAfterwards();

before(async () => {
  mkdirSync(binDir);
  symlinkSync(join(ROOT, 'test/fixtures/fail-plugin'), join(binDir, 'fail-plugin'));
  fx.trackHostLink(`${prefix}br0`);
  daemon.writeBridgeNetwork({ name: 'podnet', bridge: `${prefix}br0`, subnet: `10.${o}.${t}.0/24` });
  const slownet = { cniVersion: '1.0.0', name: 'slownet', type: 'fail-plugin', sleepMs: SLOW_MS, logFile: slowLog };
  daemon.writeNadOf(slownet);
  await daemon.start();
});
after(async () => {
  await daemon.stop();
  fx.cleanup();
  rmSync(dir, { recursive: true, force: true });
});

const env = (command: 'ADD' | 'DEL', pod: TestPod): Record<string, string> => ({
  PATH: process.env.PATH ?? '/usr/bin:/bin',
  CNI_COMMAND: command,
  CNI_PATH: binDir,
  CNI_CONTAINERID: pod.cid,
  CNI_NETNS: pod.netns,
  CNI_IFNAME: 'eth0',
  CNI_ARGS: podArgs(pod.name, pod.cid),
});
const config = JSON.stringify(
  daemon.runtimeConfig(
    { runtimeConfig: { 'io.kubernetes.cri.pod-annotations': { 'k8s.v1.cni.cncf.io/networks': 'slownet' } } },
    '1.0.0',
  ),
);
const call = (command: 'ADD' | 'DEL', pod: TestPod) =>
  daemon.cni({
    command,
    containerId: pod.cid,
    netns: pod.netns,
    ifname: 'eth0',
    args: podArgs(pod.name, pod.cid),
    config,
  });

/** The fail-plugin's calls for a container, as it logged them: its command and PID. */
const pluginCalls = (cid: string): { command: string; pid: number }[] => {
  if (!existsSync(slowLog)) return [];
  return readFileSync(slowLog, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as { command: string; pid: number; env: Record<string, string> })
    .filter((c) => c.env.CNI_CONTAINERID === cid);
};
const running = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};
/** Whether the journal holds a record of the pod's attachment (begun, committed, or being rolled back). */
const recorded = (cid: string): boolean => existsSync(join(daemon.stateDir, 'journal', `${cid}@eth0.jsonl`));
const leasesOf = (cid: string): string[] => {
  const pool = join(daemon.stateDir, 'ipam', 'podnet');
  if (!existsSync(pool)) return [];
  return readdirSync(pool).filter((f) => readFileSync(join(pool, f), 'utf8').includes(cid));
};

it('an ADD whose plexus-cni is killed while a delegated plugin runs: the plugin is killed, the ADD rolled back, and the next ADD of the pod succeeds', async (tc) => {
  const pod = newPod();
  tc.after(() => call('DEL', pod));
  const shim = spawn(SHIM, [], { env: env('ADD', pod), stdio: ['pipe', 'ignore', 'ignore'] });
  const shimExited = new Promise((resolve) => shim.once('exit', resolve));
  shim.stdin.end(config);
  await untilTrue('the slow plugin runs the ADD', () => pluginCalls(pod.cid).some((c) => c.command === 'ADD'), 10_000);
  const plugin = pluginCalls(pod.cid).find((c) => c.command === 'ADD')!;
  assert.ok(running(plugin.pid), 'the plugin runs while the runtime waits');

  shim.kill('SIGKILL'); // the runtime gave up
  await shimExited;
  assert.ok(recorded(pod.cid), 'the ADD is under way in the journal');
  await untilTrue('the plugin killed once its runtime left', () => !running(plugin.pid), SLOW_MS / 2);
  await untilTrue('the ADD rolled back', () => !recorded(pod.cid), SLOW_MS / 2);
  assert.deepEqual(podLinks(pod.ns), [], 'no interface left in the pod');
  assert.deepEqual(leasesOf(pod.cid), [], 'no address left leased');
  assert.ok(
    pluginCalls(pod.cid).some((c) => c.command === 'DEL'),
    'the plugin got the DEL of its recorded ADD, as a failed ADD rolls back',
  );

  const again = await call('ADD', pod);
  assert.equal(again.code, 0, again.stdout);
  assert.ok(recorded(pod.cid), 'the second ADD is recorded');
});
