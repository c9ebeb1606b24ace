/**
 * Plexus is the writer of network-status: on a real API server, an annotation rewritten or removed by someone else
 * after the ADD is written back as the journal holds it, by a running plexusd (its pod informer sees the change) and by
 * one started after the change.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { DaemonFixture, podMaker } from '../support/daemon';
import { type ApiPod, apiPodCall, ApiPods, type StatusEntry } from '../support/api-pods';
import { restoreForwardingAfterwards } from '../support/forwarding';
import { k8sMissing, KubeApiFixture } from '../support/k8s';
import { NetnsFixture, uniquePrefix } from '../support/netns';
import { expectedPrerequisites } from '../support/prerequisites';

const skip = expectedPrerequisites(k8sMissing());
const prefix = uniquePrefix('sk');
const NODE = `${prefix}-node`;
const STATUS = 'k8s.v1.cni.cncf.io/network-status';
const subnet = `10.${200 + Math.floor(Math.random() * 50)}.${Math.floor(Math.random() * 250)}.0/24`;

describe('network-status changed by another writer', { skip }, () => {
  const fx = new NetnsFixture(prefix);
  const newPod = podMaker(fx, prefix, ['eth0']);
  let api: KubeApiFixture;
  let daemon: DaemonFixture;
  restoreForwardingAfterwards();

  before(async () => {
    fx.trackHostLink(`${prefix}b0`);
    api = await KubeApiFixture.startForPlexus();
    const config = {
      cniVersion: '1.0.0',
      name: 'podnet',
      type: 'bridge',
      bridge: `${prefix}b0`,
      isGateway: true,
      ipam: { type: 'host-local', ranges: [[{ subnet }]] },
    };
    assert.equal((await api.createNad('default', 'podnet', JSON.stringify(config))).status, 201);
    daemon = new DaemonFixture('podnet', { kubeconfig: api.userKubeconfig('plexus'), nodeName: NODE });
    await daemon.start(30000);
  });
  after(async () => {
    await daemon?.stop();
    await api?.stop();
    fx.cleanup();
  });

  const pods = (): ApiPods => new ApiPods(api, NODE, newPod);
  const call = (command: 'ADD' | 'DEL', p: ApiPod): Promise<{ code: number | null; stdout: string }> =>
    apiPodCall(daemon, command, p);
  /** The pod's attached status, once plexusd has written it. */
  const attached = async (name: string): Promise<{ p: ApiPod; written: StatusEntry[] }> => {
    const p = await pods().create(name, {});
    const added = await call('ADD', p);
    assert.equal(added.code, 0, added.stdout);
    const written = await pods().status('default', name);
    assert.deepEqual(
      written.map((s) => s.name),
      ['default/podnet'],
    );
    return { p, written };
  };
  const removeStatus = async (name: string): Promise<void> => {
    const r = await api.request(
      'PATCH',
      `/api/v1/namespaces/default/pods/${name}`,
      { metadata: { annotations: { [STATUS]: null } } },
      'application/merge-patch+json',
    );
    assert.equal(r.status, 200, JSON.stringify(r.body));
  };

  it("writes the journal's status back when another writer rewrites it", async () => {
    const { p, written } = await attached('rewritten');
    const forged: StatusEntry[] = [
      { name: 'default/podnet', interface: 'eth0', ips: ['192.0.2.66'], mac: '02:00:00:00:00:66', default: true },
    ];
    await pods().annotate('default', 'rewritten', STATUS, JSON.stringify(forged));
    const back = await pods().status('default', 'rewritten', (s) => s[0]?.ips[0] !== '192.0.2.66');
    assert.deepEqual(back, written);
    assert.equal((await call('DEL', p)).code, 0);
  });

  it('writes it back when another writer removes it', async () => {
    const { p, written } = await attached('removed');
    await removeStatus('removed');
    assert.deepEqual(await pods().status('default', 'removed'), written);
    assert.equal((await call('DEL', p)).code, 0);
  });

  it('writes it back at start when it was changed while plexusd was away', async () => {
    const { p, written } = await attached('away');
    await daemon.kill();
    await removeStatus('away');
    await daemon.start(30000);
    assert.deepEqual(await pods().status('default', 'away'), written);
    assert.equal((await call('DEL', p)).code, 0);
  });
});
