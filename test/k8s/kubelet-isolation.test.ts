/**
 * Namespace isolation on a real kubelet and containerd: with --namespace-isolation, a pod whose annotation names a NAD
 * of another namespace gets no sandbox (the kubelet's event names the rule, code 7) and leaves nothing behind, while a
 * pod of the same namespace using its own NAD, a NAD of `default` and one of a --global-namespaces namespace runs.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { DaemonFixture } from '../support/daemon';
import { type SingleNode, singleNodeMissing } from '../support/cluster/single-node';
import { ipTry, uniquePrefix } from '../support/netns';
import { expectedPrerequisites } from '../support/prerequisites';
import { PlexusNodeFixture } from '../support/plexus-node';
import { testBridges } from '../support/test-bridges';

const skip = expectedPrerequisites(singleNodeMissing());
const prefix = uniquePrefix('ki');
const NETWORKS = 'k8s.v1.cni.cncf.io/networks';
const bridges = testBridges(prefix, 150);
/** No bridge here is a gateway: these tests look at which networks a pod may have, not at its routes. */
const NOT_GATEWAY = { isGateway: false };
/** Ports on one of the test's bridges, in the node's network namespace (none when the bridge was never made). */
const portsOn = (node: SingleNode, i: number): string[] => {
  const r = ipTry('-n', node.netns, '-o', 'link', 'show', 'master', `${prefix}b${i}`);
  return r.status === 0 ? r.out.split('\n').filter(Boolean) : [];
};

describe('namespace isolation under a real kubelet', { skip }, () => {
  const plexusNode = new PlexusNodeFixture();
  let node: SingleNode;
  let daemon: DaemonFixture;

  before(async () => {
    await plexusNode.start({ prefix: 'ki' });
    ({ node, daemon } = plexusNode);
    const api = node.api;
    for (const ns of ['team-a', 'team-b', 'shared']) await api.ensureNamespace(ns);
    assert.equal((await api.createNad('default', 'podnet', bridges.config('podnet', 0, NOT_GATEWAY))).status, 201);
    assert.equal((await api.createNad('team-a', 'own', bridges.config('own', 1, NOT_GATEWAY))).status, 201);
    assert.equal((await api.createNad('team-b', 'theirs', bridges.config('theirs', 2, NOT_GATEWAY))).status, 201);
    assert.equal((await api.createNad('shared', 'common', bridges.config('common', 3, NOT_GATEWAY))).status, 201);
    assert.equal((await api.createNad('default', 'everyone', bridges.config('everyone', 4, NOT_GATEWAY))).status, 201);
    daemon.addSettings({ ...plexusNode.apiSettings(), namespaceIsolation: true, globalNamespaces: 'shared' });
    await daemon.start(30000);
  });
  after(() => plexusNode.stop());

  it('refuses a NAD of another namespace: no sandbox, the event names the rule, nothing left behind', async () => {
    const [pod] = await node.createPods(1, {
      namespace: 'team-a',
      namePrefix: 'cross-',
      annotations: { [NETWORKS]: 'own,team-b/theirs' },
    });
    let failures: string[] = [];
    for (let i = 0; i < 120 && failures.length < 2; i++) {
      await sleep(500);
      failures = await node.sandboxFailures('team-a');
    }
    assert.ok(failures.length >= 2, `the kubelet retried the sandbox: ${failures.length} failures`);
    assert.match(failures[0]!, /team-b\/theirs/);
    assert.match(failures[0]!, /isolation|namespace/i);
    assert.notEqual((await node.pod('team-a', pod!)).status?.phase, 'Running');
    assert.deepEqual(daemon.leases('own'), [], 'refused at planning: nothing of the pod was made');
    assert.deepEqual(portsOn(node, 1), []);
    assert.deepEqual(daemon.journalFiles(), []);
    assert.equal((await node.call('DELETE', `/api/v1/namespaces/team-a/pods/${pod!}`)).status, 200);
  });

  it("runs a pod that uses its own namespace's NAD, one of default and one of a global namespace", async () => {
    const names = await node.createPods(1, {
      namespace: 'team-a',
      namePrefix: 'allowed-',
      annotations: { [NETWORKS]: 'own,default/everyone,shared/common' },
    });
    const timings = await node.waitAllRunning(names, 90_000, 'team-a');
    // The namespace's failures include the refused pod's of the case above: this pod's own must be none.
    const mine = timings.failureMessages.filter((m) => m.startsWith(names[0]!));
    assert.deepEqual(mine, []);
    assert.equal(daemon.leases('own').length, 1);
    assert.equal(daemon.leases('everyone').length, 1);
    assert.equal(daemon.leases('common').length, 1);
    assert.equal(portsOn(node, 1).length, 1, "the pod's port on its own network's bridge");
    await node.deleteAllPods(120_000);
    assert.deepEqual([...daemon.leases('own'), ...daemon.leases('everyone'), ...daemon.leases('common')], []);
    assert.deepEqual(portsOn(node, 1), []);
  });
});
