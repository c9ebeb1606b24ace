/**
 * A NAD with a Whereabouts config on an API that does not serve Whereabouts' CRDs (issue 34, item 1): no Whereabouts
 * object can hold an address, so ADDs are served; but the pods Multus made may hold addresses in a store plexusd cannot
 * read (Whereabouts' etcd datastore), so the takeover from Multus waits, naming the CRDs, until they are served.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { k8sMissing, KubeApiFixture } from '../support/k8s';
import { ip, NetnsFixture, uniquePrefix } from '../support/netns';
import { expectedPrerequisites } from '../support/prerequisites';
import { until } from '../support/until';
import { macvlanOn, podCallOn, takeoverNode, type TakeoverNode } from '../support/whereabouts-node';

const skip = expectedPrerequisites(k8sMissing());
const prefix = uniquePrefix('wa');
const o = 100 + Math.floor(Math.random() * 100);
const master = `${prefix}m0`;

describe("a Whereabouts network on an API without Whereabouts' CRDs", { skip }, () => {
  const fx = new NetnsFixture(prefix);
  let api: KubeApiFixture;
  let node: TakeoverNode;

  before(async () => {
    fx.trackHostLink(master);
    ip('link', 'add', master, 'type', 'veth', 'peer', 'name', `${prefix}m1`);
    ip('link', 'set', master, 'up');
    api = await KubeApiFixture.startForPlexus();
    const nads = {
      base: macvlanOn(master, 'base', { type: 'host-local', ranges: [[{ subnet: `10.${o}.200.0/24` }]] }),
      wb: macvlanOn(master, 'wb', { type: 'whereabouts', range: `10.${o}.6.0/28` }),
    };
    for (const [name, config] of Object.entries(nads))
      assert.equal((await api.createNad('default', name, config)).status, 201);
    await api.createNode(`${prefix}-x`);
    node = takeoverNode(api, 'plexus', `${prefix}-x`);
    await node.daemon.start(60000);
  });
  after(async () => {
    await node?.daemon.stop();
    await api?.stop();
    fx.cleanup();
  });

  it('gives addresses of the range: no Whereabouts object can hold one', async () => {
    const pod = { cid: `${prefix}c1`, netns: fx.create('p1').path };
    const out = await podCallOn(node.daemon, 'ADD', pod, 'wb');
    assert.equal(out.code, 0, out.stdout);
    assert.equal((await podCallOn(node.daemon, 'DEL', pod, 'wb')).code, 0);
  });

  it("keeps Multus's config, naming the CRDs not served on /readyz", async () => {
    const check = await until('the takeover to say why it waits', async () => {
      const r = await node.takeoverCheck();
      return r.takeover !== 'ok' ? r : undefined;
    });
    assert.equal(check.status, 503);
    assert.match(check.takeover, /network\(s\) wb use Whereabouts IPAM/);
    assert.match(check.takeover, /does not serve Whereabouts' CRDs \(whereabouts\.cni\.cncf\.io\/v1alpha1\)/);
    assert.ok(node.multusServes(), 'the node keeps running Multus');
  });

  it("takes the node over once Whereabouts' CRDs are served", async () => {
    await api.installCrds('test/fixtures/whereabouts/crds.yaml');
    // Asked again every 10 s, then the takeover's retry every 5 s.
    await until('the takeover', () => !node.multusServes() || undefined, 40000, 250);
    assert.deepEqual(await node.takeoverCheck(), { status: 200, takeover: 'ok' });
  });
});
