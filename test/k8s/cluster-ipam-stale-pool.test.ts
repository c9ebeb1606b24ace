/**
 * The IPPool of a deleted network does not block a new overlapping pool forever (issue 20, item 13): on a real
 * kube-apiserver and etcd, with one plexusd as a simulated node, a network's NAD is deleted and a new one whose pool
 * overlaps it is created. While a pod still has an address of the old pool, the old pool counts and the new one is
 * refused; once that address is released, the old pool is deleted after the grace period and the new one serves.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it, type TestContext } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { DaemonFixture, podMaker, type ShimOutput, type TestPod } from '../support/daemon';
import { k8sMissing, KubeApiFixture } from '../support/k8s';
import { NetnsFixture, uniquePrefix } from '../support/netns';
import { macvlanSegment } from '../support/macvlan-segment';
import { expectedPrerequisites } from '../support/prerequisites';
import { DEBIAN_PLUGINS } from '../support/plugin-dir';

const skip = expectedPrerequisites(k8sMissing());
const prefix = uniquePrefix('sp');
const o = 100 + Math.floor(Math.random() * 100);
const segment = macvlanSegment(prefix);
const master = segment.master;
const GRACE_S = 2;

const macvlan = (name: string, ipam: Record<string, unknown>): string =>
  JSON.stringify({ cniVersion: '1.0.0', name, type: 'macvlan', master, mode: 'bridge', ipam });
const BASE = macvlan('base', { type: 'host-local', ranges: [[{ subnet: `10.${o}.200.0/24` }]] });

type Pod = TestPod;

describe('the IPPool of a deleted network stops blocking a new overlapping pool', { skip }, () => {
  const fx = new NetnsFixture(prefix);
  let api: KubeApiFixture;
  let node: DaemonFixture;

  before(async () => {
    segment.create(fx);
    api = await KubeApiFixture.startForPlexus();
    assert.equal((await api.createNad('default', 'base', BASE)).status, 201);
    await api.createNode(`${prefix}-x`);
    node = new DaemonFixture('base', {
      kubeconfig: api.userKubeconfig('plexus'),
      nodeName: `${prefix}-x`,
      cniBinDir: DEBIAN_PLUGINS,
      ipamReconcileSeconds: 0.5,
      ipamNodeGraceSeconds: GRACE_S,
      orphanSweepSeconds: 0,
    });
    await node.start(60000);
  });
  after(async () => {
    await node?.stop();
    await api?.stop();
    fx.cleanup();
  });

  const newPod = podMaker(fx, prefix, []);
  const call = (command: 'ADD' | 'DEL', pod: Pod, networks: string): Promise<ShimOutput> =>
    node.cni({
      command,
      containerId: pod.cid,
      netns: pod.netns,
      ifname: 'eth0',
      args: `IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_INFRA_CONTAINER_ID=${pod.cid}`,
      config: node.runtimeConfig(
        { runtimeConfig: { 'io.kubernetes.cri.pod-annotations': { 'k8s.v1.cni.cncf.io/networks': networks } } },
        '1.0.0',
      ),
    });
  /** An ADD of a new pod on `networks`, DELed at once (the runtime's DEL after a failure, or the test's). */
  const tryAdd = async (networks: string): Promise<ShimOutput> => {
    const pod = newPod();
    const out = await call('ADD', pod, networks);
    assert.equal((await call('DEL', pod, networks)).code, 0);
    return out;
  };
  const pool = async (name: string): Promise<number> =>
    (await api.request('GET', `/apis/ipam.plexus.io/v1alpha1/ippools/${name}`)).status;

  /**
   * Network `old-${tag}` (10.`second`.0.0/24) whose NAD is deleted while `holder` has one of its addresses, then
   * `new-${tag}` (its /16) created; the holder is DELed after the test.
   */
  const oldPoolHeld = async (
    t: TestContext,
    tag: string,
    second: number,
  ): Promise<{ holder: Pod; oldNet: string; newNet: string }> => {
    const [oldNet, newNet] = [`old-${tag}`, `new-${tag}`];
    const ranges = (bits: number) => [[{ subnet: `10.${second}.0.0/${bits}` }]];
    assert.equal(
      (await api.createNad('default', oldNet, macvlan(oldNet, { type: 'plexus', ranges: ranges(24) }))).status,
      201,
    );
    const holder = newPod();
    t.after(() => call('DEL', holder, oldNet));
    const out = await call('ADD', holder, oldNet);
    assert.equal(out.code, 0, out.stdout);
    const nads = '/apis/k8s.cni.cncf.io/v1/namespaces/default/network-attachment-definitions';
    assert.equal((await api.request('DELETE', `${nads}/${oldNet}`)).status, 200);
    // Pools are ordered by creationTimestamp, in whole seconds (then by name, where "new" < "old"): a second apart.
    await sleep(1100);
    assert.equal(
      (await api.createNad('default', newNet, macvlan(newNet, { type: 'plexus', ranges: ranges(16) }))).status,
      201,
    );
    return { holder, oldNet, newNet };
  };

  it("while a pod has an address of a deleted network's pool, the pool counts: a new overlapping one is refused", async (t) => {
    const { oldNet, newNet } = await oldPoolHeld(t, 'a', o);
    const until = Date.now() + 3 * GRACE_S * 1000;
    let refused: ShimOutput | undefined;
    while (Date.now() < until) {
      refused = await tryAdd(newNet);
      assert.notEqual(refused.code, 0, "the old pool still has a pod's address");
      await sleep(500);
    }
    assert.match(refused!.stdout, new RegExp(`pool ${newNet} overlaps pool ${oldNet}`));
    assert.match(refused!.stdout, /deleted once no block of it has been held for --ipam-node-grace-seconds/);
    assert.equal(await pool(oldNet), 200);
  });

  it('once its last address is released, the old pool is deleted after the grace and the new overlapping pool serves', async (t) => {
    const { holder, oldNet, newNet } = await oldPoolHeld(t, 'b', o + 1);
    assert.equal((await call('DEL', holder, oldNet)).code, 0);
    const released = Date.now();
    let out = await tryAdd(newNet);
    while (out.code !== 0 && Date.now() - released < 30000) {
      await sleep(250);
      out = await tryAdd(newNet);
    }
    const took = Date.now() - released;
    assert.equal(out.code, 0, out.stdout);
    assert.equal(await pool(oldNet), 404);
    assert.ok(took >= GRACE_S * 1000, `the new pool served ${took} ms after the release: not before the grace`);
    console.log(
      `# the new overlapping pool served ${took} ms after the old pool's last address was released (grace ${GRACE_S} s)`,
    );
  });
});
