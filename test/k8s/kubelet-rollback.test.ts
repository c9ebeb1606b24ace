/**
 * A rolled-back ADD under a real kubelet and containerd: a pod whose second secondary network fails at its last
 * step (a route via a gateway on no link of the pod) gets no sandbox; the kubelet retries it, and every attempt is
 * undone whole, the first network's interface and address included. Once the network's definition is fixed, the
 * next retry runs the pod, holding exactly one address of each network: none was left behind by the failed attempts.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { ApiPods } from '../support/api-pods';
import type { DaemonFixture } from '../support/daemon';
import { type SingleNode, singleNodeMissing } from '../support/cluster/single-node';
import { ip, uniquePrefix } from '../support/netns';
import { expectedPrerequisites } from '../support/prerequisites';
import { PlexusNodeFixture } from '../support/plexus-node';
import { testBridges } from '../support/test-bridges';

const skip = expectedPrerequisites(singleNodeMissing());
const prefix = uniquePrefix('kr');
const NETWORKS = 'k8s.v1.cni.cncf.io/networks';
const bridges = testBridges(prefix, 150);
const BAD_ROUTE = [{ dst: '10.66.0.0/16', gw: '192.0.2.77' }];
/** Ports on one of the test's bridges, in the node's network namespace: one per pod interface attached there. */
const portsOn = (node: SingleNode, i: number): string[] =>
  ip('-n', node.netns, '-o', 'link', 'show', 'master', `${prefix}b${i}`).split('\n').filter(Boolean);

describe('a rolled-back ADD under a real kubelet', { skip }, () => {
  const plexusNode = new PlexusNodeFixture();
  let node: SingleNode;
  let daemon: DaemonFixture;
  let pods: ApiPods;

  before(async () => {
    await plexusNode.start({ prefix: 'kr' });
    ({ node, daemon } = plexusNode);
    const api = node.api;
    assert.equal((await api.createNad('default', 'podnet', bridges.config('podnet', 0))).status, 201);
    assert.equal((await api.createNad('default', 'good', bridges.config('good', 1))).status, 201);
    assert.equal(
      (await api.createNad('default', 'broken', bridges.config('broken', 2, { routes: BAD_ROUTE }))).status,
      201,
    );
    daemon.addSettings(plexusNode.apiSettings());
    pods = plexusNode.apiPods();
    await daemon.start(30000);
  });
  after(() => plexusNode.stop());

  let pod = '';

  it("a failing second network fails the sandbox, and the kubelet's retries leave nothing behind", async () => {
    pod = (await node.createPods(1, { namePrefix: 'rb-', annotations: { [NETWORKS]: 'good,broken' } }))[0]!;
    let failures: string[] = [];
    for (let i = 0; i < 180 && failures.length < 3; i++) {
      await sleep(500);
      failures = await node.sandboxFailures('default');
    }
    assert.ok(failures.length >= 3, `the kubelet retried the sandbox: ${failures.length} failures`);
    assert.match(failures[0]!, /attaching network default\/broken as net2: .*10\.66\.0\.0\/16/);
    const warnings = await pods.events('default', pod, (e) => e.some((x) => x.reason === 'FailedAttachNetwork'));
    assert.ok(
      warnings.some((e) => e.reason === 'FailedAttachNetwork' && /default\/broken/.test(e.message)),
      'a Warning on the pod names the network',
    );
    assert.notEqual((await node.pod('default', pod)).status?.phase, 'Running');
    // An attempt may be under way now: at most its own interface and address, never one per failed attempt.
    assert.ok(daemon.leases('good').length <= 1, `leases of good: ${daemon.leases('good').join(' ')}`);
    assert.ok(portsOn(node, 1).length <= 1, `ports on good's bridge: ${portsOn(node, 1).join('\n')}`);
    assert.ok(daemon.journalFiles().length <= 1, `records: ${daemon.journalFiles().join(' ')}`);
  });

  it('once the network is fixed, the next retry runs the pod with one address of each network', async () => {
    assert.ok(pod, 'the failing pod exists');
    const fixed = await node.call(
      'PATCH',
      '/apis/k8s.cni.cncf.io/v1/namespaces/default/network-attachment-definitions/broken',
      { spec: { config: bridges.config('broken', 2) } },
      'application/merge-patch+json',
    );
    assert.equal(fixed.status, 200, JSON.stringify(fixed.body));
    await node.waitAllRunning([pod], 180000);
    const status = await pods.status('default', pod, (s) => s.length === 3);
    assert.deepEqual(
      status.map((s) => `${s.name}@${s.interface}`),
      ['default/podnet@eth0', 'default/good@net1', 'default/broken@net2'],
    );
    assert.deepEqual(
      ['podnet', 'good', 'broken'].map((n) => daemon.leases(n).length),
      [1, 1, 1],
      'one address per network: the failed attempts released theirs',
    );
    assert.deepEqual(
      [0, 1, 2].map((i) => portsOn(node, i).length),
      [1, 1, 1],
      'one port per bridge',
    );
    assert.equal(daemon.journalFiles().length, 1);
  });

  it('deleting the pod leaves no record, lease or port', async () => {
    await node.deleteAllPods(120000);
    assert.deepEqual(daemon.journalFiles(), []);
    assert.deepEqual(
      ['podnet', 'good', 'broken'].flatMap((n) => daemon.leases(n)),
      [],
    );
    assert.deepEqual(
      [0, 1, 2].flatMap((i) => portsOn(node, i)),
      [],
    );
  });
});
