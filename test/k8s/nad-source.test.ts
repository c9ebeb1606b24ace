/**
 * NetworkAttachmentDefinitions from a real API server through ApiNetworkSource: what exists at start, what is created,
 * changed or deleted afterwards, a broken one, and other namespaces, all answered from the informer's memory.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { ApiNetworkSource } from '../../src/k8s/nad-source';
import type { KubeApiClient } from '../../src/k8s/api-client';
import { apiClientFor, k8sMissing, KubeApiFixture } from '../support/k8s';
import { expectedPrerequisites } from '../support/prerequisites';
import { untilPasses } from '../support/until';

const skip = expectedPrerequisites(k8sMissing());
const config = (name: string, bridge: string): string =>
  JSON.stringify({
    cniVersion: '1.0.0',
    name,
    type: 'bridge',
    bridge,
    ipam: { type: 'host-local', subnet: '10.91.0.0/24' },
  });

describe('NetworkAttachmentDefinitions from the API', { skip }, () => {
  let api: KubeApiFixture;
  let source: ApiNetworkSource;
  let client: KubeApiClient;
  before(async () => {
    api = await KubeApiFixture.start();
    await api.installNadCrd();
    assert.equal((await api.createNad('default', 'early', config('early', 'early0'))).status, 201);
    assert.equal(
      (
        await api.request('POST', '/api/v1/namespaces', {
          apiVersion: 'v1',
          kind: 'Namespace',
          metadata: { name: 'team-a' },
        })
      ).status,
      201,
    );
    client = apiClientFor(api.kubeconfig);
    source = new ApiNetworkSource(client);
    assert.equal(source.ready, false);
    const notYet = source.get('default', 'early');
    assert.ok(
      !notYet.ok && /not loaded from the API yet/.test(notYet.error.message),
      'before the first list, a lookup says so',
    );
    await source.start();
  });
  after(async () => {
    await source?.stop();
    client?.close();
    await api?.stop();
  });

  it('has what existed before it started, once ready', () => {
    assert.equal(source.ready, true);
    const early = source.get('default', 'early');
    assert.ok(early.ok, !early.ok ? early.error.message : '');
    assert.equal(early.value.key, 'default/early');
    assert.equal(early.value.plugins[0]?.type, 'bridge');
  });

  it('read() asks the API for a NAD its cache has not seen (before the first list), and names one the API lacks', async () => {
    const cold = new ApiNetworkSource(client);
    const early = await cold.read('default', 'early');
    assert.ok(early.ok, !early.ok ? early.error.message : '');
    assert.equal(early.value.plugins[0]?.type, 'bridge');
    const none = await cold.read('default', 'nope');
    assert.equal(
      none.ok ? '' : none.error.message,
      'network default/nope is not defined: there is no such NetworkAttachmentDefinition in the API',
    );
  });

  it('sees a NAD created, then changed, then deleted, in other namespaces too', async () => {
    assert.equal((await api.createNad('team-a', 'blue', config('blue', 'blue0'))).status, 201);
    await untilPasses(() => assert.ok(source.get('team-a', 'blue').ok), 10000);
    const path = '/apis/k8s.cni.cncf.io/v1/namespaces/team-a/network-attachment-definitions/blue';
    const changed = await api.request(
      'PATCH',
      path,
      { spec: { config: config('blue', 'blue1') } },
      'application/merge-patch+json',
    );
    assert.equal(changed.status, 200, JSON.stringify(changed.body));
    await untilPasses(() => {
      const r = source.get('team-a', 'blue');
      assert.ok(
        r.ok && (r.value.plugins[0] as Record<string, unknown> | undefined)?.bridge === 'blue1',
        'the change is seen',
      );
    }, 10000);
    assert.equal((await api.request('DELETE', path)).status, 200);
    await untilPasses(() => {
      const r = source.get('team-a', 'blue');
      assert.ok(
        !r.ok && r.error.code === 7 && /there is no such NetworkAttachmentDefinition in the API/.test(r.error.message),
      );
    }, 10000);
  });

  it('answers a broken NAD with what is wrong with it, and lists it among the errors', async () => {
    assert.equal((await api.createNad('default', 'broken', '{"cniVersion": "1.0.0", "type": ')).status, 201);
    await untilPasses(() => {
      const r = source.get('default', 'broken');
      assert.ok(
        !r.ok && r.error.code === 7 && /NetworkAttachmentDefinition default\/broken in the API/.test(r.error.message),
        !r.ok ? r.error.message : 'parsed',
      );
    }, 10000);
    const { networks, errors } = source.list();
    assert.ok(networks.some((n) => n.key === 'default/early'));
    assert.ok(errors.some((e) => /default\/broken/.test(e.message)));
  });

  it('keeps watching across an API server restart, and sees what changed while it was down', async () => {
    await api.stopApiServer();
    await new Promise((r) => setTimeout(r, 1000));
    assert.ok(source.get('default', 'early').ok, 'answers from memory while the API is down');
    await api.startApiServer();
    assert.equal((await api.createNad('default', 'after-restart', config('after-restart', 'ar0'))).status, 201);
    await untilPasses(() => assert.ok(source.get('default', 'after-restart').ok), 20000);
  });
});
