/**
 * Multus v4.3.0's own end-to-end scenarios (its `e2e/test-*.sh`, as data in test/fixtures/multus-e2e/) on one real
 * node (kube-apiserver, containerd, kubelet), every check of each script kept, the ones it only prints included. In
 * CI the node's CNI is Plexus; PLEXUS_SCENARIO_CNI=multus runs the same scenarios with the real Multus v4.3.0 thin
 * plugin instead, which is how the table in docs/migrate-from-multus.md was recorded (PLEXUS_SCENARIO_REPORT=FILE
 * writes each check's outcome there as JSON). Then two bugs of Multus v4.3.0 that Plexus must not have: a
 * `default-route` where eth0 already has one, and a cluster network given as the path of a `.conflist`.
 */
import assert from 'node:assert/strict';
import { readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { singleNodeMissing } from '../support/cluster/single-node';
import { multusMissing } from '../support/multus';
import { describeCheck, isCheck, loadScenarios } from '../support/multus-scenario-data';
import { uniquePrefix } from '../support/netns';
import { referencePluginsMissing } from '../support/plugin-dir';
import { expectedPrerequisites } from '../support/prerequisites';
import {
  type CheckOutcome,
  defaultRoutes,
  removeScenario,
  runAction,
  runCheck,
  ScenarioPods,
} from '../support/scenario-checks';
import { CLUSTER_GATEWAY, CLUSTER_NETWORK, ScenarioNode, scenarioCni } from '../support/scenario-node';

const cni = scenarioCni();
const skip = expectedPrerequisites(
  singleNodeMissing(),
  referencePluginsMissing(),
  cni === 'multus' ? multusMissing() : undefined,
);
const prefix = uniquePrefix('ms');
const NODE = `${prefix}-n1`; // SingleNode's name for its one node
const NETWORKS = 'k8s.v1.cni.cncf.io/networks';
const scenarios = loadScenarios({ cniVersion: '0.4.0', master: `${prefix}m`, bridge: `${prefix}t0`, node: NODE });

interface Row extends CheckOutcome {
  readonly scenario: string;
  readonly assertion: string;
  readonly says: string;
  readonly printedOnly: boolean;
}

describe(`Multus v4.3.0's own e2e scenarios on a real node, ${cni} its CNI`, { skip }, () => {
  const sn = new ScenarioNode({ cni, prefix });
  const rows: Row[] = [];

  before(async () => {
    await sn.start();
    assert.equal(sn.node.nodeName, NODE);
  });
  after(async () => {
    const report = process.env.PLEXUS_SCENARIO_REPORT;
    if (report) writeFileSync(report, JSON.stringify({ cni, rows }, null, 2));
    await sn.stop();
  });

  for (const s of scenarios)
    it(`${s.scenario}: ${s.steps.filter(isCheck).map(describeCheck).join('; ')}`, async () => {
      const made = new ScenarioPods();
      const failed: string[] = [];
      try {
        for (const step of s.steps) {
          if (!isCheck(step)) {
            await runAction(sn, step, made);
            continue;
          }
          const got = await runCheck(sn, step);
          const assertion = describeCheck(step);
          rows.push({ scenario: s.scenario, assertion, says: step.says, printedOnly: 'printedOnly' in step, ...got });
          if (!got.passed) failed.push(`${assertion} (the script: "${step.says}"): found ${got.found}`);
        }
      } finally {
        await removeScenario(sn, made);
      }
      assert.deepEqual(failed, [], `${s.scenario} on ${cni}`);
    });

  it("replaces eth0's default route with default-route's: the pod's default routes are via that gateway on net1 only", async () => {
    const made = new ScenarioPods();
    const network = 'default-route-regression';
    try {
      await runAction(
        sn,
        {
          do: 'createNad',
          name: network,
          config: {
            cniVersion: '0.4.0',
            plugins: [{ type: 'macvlan', master: sn.master, mode: 'bridge', ipam: { type: 'static' } }],
          },
        },
        made,
      );
      const selection = [{ name: network, ips: ['10.1.2.21/24'], 'default-route': ['10.1.2.254'] }];
      await runAction(
        sn,
        { do: 'createPod', name: 'dr-regression', annotations: { [NETWORKS]: JSON.stringify(selection) } },
        made,
      );
      const ready = await runCheck(sn, { check: 'ready', pods: ['dr-regression'], says: 'Ready' });
      assert.ok(ready.passed, ready.found);
      const netns = await sn.node.podNetns('default', 'dr-regression');
      assert.deepEqual(
        defaultRoutes(netns).map((r) => `${r.gateway} dev ${r.dev}`),
        ['10.1.2.254 dev net1'],
        `the cluster network's default route (via ${CLUSTER_GATEWAY} dev eth0) is gone`,
      );
    } finally {
      await removeScenario(sn, made);
    }
  });

  it('deletes every pod when the cluster network is the path of a .conflist, none left Terminating, no lease left', async () => {
    const made = new ScenarioPods();
    const leases = (): string[] => {
      try {
        return readdirSync(join(sn.ipamDir, CLUSTER_NETWORK)).filter((f) => /^\d/.test(f));
      } catch {
        return [];
      }
    };
    const before = leases();
    const pods = ['conflist-del-0', 'conflist-del-1', 'conflist-del-2'];
    try {
      for (const name of pods) await runAction(sn, { do: 'createPod', name }, made);
      const ready = await runCheck(sn, { check: 'ready', pods, says: 'Ready' });
      assert.ok(ready.passed, ready.found);
      assert.equal(leases().length, before.length + pods.length, 'each pod holds one address of the cluster network');
      const deleted = await runCheck(sn, { check: 'deleted', pods, says: 'deleted' });
      assert.ok(deleted.passed, deleted.found);
      // Plexus releases an address once the pod's links are gone, just after the DEL's answer.
      for (let i = 0; i < 40 && leases().length > before.length; i++) await new Promise((r) => setTimeout(r, 250));
      assert.deepEqual(leases(), before, `no lease of ${CLUSTER_NETWORK} left`);
    } finally {
      await removeScenario(sn, made);
    }
  });
});
