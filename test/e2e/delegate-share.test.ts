/**
 * One slow delegated network must not stall the node: calls waiting on its plugin lend their CNI slot, and the
 * network has a share of plugin execs of its own. Real plexusd and plexus-cni; the plugin is the fail-plugin test
 * double sleeping in ADD, standing in for a DHCP server that does not answer.
 */
import assert from 'node:assert/strict';
import { mkdirSync, readFileSync, symlinkSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it, type TestContext } from 'node:test';
import { DaemonFixture, podArgs, podMaker, ROOT } from '../support/daemon';
import { restoreForwardingAfterwards } from '../support/forwarding';
import { NetnsFixture, uniquePrefix } from '../support/netns';
import { untilTrue } from '../support/until';

const prefix = uniquePrefix('ds');
const fx = new NetnsFixture(prefix);
const base = new DaemonFixture('podnet');
const binDir = join(base.dir, 'cni-bin');
const slowLog = join(base.dir, 'slow.log');
const SLOW_MS = 4000;
const daemon = new DaemonFixture('podnet', { cniBinDir: binDir, maxConcurrent: 2, delegateShare: 2 });
const o = 200 + Math.floor(Math.random() * 50);
const t = Math.floor(Math.random() * 250);

function nad(name: string, config: Record<string, unknown>): void {
  daemon.writeNad(
    `${name}.json`,
    JSON.stringify({
      apiVersion: 'k8s.cni.cncf.io/v1',
      kind: 'NetworkAttachmentDefinition',
      metadata: { name, namespace: 'default' },
      spec: { config: JSON.stringify({ cniVersion: '1.0.0', name, ...config }) },
    }),
  );
}

restoreForwardingAfterwards();

before(async () => {
  mkdirSync(binDir);
  symlinkSync(join(ROOT, 'test/fixtures/fail-plugin'), join(binDir, 'fail-plugin'));
  fx.trackHostLink(`${prefix}br0`);
  daemon.writeBridgeNetwork({ name: 'podnet', bridge: `${prefix}br0`, subnet: `10.${o}.${t}.0/24` });
  nad('slownet', { type: 'fail-plugin', sleepMs: SLOW_MS, logFile: slowLog });
  nad('quicknet', { type: 'fail-plugin' });
  await daemon.start();
});
after(async () => {
  await daemon.stop();
  await base.stop();
  fx.cleanup();
});

const newPod = podMaker(fx, prefix, ['eth0']);
const add = (pod: ReturnType<typeof newPod>, annotation?: string) => {
  const annotations = annotation ? { 'k8s.v1.cni.cncf.io/networks': annotation } : {};
  const config = daemon.runtimeConfig({ runtimeConfig: { 'io.kubernetes.cri.pod-annotations': annotations } }, '1.0.0');
  return daemon.cni({
    command: 'ADD',
    containerId: pod.cid,
    netns: pod.netns,
    ifname: 'eth0',
    args: podArgs(pod.name, pod.cid),
    config,
  });
};
const del = (pod: ReturnType<typeof newPod>) =>
  daemon.cni({
    command: 'DEL',
    containerId: pod.cid,
    netns: pod.netns,
    ifname: 'eth0',
    args: podArgs(pod.name, pod.cid),
    config: daemon.runtimeConfig(),
  });
const slowAddsStarted = (): number => {
  try {
    return readFileSync(slowLog, 'utf8')
      .split('\n')
      .filter((l) => l.includes('"ADD"')).length;
  } catch {
    return 0;
  }
};

/**
 * Four pods ADDed on the slow network, each test its own: resolves once two of their plugins run (the share), and
 * after the test awaits every ADD and DELs every pod, so the next test starts from an idle node.
 */
async function slowNetworkBusy(t: TestContext): Promise<{
  pods: ReturnType<typeof newPod>[];
  adds: ReturnType<typeof add>[];
  started: () => number;
}> {
  const pods = [newPod(), newPod(), newPod(), newPod()];
  const from = slowAddsStarted();
  const started = (): number => slowAddsStarted() - from;
  const adds = pods.map((p) => add(p, 'slownet'));
  t.after(async () => {
    await Promise.allSettled(adds);
    for (const pod of pods) await del(pod);
  });
  await untilTrue('two slow plugins running', () => started() >= 2, 10_000);
  return { pods, adds, started };
}

describe('a delegated network whose plugin hangs, with --max-concurrent 2 and --delegate-share 2', () => {
  it('runs at most its share of the slow plugin at once', async (t) => {
    const slow = await slowNetworkBusy(t);
    await new Promise((r) => setTimeout(r, 500));
    assert.equal(slow.started(), 2, 'the other two wait for the share, not for a CNI slot');
  });

  it('lets a pod with only native networks through while every slot-holder waits on the plugin', async (t) => {
    const slow = await slowNetworkBusy(t);
    const nativePod = newPod();
    t.after(() => del(nativePod));
    const started = Date.now();
    const out = await add(nativePod);
    const took = Date.now() - started;
    assert.equal(out.code, 0, out.stdout);
    assert.equal(slow.started(), 2, 'the slow plugins were still running');
    assert.ok(took < SLOW_MS / 2, `the native ADD took ${took} ms`);
  });

  it('lets another delegated network through too', async (t) => {
    await slowNetworkBusy(t);
    const otherPod = newPod();
    t.after(() => del(otherPod));
    const started = Date.now();
    const out = await add(otherPod, 'quicknet');
    const took = Date.now() - started;
    assert.equal(out.code, 0, out.stdout);
    assert.ok(took < SLOW_MS / 2, `the other network's ADD took ${took} ms`);
  });

  it('still completes every slow ADD, and DEL removes every pod', async (t) => {
    const slow = await slowNetworkBusy(t);
    const [nativePod, otherPod] = [newPod(), newPod()];
    t.after(async () => {
      for (const pod of [nativePod, otherPod]) await del(pod);
    });
    assert.equal((await add(nativePod)).code, 0);
    assert.equal((await add(otherPod, 'quicknet')).code, 0);
    const outs = await Promise.all(slow.adds);
    for (const out of outs) assert.equal(out.code, 0, out.stdout);
    assert.equal(slow.started(), 4);
    for (const pod of [...slow.pods, nativePod, otherPod]) assert.equal((await del(pod)).code, 0);
    assert.deepEqual(daemon.journalFiles(), []);
    assert.deepEqual(daemon.leases('podnet'), []);
  });
});
