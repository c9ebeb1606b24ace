/**
 * The multi-node test cluster itself (test/support/cluster/): three worker nodes register Ready, each with its own
 * containerd, kubelet and plexusd; each runs pods through its own Plexus; what one node has (links, kubelet files)
 * is not seen from another; and stop() leaves nothing behind. Prints each node's memory and the start time, the
 * figures docs/testing.md keeps.
 */
import assert from 'node:assert/strict';
import { existsSync, statSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import { clusterMissing, TestCluster } from '../support/cluster/cluster';
import { createPod, ensureNamespace, waitRunning } from '../support/cluster/pods';
import { hostLinksWithPrefix, ip } from '../support/netns';
import { expectedPrerequisites } from '../support/prerequisites';

const skip = expectedPrerequisites(clusterMissing());
const NS = 'fixture';

describe('the multi-node test cluster', { skip }, () => {
  let cluster: TestCluster | undefined;

  before(async () => {
    cluster = await TestCluster.start();
  });
  after(async () => {
    if (!cluster) return;
    const { prefix, nodes } = cluster;
    const problems = await cluster.stop();
    assert.deepEqual(problems, [], 'the cluster stopped cleanly');
    assert.deepEqual(hostLinksWithPrefix(prefix), [], 'no host link of the cluster is left');
    assert.deepEqual(
      ip('netns', 'list')
        .split('\n')
        .filter((l) => l.startsWith(prefix)),
      [],
      'no node network namespace is left',
    );
    for (const n of nodes) assert.equal(existsSync(`/sys/fs/cgroup/memory/${n.name}`), false, `${n.name}'s cgroup`);
  });

  it('three nodes register Ready, each running its own containerd, kubelet and plexusd', () => {
    const c = cluster!;
    assert.equal(c.nodes.length, 3);
    for (const n of c.nodes) {
      assert.deepEqual(Object.keys(n.pids).sort(), ['containerd', 'kubelet', 'plexusd'], n.name);
      const rss = n.rssMib();
      console.log(
        `${n.name}: RSS kubelet ${rss.kubelet?.toFixed(0)} MiB, containerd ${rss.containerd?.toFixed(0)} MiB, ` +
          `plexusd ${rss.plexusd?.toFixed(0)} MiB`,
      );
    }
    console.log(
      `${c.nodes.length} nodes from nothing to Ready with plexusd ready: ${(c.nodesStartMs / 1000).toFixed(1)} s`,
    );
  });

  it("a pod bound to each node runs with its node's Plexus network-status, its address from that node's pod subnet", async () => {
    const c = cluster!;
    await ensureNamespace(c.api, NS);
    for (const n of c.nodes) await createPod(c.api, NS, `p-${n.name}`, { nodeName: n.name });
    const pods = await waitRunning(
      c.api,
      NS,
      c.nodes.map((n) => `p-${n.name}`),
    );
    pods.forEach((pod, i) => {
      const status = JSON.parse(pod.metadata.annotations!['k8s.v1.cni.cncf.io/network-status']!) as {
        ips?: string[];
      }[];
      assert.match(status[0]?.ips?.[0] ?? '', new RegExp(`^10\\.244\\.${i + 1}\\.`), pod.metadata.name);
    });
  });

  it("each node sees its own links and its own kubelet socket, not another node's", () => {
    const c = cluster!;
    const sockets = c.nodes.map((n) => {
      const links = ip('-n', n.netns, '-o', 'link', 'show');
      assert.match(links, /uplink0/);
      assert.match(links, /cni0/);
      const stat = n.run(['stat', '-c', '%i', '/var/lib/kubelet/device-plugins/kubelet.sock']);
      assert.equal(stat.status, 0, stat.out);
      return stat.out.trim();
    });
    assert.equal(new Set(sockets).size, c.nodes.length, `one kubelet socket per node: ${sockets.join(' ')}`);
    const onHost = statSync('/var/lib/kubelet/device-plugins/kubelet.sock', { throwIfNoEntry: false });
    assert.ok(!sockets.includes(String(onHost?.ino)), "the host's /var/lib/kubelet is none of the nodes'");
  });
});
