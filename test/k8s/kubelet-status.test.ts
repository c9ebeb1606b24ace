/**
 * containerd 2 asks the node's CNI config STATUS (CNI 1.1) whenever the kubelet asks the runtime's status, and the
 * kubelet makes that the node's readiness: with Plexus's conflist at cniVersion 1.1.0 the node is Ready while plexusd
 * serves and NotReady, naming plexusd, while it is away. containerd 1.6 (libcni < 1.2) never sends STATUS: the older
 * pair's pass skips this, saying so.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { containerdMajor, containerdVersion } from '../support/containerd';
import type { DaemonFixture } from '../support/daemon';
import { type KubeNodeFixture, kubeNodeMissing } from '../support/kube-node';
import { uniquePrefix } from '../support/netns';
import { PlexusNodeFixture } from '../support/plexus-node';
import { expectedPrerequisites, optionalSkip } from '../support/prerequisites';
import { testBridges } from '../support/test-bridges';
import { until } from '../support/until';

const missing = kubeNodeMissing();
const noStatus = (): string | undefined =>
  containerdMajor() < 2
    ? `CNI STATUS needs containerd 2 (this run: ${containerdVersion()}; the default PLEXUS_STACK=1.36 runs containerd 2)`
    : undefined;
const skip = expectedPrerequisites(missing) || optionalSkip(missing ? undefined : noStatus());
const prefix = uniquePrefix('ks');
const bridges = testBridges(prefix, 150);

interface Condition {
  type: string;
  status: string;
  message?: string;
}

describe("the node's readiness follows plexusd through CNI STATUS (containerd 2)", { skip }, () => {
  const plexusNode = new PlexusNodeFixture();
  let node: KubeNodeFixture;
  let daemon: DaemonFixture;

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
    // The node is Ready only once STATUS succeeds: plexusd (its networks from its directory, no API) comes first.
    await plexusNode.start({
      prefix: 'ks',
      ownedLinks: [`${prefix}b0`],
      cniVersion: '1.1.0',
      beforeNode: async (d) => {
        const nad = { apiVersion: 'k8s.cni.cncf.io/v1', kind: 'NetworkAttachmentDefinition' };
        const metadata = { name: 'podnet', namespace: 'default' };
        d.writeNad('podnet.json', JSON.stringify({ ...nad, metadata, spec: { config: bridges.config('podnet', 0) } }));
        await d.start(30000);
      },
    });
    ({ node, daemon } = plexusNode);
  });
  after(() => plexusNode.stop());

  it('is NotReady, naming plexusd, while plexusd is away, and Ready again once it serves', async () => {
    await readyWhen((c) => c.status === 'True');
    await daemon.kill('SIGTERM');
    const down = await readyWhen((c) => c.status === 'False');
    assert.match(down.message ?? '', /plexusd is not (running|reachable|ready)/);
    await daemon.start(30000);
    await readyWhen((c) => c.status === 'True');
  });
});
