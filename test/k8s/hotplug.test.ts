/**
 * Hot-plug on a real API server: a running pod's k8s.v1.cni.cncf.io/networks annotation is changed by merge patch
 * (as `kubectl annotate --overwrite` does) and plexusd changes the pod's netns to match, with status and events; an
 * invalid change leaves the pod untouched with a Warning; many pods change at once; a plexusd killed mid-change leaves
 * a consistent pod after its restart.
 */
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { type ApiPod, apiPodCall, ApiPods, pluginDirWithSlowBridge } from '../support/api-pods';
import { DaemonFixture, podMaker } from '../support/daemon';
import { restoreForwardingAfterwards } from '../support/forwarding';
import { changeInFlight, recordKinds } from '../support/journal';
import { k8sMissing, KubeApiFixture } from '../support/k8s';
import { ip, NetnsFixture, podLinks, uniquePrefix } from '../support/netns';
import { expectedPrerequisites } from '../support/prerequisites';
import { delegatedLeaseStore, testBridges } from '../support/test-bridges';

const skip = expectedPrerequisites(k8sMissing());
const prefix = uniquePrefix('hp');
const NODE = `${prefix}-node`;
const NETWORKS = 'k8s.v1.cni.cncf.io/networks';
const bridges = testBridges(prefix, 200);

describe("hot-plug: changing a running pod's networks through its annotation", { skip }, () => {
  const fx = new NetnsFixture(prefix);
  let api: KubeApiFixture;
  let daemon: DaemonFixture;
  let binDir: string;
  let pods: ApiPods;
  const newPod = podMaker(fx, prefix, ['eth0', 'net1', 'net2', 'net3']);
  restoreForwardingAfterwards();

  // The "slow" network is delegated to the reference bridge: its host-local's default store goes afterwards.
  const removeSlowStore = delegatedLeaseStore('slow');

  before(async () => {
    for (let i = 0; i < 4; i++) fx.trackHostLink(`${prefix}b${i}`);
    binDir = pluginDirWithSlowBridge();
    api = await KubeApiFixture.startForPlexus();
    for (const [name, i, type] of [
      ['podnet', 0],
      ['sec', 1],
      ['alt', 2],
      ['slow', 3, 'slow'],
    ] as const) {
      assert.equal((await api.createNad('default', name, bridges.config(name, i, { type }))).status, 201);
    }
    daemon = new DaemonFixture('podnet', {
      kubeconfig: api.userKubeconfig('plexus'),
      nodeName: NODE,
      cniBinDir: binDir,
    });
    await daemon.start(30000);
    pods = new ApiPods(api, NODE, newPod);
  });
  after(async () => {
    await daemon?.stop();
    await api?.stop();
    fx.cleanup();
    if (binDir) rmSync(binDir, { recursive: true, force: true });
    removeSlowStore();
  });

  const call = (command: 'ADD' | 'DEL', p: ApiPod) => apiPodCall(daemon, command, p);
  async function running(name: string, networks: string): Promise<ApiPod> {
    const p = await pods.create(name, { [NETWORKS]: networks });
    const out = await call('ADD', p);
    assert.equal(out.code, 0, out.stdout);
    return p;
  }
  const leases = (): string[] =>
    ['podnet', 'sec', 'alt', 'slow'].flatMap((n) => daemon.leases(n).map((l) => `${n}:${l}`));
  /** The pod's links once they are `want` (polling), or what they are after ~10 s. */
  async function linksBecome(p: ApiPod, want: string[]): Promise<string[]> {
    let links = podLinks(p.pod.ns);
    for (let i = 0; i < 200 && JSON.stringify(links) !== JSON.stringify(want); i++) {
      await sleep(50);
      links = podLinks(p.pod.ns);
    }
    return links;
  }

  it('adds a network when the annotation gains it and removes one when it loses it, with status, events and leases following', async () => {
    const p = await running('grow', 'sec');
    const started = Date.now();
    await pods.annotate('default', 'grow', NETWORKS, 'sec,alt');
    assert.deepEqual(await linksBecome(p, ['eth0', 'net1', 'net2']), ['eth0', 'net1', 'net2']);
    assert.match(ip('-n', p.pod.ns, '-o', '-4', 'addr', 'show', 'net2'), bridges.subnetOf(2));
    const status = await pods.status('default', 'grow', (s) => s.length === 3);
    const ms = Date.now() - started;
    assert.deepEqual(
      status.map((s) => `${s.name}@${s.interface}`),
      ['default/podnet@eth0', 'default/sec@net1', 'default/alt@net2'],
    );
    assert.deepEqual(status[2]!.ips, [
      /inet (\S+)\//.exec(ip('-n', p.pod.ns, '-o', '-4', 'addr', 'show', 'net2'))![1]!,
    ]);
    assert.ok(ms < 5000, `added and reported within ${ms} ms`);

    await pods.annotate('default', 'grow', NETWORKS, 'alt');
    assert.deepEqual(await linksBecome(p, ['eth0', 'net2']), ['eth0', 'net2'], 'sec is gone; alt keeps net2');
    assert.deepEqual(
      (await pods.status('default', 'grow', (s) => s.length === 2)).map((s) => `${s.name}@${s.interface}`),
      ['default/podnet@eth0', 'default/alt@net2'],
    );
    assert.deepEqual(daemon.leases('sec'), [], "the removed network's lease is released");
    const events = await pods.events('default', 'grow', (e) => e.some((x) => x.reason === 'RemovedInterface'));
    assert.ok(
      events.some(
        (e) =>
          e.reason === 'AddedInterface' && /^Add net2 \[10\.\d+\.\d+\.\d+\/\d+\] from default\/alt$/.test(e.message),
      ),
      JSON.stringify(events.map((e) => e.message)),
    );
    assert.ok(events.some((e) => e.reason === 'RemovedInterface' && e.message === 'Remove net1 from default/sec'));
    assert.equal((await call('DEL', p)).code, 0);
    assert.deepEqual(leases(), []);
  });

  it('leaves the pod untouched on an invalid change and says why in a Warning event', async () => {
    const p = await running('steady', 'sec');
    await pods.annotate('default', 'steady', NETWORKS, 'sec,no-such-network');
    const events = await pods.events('default', 'steady', (e) => e.some((x) => x.type === 'Warning'));
    const warning = events.find((e) => e.type === 'Warning');
    assert.equal(warning?.reason, 'FailedAttachNetwork');
    assert.match(
      warning.message,
      /changing the networks of the running pod: .*network default\/no-such-network is not defined/,
    );
    assert.deepEqual(podLinks(p.pod.ns), ['eth0', 'net1']);
    assert.deepEqual(
      (await pods.status('default', 'steady')).map((s) => s.interface),
      ['eth0', 'net1'],
    );
    assert.equal((await call('DEL', p)).code, 0);
  });

  it('changes 20 pods at once', async () => {
    const many: ApiPod[] = [];
    for (let i = 0; i < 20; i++) many.push(await running(`many-${i}`, ''));
    await Promise.all(many.map((_, i) => pods.annotate('default', `many-${i}`, NETWORKS, 'sec')));
    for (const p of many) assert.deepEqual(await linksBecome(p, ['eth0', 'net1']), ['eth0', 'net1']);
    assert.equal(daemon.leases('sec').length, 20);
    for (const p of many) assert.equal((await call('DEL', p)).code, 0);
    assert.deepEqual(leases(), []);
  });

  it('after plexusd is killed in the middle of a change, the restarted daemon leaves the pod as its annotation says', async () => {
    const p = await running('crash', 'sec');
    await pods.annotate('default', 'crash', NETWORKS, 'slow'); // adds slow (a second), then removes sec
    const record = `${p.pod.cid}@eth0.jsonl`;
    // Frozen while it is looked at, so the change seen in flight is the one the kill cuts.
    const cut = await daemon.killWhen(() => changeInFlight(daemon.stateDir, record), 2000).catch(() => false);
    assert.ok(cut, `the kill cut the change: ${recordKinds(daemon.stateDir, record).join(' ')}`);
    await daemon.start(30000);
    // Cut off while adding slow: undone at the restart (the pod as it was), then made again from the annotation.
    assert.deepEqual(
      await linksBecome(p, ['eth0', 'net2']),
      ['eth0', 'net2'],
      'the change is made again after the restart',
    );
    assert.match(ip('-n', p.pod.ns, '-o', '-4', 'addr', 'show', 'net2'), bridges.subnetOf(3));
    const status = await pods.status('default', 'crash', (s) => s.length === 2 && s[1]?.name === 'default/slow');
    assert.deepEqual(
      status.map((s) => `${s.name}@${s.interface}`),
      ['default/podnet@eth0', 'default/slow@net2'],
    );
    assert.deepEqual(daemon.leases('sec'), []);
    assert.equal((await call('DEL', p)).code, 0);
    assert.deepEqual(podLinks(p.pod.ns), []);
    assert.deepEqual(leases(), []);
  });
});
