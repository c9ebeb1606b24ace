/**
 * The project's own control plane harness (test/support/k8s.ts) against the real kube-apiserver and etcd: it starts,
 * serves the NetworkAttachmentDefinition CRD from deploy/, and NADs round-trip through it with the upstream schema.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { k8sMissing, KubeApiFixture } from '../support/k8s';
import { expectedPrerequisites } from '../support/prerequisites';

const skip = expectedPrerequisites(k8sMissing());
const NADS = '/apis/k8s.cni.cncf.io/v1/namespaces/default/network-attachment-definitions';

describe('a real API server with the NetworkAttachmentDefinition CRD', { skip }, () => {
  let api: KubeApiFixture;
  before(async () => {
    api = await KubeApiFixture.start();
    await api.installNadCrd();
  });
  after(async () => {
    await api?.stop();
  });

  it('stores a NAD and answers it back, spec.config as text', async () => {
    const config = JSON.stringify({ cniVersion: '1.0.0', name: 'blue', type: 'bridge', bridge: 'blue0' });
    const made = await api.createNad('default', 'blue', config);
    assert.equal(made.status, 201, JSON.stringify(made.body));
    const got = await api.request('GET', `${NADS}/blue`);
    assert.equal(got.status, 200);
    assert.equal((got.body as { spec: { config: string } }).spec.config, config);
    const list = await api.request('GET', NADS);
    assert.deepEqual(
      (list.body as { items: { metadata: { name: string } }[] }).items.map((n) => n.metadata.name),
      ['blue'],
    );
  });

  it('refuses a NAD whose spec.config is not text, as the upstream schema does', async () => {
    const bad = await api.request('POST', NADS, {
      apiVersion: 'k8s.cni.cncf.io/v1',
      kind: 'NetworkAttachmentDefinition',
      metadata: { name: 'bad' },
      spec: { config: { type: 'bridge' } },
    });
    assert.equal(bad.status, 422, JSON.stringify(bad.body));
  });
});
