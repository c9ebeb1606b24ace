/**
 * The verbs while a DEL's teardown is still under way in the background (held for a moment by the test-only
 * PLEXUS_TEST_TEARDOWN_HOLD_MS): a second DEL answers at once, CHECK fails as for a deleted attachment, an ADD of the
 * same container and interface (or of another sandbox in the same netns) waits for the old interfaces to be gone,
 * GC leaves nothing, and a stopping plexusd finishes what is pending before it exits.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { hostVethName } from '../../src/drivers/bridge';
import { DaemonFixture, httpGet, metricSample, podArgs, podCall, podMaker, type TestPod } from '../support/daemon';
import { hostLinksWithPrefix, NetnsFixture, podLinks, uniquePrefix } from '../support/netns';
import { untilTrue } from '../support/until';

const prefix = uniquePrefix('ptv');
const fx = new NetnsFixture(prefix);
const daemon = new DaemonFixture('podnet');
daemon.settleDels = false;
const HOLD = 'PLEXUS_TEST_TEARDOWN_HOLD_MS';
const HOLD_MS = 1500;
const newPod = podMaker(fx, prefix, ['eth0']);
const config = (): Record<string, unknown> => daemon.runtimeConfig({ daemonWaitSeconds: 30 });

before(async () => {
  fx.trackHostLink(`${prefix}br`);
  daemon.writeBridgeNetwork({
    name: 'podnet',
    bridge: `${prefix}br`,
    subnet: `10.${200 + Math.floor(Math.random() * 50)}.${Math.floor(Math.random() * 250)}.0/24`,
  });
  process.env[HOLD] = String(HOLD_MS);
  await daemon.start();
  delete process.env[HOLD];
});
after(async () => {
  await daemon.stop();
  fx.cleanup();
});

const timed = async <T>(run: () => Promise<T>): Promise<{ value: T; ms: number }> => {
  const t0 = Date.now();
  const value = await run();
  return { value, ms: Date.now() - t0 };
};
const veth = (p: TestPod): string => hostVethName(p.cid, 'eth0', 'eth0');

describe('verbs while a teardown is pending', () => {
  it('DEL answers before the links are gone; a second DEL answers at once; CHECK fails as for a deleted attachment', async () => {
    const p = newPod();
    assert.equal((await podCall(daemon, 'ADD', p, config())).code, 0);
    const del = await timed(() => podCall(daemon, 'DEL', p, config()));
    assert.equal(del.value.code, 0, del.value.stdout);
    assert.equal(hostLinksWithPrefix(veth(p)).length, 1, 'answered while the host veth is still there');
    const again = await timed(() => podCall(daemon, 'DEL', p, config()));
    assert.equal(again.value.code, 0, again.value.stdout);
    assert.ok(again.ms < HOLD_MS / 2, `the second DEL did not wait for the teardown (${again.ms} ms)`);
    const check = await podCall(daemon, 'CHECK', p, config());
    assert.equal(check.json?.code, 3, `CHECK of a torn-down attachment: ${check.stdout}`);
    const pending = (await httpGet({ socketPath: daemon.socket, path: '/metrics' })).body;
    assert.equal(metricSample(pending, 'plexus_teardowns_pending{state="queued"}'), 1, pending);
    assert.ok((metricSample(pending, 'plexus_teardown_oldest_seconds') ?? 0) > 0, 'the pending teardown has an age');
    await untilTrue('the teardown is done', () => daemon.journalFiles().length === 0, 15_000);
    const done = (await httpGet({ socketPath: daemon.socket, path: '/metrics' })).body;
    for (const state of ['queued', 'running', 'retrying'])
      assert.equal(metricSample(done, `plexus_teardowns_pending{state="${state}"}`), 0, state);
    assert.equal(metricSample(done, 'plexus_teardown_oldest_seconds'), 0);
    assert.equal(metricSample(done, 'plexus_teardown_failures_total'), 0);
    assert.deepEqual(hostLinksWithPrefix(veth(p)), []);
    assert.deepEqual(podLinks(p.ns), []);
    assert.deepEqual(daemon.leases('podnet'), []);
  });

  it('an ADD of the same container and interface waits for its teardown, then attaches afresh', async () => {
    const p = newPod();
    const first = await podCall(daemon, 'ADD', p, config());
    assert.equal(first.code, 0);
    assert.equal((await podCall(daemon, 'DEL', p, config())).code, 0);
    const add = await timed(() => podCall(daemon, 'ADD', p, config()));
    assert.equal(add.value.code, 0, add.value.stdout);
    assert.ok(add.ms >= HOLD_MS / 2, `the ADD waited for the pending teardown (${add.ms} ms)`);
    assert.deepEqual(podLinks(p.ns), ['eth0']);
    assert.equal(daemon.leases('podnet').length, 1, "one lease: the new attachment's");
    assert.equal((await podCall(daemon, 'CHECK', p, config())).code, 0);
    assert.equal((await podCall(daemon, 'DEL', p, config())).code, 0);
    await untilTrue('the teardown is done', () => daemon.journalFiles().length === 0, 15_000);
  });

  it('a new sandbox in the netns of one being torn down (a runtime that keeps the netns) waits for the old interfaces', async () => {
    const old = newPod();
    assert.equal((await podCall(daemon, 'ADD', old, config())).code, 0);
    assert.equal((await podCall(daemon, 'DEL', old, config())).code, 0);
    const next: TestPod = { ...old, cid: `${old.cid}n`, name: `${old.name}n` };
    fx.trackHostLink(veth(next));
    const add = await daemon.cni({
      command: 'ADD',
      containerId: next.cid,
      netns: next.netns,
      ifname: 'eth0',
      args: podArgs(next.name, next.cid),
      config: config(),
    });
    assert.equal(add.code, 0, add.stdout);
    assert.deepEqual(hostLinksWithPrefix(veth(old)), [], "the old sandbox's veth is gone");
    assert.deepEqual(podLinks(old.ns), ['eth0']);
    const del = await daemon.cni({
      command: 'DEL',
      containerId: next.cid,
      netns: next.netns,
      ifname: 'eth0',
      args: podArgs(next.name, next.cid),
      config: config(),
    });
    assert.equal(del.code, 0);
    await untilTrue('the teardown is done', () => daemon.journalFiles().length === 0, 15_000);
    assert.deepEqual(podLinks(old.ns), []);
  });

  it('a GC while teardowns are pending removes nothing twice and leaves nothing', async () => {
    const pods = [newPod(), newPod()];
    for (const p of pods) assert.equal((await podCall(daemon, 'ADD', p, config())).code, 0);
    for (const p of pods) assert.equal((await podCall(daemon, 'DEL', p, config())).code, 0);
    const gc = await daemon.cni({ command: 'GC', config: daemon.runtimeConfig({ 'cni.dev/valid-attachments': [] }) });
    assert.equal(gc.code, 0, gc.stdout);
    await untilTrue('the teardowns are done', () => daemon.journalFiles().length === 0, 15_000);
    assert.deepEqual(daemon.leases('podnet'), []);
    assert.deepEqual(
      pods.flatMap((p) => hostLinksWithPrefix(veth(p))),
      [],
    );
  });

  it('a stopping plexusd finishes the pending teardowns before it exits', async () => {
    const pods = [newPod(), newPod(), newPod()];
    for (const p of pods) assert.equal((await podCall(daemon, 'ADD', p, config())).code, 0);
    for (const p of pods) assert.equal((await podCall(daemon, 'DEL', p, config())).code, 0);
    assert.equal(daemon.journalFiles().length, pods.length, 'pending at the stop');
    await daemon.kill('SIGTERM');
    assert.deepEqual(daemon.journalFiles(), [], 'no record left for the next start');
    assert.deepEqual(daemon.leases('podnet'), []);
    assert.deepEqual(
      pods.flatMap((p) => hostLinksWithPrefix(veth(p))),
      [],
    );
    await daemon.start();
  });
});
