/**
 * containerd 2 asks the node's CNI config STATUS (CNI 1.1) whenever the kubelet asks the runtime's status, and the
 * kubelet makes that the node's readiness. The conflist plexusd installs (--install-cni-config) carries the highest
 * cniVersion the node's runtime reads, learnt from the Node's status: 1.1.0 on containerd 2, so the node is Ready
 * while plexusd serves and NotReady, naming plexusd, while it is away; 1.0.0 on containerd 1.6, which fails every
 * sandbox on a 1.1.0 result and never sends STATUS (the older pair's pass skips the readiness case, saying so).
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { PLEXUS_CONFLIST } from '../../src/install/cni-conf';
import { containerdMajor, containerdVersion } from '../support/containerd';
import type { DaemonFixture } from '../support/daemon';
import { type SingleNode, singleNodeMissing } from '../support/cluster/single-node';
import { uniquePrefix } from '../support/netns';
import { PlexusNodeFixture } from '../support/plexus-node';
import { expectedPrerequisites, optionalSkip } from '../support/prerequisites';
import { testBridges } from '../support/test-bridges';
import { until } from '../support/until';

const missing = singleNodeMissing();
const noStatus = (): string | undefined =>
  containerdMajor() < 2
    ? `CNI STATUS needs containerd 2 (this run: ${containerdVersion()}; the default PLEXUS_STACK=1.36 runs containerd 2)`
    : undefined;
const skip = expectedPrerequisites(missing);
const prefix = uniquePrefix('ks');
const bridges = testBridges(prefix, 150);

interface Condition {
  type: string;
  status: string;
  message?: string;
}

describe("the conflist plexusd installs makes the node's readiness follow plexusd (containerd 2)", { skip }, () => {
  const plexusNode = new PlexusNodeFixture();
  let node: SingleNode;
  let daemon: DaemonFixture;
  let installed = '';

  /** The node's Ready condition once `wanted` holds for it (within a minute: the kubelet polls every few seconds). */
  const readyWhen = (wanted: (c: Condition) => boolean): Promise<Condition> =>
    until(
      'the node condition',
      async () => {
        const got = await node.call('GET', `/api/v1/nodes/${node.nodeName}`);
        const conditions = (got.body as { status?: { conditions?: Condition[] } }).status?.conditions ?? [];
        const ready = conditions.find((c) => c.type === 'Ready');
        return ready && wanted(ready) ? ready : undefined;
      },
      60000,
      500,
    );

  before(async () => {
    // The node starts on the test's own 1.0.0 conflist (no STATUS: Ready without plexusd); plexusd, on the API as the
    // documented RBAC allows, then installs 00-plexus.conflist, which sorts first: from then on the runtime reads it.
    await plexusNode.start({ prefix: 'ks' });
    ({ node, daemon } = plexusNode);
    assert.equal((await node.api.createNad('default', 'podnet', bridges.config('podnet', 0))).status, 201);
    installed = join(node.cniConfDir, PLEXUS_CONFLIST);
    daemon.addSettings({ ...plexusNode.apiSettings(), installCniConfig: installed });
    await daemon.start(30000);
  });
  after(() => plexusNode.stop());

  it("carries the highest cniVersion the node's runtime reads: 1.1.0 on containerd 2, 1.0.0 on containerd 1.6", () => {
    const conflist = JSON.parse(readFileSync(installed, 'utf8')) as { cniVersion: string };
    assert.equal(conflist.cniVersion, containerdMajor() >= 2 ? '1.1.0' : '1.0.0', containerdVersion());
  });

  it(
    'is NotReady, naming plexusd, while plexusd is away, and Ready again once it serves',
    { skip: optionalSkip(noStatus()) },
    async () => {
      await readyWhen((c) => c.status === 'True');
      await daemon.kill('SIGTERM');
      const down = await readyWhen((c) => c.status === 'False');
      assert.match(down.message ?? '', /plexusd is not (running|reachable|ready)/);
      await daemon.start(30000);
      await readyWhen((c) => c.status === 'True');
    },
  );
});
