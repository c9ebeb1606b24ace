/**
 * A stopping plexusd has one budget, --drain-seconds, for everything it finishes before it exits: the calls it
 * accepted, the teardowns DELs left to the background, and the delegated plugins still running. Real plexusd and
 * plexus-cni; the slow call is the fail-plugin test double sleeping in ADD, and the background teardown is held
 * (PLEXUS_TEST_TEARDOWN_HOLD_MS, a test-only knob) so both are still pending when SIGTERM arrives.
 */
import assert from 'node:assert/strict';
import { mkdirSync, readFileSync, symlinkSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, it } from 'node:test';
import { HOLD_ENV } from '../../src/engine/teardown/background';
import { DaemonFixture, podArgs, podCall, podMaker, ROOT, type TestPod } from '../support/daemon';
import { restoreForwardingAfterwards } from '../support/forwarding';
import { NetnsFixture, uniquePrefix } from '../support/netns';
import { untilTrue } from '../support/until';

const prefix = uniquePrefix('sb');
const fx = new NetnsFixture(prefix);
const DRAIN_SECONDS = 3;
/** What a stop may take beyond the budget: the process's own exit, and the test's view of it. */
const SLACK_MS = 1500;
const base = new DaemonFixture('podnet');
const binDir = join(base.dir, 'cni-bin');
const slowLog = join(base.dir, 'slow.log');
const daemon = new DaemonFixture('podnet', { cniBinDir: binDir, drainSeconds: DRAIN_SECONDS });
daemon.settleDels = false;
const newPod = podMaker(fx, prefix, ['eth0']);

restoreForwardingAfterwards();

before(async () => {
  mkdirSync(binDir);
  symlinkSync(join(ROOT, 'test/fixtures/fail-plugin'), join(binDir, 'fail-plugin'));
  fx.trackHostLink(`${prefix}br0`);
  const subnet = `10.${200 + Math.floor(Math.random() * 50)}.${Math.floor(Math.random() * 250)}.0/24`;
  daemon.writeBridgeNetwork({ name: 'podnet', bridge: `${prefix}br0`, subnet });
  const slownet = { cniVersion: '1.0.0', name: 'slownet', type: 'fail-plugin', sleepMs: 60_000, logFile: slowLog };
  daemon.writeNad(
    'slownet.json',
    JSON.stringify({
      apiVersion: 'k8s.cni.cncf.io/v1',
      kind: 'NetworkAttachmentDefinition',
      metadata: { name: 'slownet', namespace: 'default' },
      spec: { config: JSON.stringify(slownet) },
    }),
  );
  process.env[HOLD_ENV] = '600000';
  try {
    await daemon.start();
  } finally {
    delete process.env[HOLD_ENV];
  }
});
after(async () => {
  for (const pid of slowPluginPids()) killIfAlive(pid); // left by a plexusd that did not stop its plugins
  await daemon.stop();
  await base.stop();
  fx.cleanup();
});

function slowPluginPids(): number[] {
  try {
    return readFileSync(slowLog, 'utf8')
      .split('\n')
      .filter(Boolean)
      .map((l) => (JSON.parse(l) as { pid: number }).pid);
  } catch {
    return [];
  }
}

function killIfAlive(pid: number): void {
  try {
    process.kill(pid, 'SIGKILL');
  } catch {
    /* gone */
  }
}

const slowAdd = (pod: TestPod) =>
  daemon.cni({
    command: 'ADD',
    containerId: pod.cid,
    netns: pod.netns,
    ifname: 'eth0',
    args: podArgs(pod.name, pod.cid),
    config: daemon.runtimeConfig(
      {
        daemonWaitSeconds: 1,
        runtimeConfig: { 'io.kubernetes.cri.pod-annotations': { 'k8s.v1.cni.cncf.io/networks': 'slownet' } },
      },
      '1.0.0',
    ),
  });

it(`SIGTERM with a slow call and pending teardowns: plexusd exits within --drain-seconds (${DRAIN_SECONDS})`, async (t) => {
  const deleted = [newPod(), newPod()];
  for (const p of deleted) assert.equal((await podCall(daemon, 'ADD', p, daemon.runtimeConfig())).code, 0);
  for (const p of deleted) assert.equal((await podCall(daemon, 'DEL', p, daemon.runtimeConfig())).code, 0);
  assert.equal(daemon.journalFiles().length, deleted.length, 'the teardowns are pending (held)');
  const inFlight = slowAdd(newPod());
  await untilTrue('the slow plugin running', () => slowPluginPids().length === 1, 10_000);

  const started = Date.now();
  await daemon.kill('SIGTERM');
  const took = Date.now() - started;
  t.diagnostic(`stopped in ${took} ms`);
  await inFlight; // cut off: the shim gives up after its daemonWaitSeconds

  assert.ok(took <= DRAIN_SECONDS * 1000 + SLACK_MS, `plexusd took ${took} ms to stop`);
});
