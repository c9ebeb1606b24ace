/**
 * plexusd on a real API server, as plexusd wires it (src/node/cluster.ts hands the drivers' claims to the NAD source):
 * a pod that selects the newer of two vxlan NADs on one VNI is refused with code 7 naming the older, before anything
 * is attached, and nothing is left behind.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { DaemonFixture, podMaker } from '../support/daemon';
import { apiPodCall, ApiPods } from '../support/api-pods';
import { k8sMissing, KubeApiFixture } from '../support/k8s';
import { NetnsFixture, podLinks, uniquePrefix } from '../support/netns';
import { expectedPrerequisites } from '../support/prerequisites';
import { clusterVxlanConfig } from '../support/vxlan-nad';
import { testBridges } from '../support/test-bridges';

const skip = expectedPrerequisites(k8sMissing());
const prefix = uniquePrefix('pv');
const NODE = `${prefix}-node`;
const bridges = testBridges(prefix, 150);
const vxlan = (name: string, vni: number): string => clusterVxlanConfig(name, vni, '10.93.0.0/24');

describe('plexusd and two vxlan NADs on one VNI', { skip }, () => {
  const fx = new NetnsFixture(prefix);
  let api: KubeApiFixture;
  let daemon: DaemonFixture;
  const newPod = podMaker(fx, prefix, ['eth0', 'net1']);
  const vni = 4000 + Math.floor(Math.random() * 1000);

  before(async () => {
    fx.trackHostLink(`${prefix}b0`);
    api = await KubeApiFixture.startForPlexus();
    assert.equal((await api.createNad('default', 'podnet', bridges.config('podnet', 0))).status, 201);
    // The newer sorts first by name: only the creation times (whole seconds, hence the pause) make "zz-older" older.
    assert.equal((await api.createNad('default', 'zz-older', vxlan('zz-older', vni))).status, 201);
    await sleep(1100);
    assert.equal((await api.createNad('default', 'aa-newer', vxlan('aa-newer', vni))).status, 201);
    daemon = new DaemonFixture('podnet', { kubeconfig: api.userKubeconfig('plexus'), nodeName: NODE });
    await daemon.start(30000);
  });
  after(async () => {
    await daemon?.stop();
    await api?.stop();
    fx.cleanup();
  });

  it('refuses the ADD of a pod selecting the newer with code 7 naming the older, attaching nothing', async () => {
    const p = await new ApiPods(api, NODE, newPod).create('clash', { 'k8s.v1.cni.cncf.io/networks': 'aa-newer' });
    const refused = await apiPodCall(daemon, 'ADD', p);
    assert.equal(refused.json?.code, 7, refused.stdout);
    assert.match(
      String(refused.json?.msg),
      new RegExp(`network default/aa-newer is not served: it uses VXLAN VNI ${vni}, which network default/zz-older`),
    );
    assert.deepEqual(podLinks(p.pod.ns), [], 'nothing attached in the pod');
    assert.equal((await apiPodCall(daemon, 'DEL', p)).code, 0);
  });
});
