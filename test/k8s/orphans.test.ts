/**
 * Attachments of pods gone without a DEL, on a real API server: removed only when the pod's network namespace is
 * gone AND the API has no pod of that UID on the node. A pod whose object is deleted while its sandbox lives, or whose
 * sandbox is gone while the pod (same UID) still exists, keeps everything.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { apiPodCall, ApiPods } from '../support/api-pods';
import { DaemonFixture, podMaker } from '../support/daemon';
import { restoreForwardingAfterwards } from '../support/forwarding';
import { k8sMissing, KubeApiFixture, PLEXUS_USER, podnetBridge } from '../support/k8s';
import { ip, NetnsFixture, uniquePrefix } from '../support/netns';
import { until } from '../support/until';
import { expectedPrerequisites } from '../support/prerequisites';

const skip = expectedPrerequisites(k8sMissing());
const prefix = uniquePrefix('po');
const NODE = `${prefix}-node`;
const o = 200 + Math.floor(Math.random() * 50);
const t = Math.floor(Math.random() * 250);

describe('attachments of pods gone without a DEL', { skip }, () => {
  const fx = new NetnsFixture(prefix);
  let api: KubeApiFixture;
  let daemon: DaemonFixture;
  const newPod = podMaker(fx, prefix, ['eth0']);
  restoreForwardingAfterwards();

  before(async () => {
    fx.trackHostLink(`${prefix}b0`);
    api = await KubeApiFixture.startForPlexus();
    const podnet = podnetBridge(`${prefix}b0`, `10.${o}.${t}.0/24`);
    assert.equal((await api.createNad('default', 'podnet', podnet)).status, 201);
    daemon = new DaemonFixture('podnet', {
      kubeconfig: api.userKubeconfig(PLEXUS_USER),
      nodeName: NODE,
      orphanSweepSeconds: 0.5,
    });
    await daemon.start(30000);
  });
  after(async () => {
    await daemon?.stop();
    await api?.stop();
    fx.cleanup();
  });

  const pods = (): ApiPods => new ApiPods(api, NODE, newPod);
  const add = async (name: string) => {
    const p = await pods().create(name, {});
    const out = await apiPodCall(daemon, 'ADD', p);
    assert.equal(out.code, 0, out.stdout);
    return p;
  };
  const deletePod = async (name: string): Promise<void> => {
    const r = await api.request('DELETE', `/api/v1/namespaces/default/pods/${name}?gracePeriodSeconds=0`);
    assert.equal(r.status, 200, JSON.stringify(r.body));
  };
  const hasRecord = (cid: string): boolean => daemon.journalFiles().some((f) => f.startsWith(`${cid}@`));

  it('a pod whose object is deleted but whose sandbox lives keeps its attachment', async () => {
    const p = await add('alive');
    await deletePod('alive');
    await sleep(2000); // four sweeps
    assert.ok(hasRecord(p.pod.cid), 'the running sandbox keeps its record');
    assert.equal(daemon.leases('podnet').length, 1);
    // Now the sandbox goes too, still without a DEL: the next sweep removes it all.
    ip('netns', 'del', p.pod.ns);
    await until('the orphan to be removed', () => (hasRecord(p.pod.cid) ? undefined : true), 10000);
    assert.deepEqual(daemon.leases('podnet'), []);
  });

  it('a pod whose sandbox is gone but whose object (same UID) is still here keeps its attachment', async () => {
    const p = await add('sandboxless');
    ip('netns', 'del', p.pod.ns);
    await sleep(2000);
    assert.ok(hasRecord(p.pod.cid), 'the runtime may still send its DEL');
    await deletePod('sandboxless');
    await until('the orphan to be removed', () => (hasRecord(p.pod.cid) ? undefined : true), 10000);
    assert.deepEqual(daemon.leases('podnet'), []);
  });

  it("a pod made again under the same name (a StatefulSet) does not protect the old UID's orphan, and keeps its own", async () => {
    const old = await add('web-0');
    await deletePod('web-0');
    ip('netns', 'del', old.pod.ns);
    const now = await add('web-0');
    await until("the old UID's orphan to be removed", () => (hasRecord(old.pod.cid) ? undefined : true), 10000);
    await sleep(1500);
    assert.ok(hasRecord(now.pod.cid), 'the new pod keeps its attachment');
    assert.equal(daemon.leases('podnet').length, 1);
    const out = await daemon.cni({
      command: 'DEL',
      containerId: now.pod.cid,
      netns: now.pod.netns,
      ifname: 'eth0',
      args: now.args,
      config: daemon.runtimeConfig({}, '1.0.0'),
    });
    assert.equal(out.code, 0);
  });
});
