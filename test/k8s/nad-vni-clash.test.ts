/**
 * Two vxlan NADs with one VNI, on a real API server: the source that reads them (as plexusd wires it) serves the older
 * and refuses the newer when it reads it, with code 7 naming the older, a Warning Event on the refused NAD and a log
 * line; deleting the older lets the newer in.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import pino from 'pino';
import { networkClaims } from '../../src/drivers/registry';
import type { KubeApiClient } from '../../src/k8s/api-client';
import { NadRefusals } from '../../src/k8s/nad-refusals';
import { ApiNetworkSource } from '../../src/k8s/nad-source';
import { apiClientFor, k8sMissing, KubeApiFixture } from '../support/k8s';
import { expectedPrerequisites } from '../support/prerequisites';
import { clusterVxlanConfig } from '../support/vxlan-nad';
import { untilPasses } from '../support/until';

const skip = expectedPrerequisites(k8sMissing());
const vxlan = (name: string, vni: number): string => clusterVxlanConfig(name, vni, '10.92.0.0/24');
const NADS = '/apis/k8s.cni.cncf.io/v1/namespaces/default/network-attachment-definitions';

describe('a second vxlan NAD on a VNI another NAD uses', { skip }, () => {
  let api: KubeApiFixture;
  let client: KubeApiClient;
  let source: ApiNetworkSource;
  let refusals: NadRefusals;
  const lines: string[] = [];
  before(async () => {
    api = await KubeApiFixture.start();
    await api.installNadCrd();
    client = apiClientFor(api.kubeconfig);
    const log = pino({ level: 'info' }, { write: (line: string) => void lines.push(line) });
    refusals = new NadRefusals(client, 'node-a', log);
    source = new ApiNetworkSource(client, undefined, undefined, { of: networkClaims, changed: refusals.changed });
    await source.start();
  });
  after(async () => {
    await source?.stop();
    await refusals?.settled();
    client?.close();
    await api?.stop();
  });

  it('serves the older, refuses the newer with code 7 naming the older, says so in an Event and the log, and serves it once the older is gone', async () => {
    // The newer sorts first by name: only the creation times (whole seconds, hence the pause) make "zz-first" older.
    assert.equal((await api.createNad('default', 'zz-first', vxlan('zz-first', 4242))).status, 201);
    await untilPasses(() => assert.ok(source.get('default', 'zz-first').ok), 10000);
    await new Promise((r) => setTimeout(r, 1100));
    assert.equal((await api.createNad('default', 'aa-second', vxlan('aa-second', 4242))).status, 201);
    await untilPasses(() => {
      const second = source.get('default', 'aa-second');
      assert.ok(!second.ok, 'the second network is served');
      assert.equal(second.error.code, 7);
      assert.match(
        second.error.message,
        /aa-second is not served: it uses VXLAN VNI 4242, which network default\/zz-first/,
      );
    }, 10000);
    assert.ok(source.get('default', 'zz-first').ok, 'the first keeps working');
    assert.ok(source.list().errors.some((e) => /default\/aa-second is not served/.test(e.message)));
    await untilPasses(async () => {
      const events = await api.request(
        'GET',
        '/api/v1/namespaces/default/events?fieldSelector=involvedObject.name=aa-second',
      );
      const items =
        (events.body as { items?: { type: string; message: string; involvedObject: { kind: string; uid?: string } }[] })
          .items ?? [];
      assert.equal(items.length, 1, JSON.stringify(events.body));
      assert.equal(items[0]?.type, 'Warning');
      assert.equal(items[0]?.involvedObject.kind, 'NetworkAttachmentDefinition');
      assert.ok(items[0]?.involvedObject.uid, 'the Event names the NAD by uid, as kubectl describe looks it up');
      assert.match(items[0]?.message ?? '', /which network default\/zz-first/);
    }, 10000);
    assert.ok(
      lines.some((l) => /aa-second/.test(l) && /zz-first/.test(l)),
      'a log line names both',
    );

    assert.equal((await api.request('DELETE', `${NADS}/zz-first`)).status, 200);
    await untilPasses(() => assert.ok(source.get('default', 'aa-second').ok, 'served once the first is gone'), 10000);
  });
});
