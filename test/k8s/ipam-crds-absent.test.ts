/**
 * A cluster without Plexus's IPAM CRDs (deploy/crds/20-crd-ipam.yaml not applied): plexusd still becomes ready and serves
 * host-local networks; a network with cluster IPAM fails with 11, saying what is missing, and leaves nothing behind.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { apiPodCall, ApiPods } from '../support/api-pods';
import { DaemonFixture, podMaker } from '../support/daemon';
import { restoreForwardingAfterwards } from '../support/forwarding';
import { k8sMissing, KubeApiFixture } from '../support/k8s';
import { NetnsFixture, podLinks, uniquePrefix } from '../support/netns';
import { expectedPrerequisites } from '../support/prerequisites';

const prefix = uniquePrefix('nc');
const NODE = `${prefix}-node`;
const o = 200 + Math.floor(Math.random() * 50);
const bridge = (name: string, i: number, ipam: Record<string, unknown>): string =>
  JSON.stringify({ cniVersion: '1.0.0', name, type: 'bridge', bridge: `${prefix}b${i}`, ipam });

describe('plexusd on an API without the IPAM CRDs', { skip: expectedPrerequisites(k8sMissing()) }, () => {
  const fx = new NetnsFixture(prefix);
  let api: KubeApiFixture;
  let daemon: DaemonFixture;
  let pods: ApiPods;
  restoreForwardingAfterwards();

  before(async () => {
    for (let i = 0; i < 2; i++) fx.trackHostLink(`${prefix}b${i}`);
    api = await KubeApiFixture.start();
    await api.installNadCrd();
    await api.grantPlexusRbac('plexus');
    assert.equal(
      (
        await api.createNad(
          'default',
          'podnet',
          bridge('podnet', 0, { type: 'host-local', ranges: [[{ subnet: `10.${o}.1.0/24` }]] }),
        )
      ).status,
      201,
    );
    assert.equal(
      (
        await api.createNad(
          'default',
          'wide',
          bridge('wide', 1, { type: 'plexus', ranges: [[{ subnet: `10.${o}.8.0/21` }]] }),
        )
      ).status,
      201,
    );
    daemon = new DaemonFixture('podnet', { kubeconfig: api.userKubeconfig('plexus'), nodeName: NODE });
    await daemon.start(30000); // ready, though the IPAM CRDs are not served
    pods = new ApiPods(api, NODE, podMaker(fx, prefix, ['eth0', 'net1']));
  });
  after(async () => {
    await daemon?.stop();
    await api?.stop();
    fx.cleanup();
  });

  it('attaches host-local networks, and refuses a cluster-IPAM one with 11 naming the missing CRDs', async () => {
    const plain = await pods.create('plain', {});
    const call = (command: 'ADD' | 'DEL', p: typeof plain) => apiPodCall(daemon, command, p);
    assert.equal((await call('ADD', plain)).code, 0);
    const wide = await pods.create('wide', { 'k8s.v1.cni.cncf.io/networks': 'wide' });
    const refused = await call('ADD', wide);
    assert.equal(refused.json?.code, 11, refused.stdout);
    assert.match(String(refused.json?.msg), /cluster IPAM has not loaded its IPBlocks from the Kubernetes API yet/);
    assert.match(String(refused.json?.details), /deploy\/crds\/20-crd-ipam\.yaml/);
    assert.deepEqual(podLinks(wide.pod.ns), [], 'nothing half-made');
    for (const p of [plain, wide]) assert.equal((await call('DEL', p)).code, 0);
    assert.deepEqual(daemon.journalFiles(), []);
  });
});
