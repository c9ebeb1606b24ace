/**
 * A real node: the kubelet and containerd (CRI on) of SingleNode, with the reference bridge + host-local as the
 * node's only network. Pods bound to the node run, get an address of the network's subnet in their API status, and
 * stop() leaves nothing behind: no link, network namespace, process, mount or host path of the node's.
 */
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { SingleNode, singleNodeMissing } from '../support/cluster/single-node';
import { hostLinksWithPrefix, ip, uniquePrefix } from '../support/netns';
import { expectedPrerequisites } from '../support/prerequisites';
import { DEBIAN_PLUGINS } from '../support/plugin-dir';

const skip = expectedPrerequisites(singleNodeMissing());
const prefix = uniquePrefix('kn');
const bridge = `${prefix}br`;

/** A 10.x.y.0/24 that no host address or route mentions. */
function freeSubnet(): string {
  const used = `${ip('-o', '-4', 'addr', 'show')}\n${ip('-o', '-4', 'route', 'show', 'table', 'all')}`;
  for (;;) {
    const [x, y] = [100 + Math.floor(Math.random() * 100), Math.floor(Math.random() * 250)];
    if (!used.includes(`10.${x}.`)) return `10.${x}.${y}`;
  }
}

const HOST_PATHS = [
  '/var/lib/kubelet',
  '/var/lib/kubelet/device-plugins',
  '/var/lib/kubelet/pod-resources',
  '/var/log/containers',
  '/var/log/pods',
  '/opt/containerd',
  '/etc/cni/net.d',
  '/run/containerd',
];
const hostPathsNow = (): Record<string, boolean> => Object.fromEntries(HOST_PATHS.map((p) => [p, existsSync(p)]));
// The kubelet sets these at start (kernel.panic=10, panic_on_oops=1, ...): the node must put them back.
const KERNEL = [
  'vm/overcommit_memory',
  'vm/panic_on_oom',
  'kernel/panic',
  'kernel/panic_on_oops',
  'kernel/keys/root_maxkeys',
  'kernel/keys/root_maxbytes',
];
const kernelNow = (): string[] => KERNEL.map((k) => `${k}=${readFileSync(`/proc/sys/${k}`, 'utf8').trim()}`);
const netnsNow = (): string[] =>
  ip('netns', 'list')
    .split('\n')
    .map((l) => l.split(' ')[0] ?? '')
    .filter(Boolean)
    .sort();

describe('a real node (kubelet + containerd) with the reference bridge network', { skip }, () => {
  const net = freeSubnet();
  let node: SingleNode;
  let hostBefore: Record<string, boolean>;
  let kernelBefore: string[];
  let netnsBefore: string[];
  let pids: number[] = [];
  let root = '';

  before(async () => {
    hostBefore = hostPathsNow();
    kernelBefore = kernelNow();
    netnsBefore = netnsNow();
    node = await SingleNode.start({
      cniBinDir: DEBIAN_PLUGINS,
      // containerd 1.6 refuses a 1.1.0 result: the reference plugins answer in the config's version.
      cniConfList: (dir) =>
        JSON.stringify({
          cniVersion: '1.0.0',
          name: 'podnet',
          plugins: [
            {
              type: 'bridge',
              bridge,
              isGateway: false,
              ipMasq: false,
              ipam: { type: 'host-local', ranges: [[{ subnet: `${net}.0/24` }]], dataDir: join(dir, 'cni-data') },
            },
          ],
        }),
    });
    root = node.dir;
    pids = Object.values(node.pids);
  });
  after(async () => {
    await node?.stop();
  });

  it("runs three pods, each with an address of the network's subnet in its API status and a port on the bridge", async () => {
    const names = await node.createPods(3, { namePrefix: 'smoke-' });
    const timings = await node.waitAllRunning(names, 30000);
    assert.equal(timings.sandboxFailures, 0, timings.failureMessages.join('\n'));
    const ips: string[] = [];
    for (const name of names) {
      const pod = await node.pod('default', name);
      assert.equal(pod.status?.phase, 'Running');
      assert.match(pod.status?.podIP ?? '', new RegExp(`^${net.replace(/\./g, '\\.')}\\.\\d+$`), `${name}'s IP`);
      ips.push(pod.status.podIP!);
      const netns = await node.podNetns('default', name);
      assert.ok(netns.startsWith(root), `${name}'s netns ${netns} is under the node's root`);
    }
    assert.equal(new Set(ips).size, 3, `distinct IPs: ${ips.join(' ')}`);
    assert.equal(
      ip('-o', 'link', 'show', 'master', bridge).trim().split('\n').length,
      3,
      'one veth per pod on the bridge',
    );
  });

  it('stops leaving nothing: no link, netns, process, mount, host path or kernel setting of its own', async () => {
    const netns = node.netnsLeft();
    assert.equal(netns.length, 3, "the pods' namespaces, before");
    const problems = await node.stop();
    assert.deepEqual(problems, []);
    assert.deepEqual(hostLinksWithPrefix(prefix), []);
    assert.deepEqual(netnsNow(), netnsBefore);
    assert.deepEqual(
      netns.filter((p) => existsSync(p)),
      [],
    );
    assert.deepEqual(
      pids.filter((pid) => existsSync(`/proc/${pid}`)),
      [],
      'containerd and the kubelet',
    );
    assert.deepEqual(node.processesOfRoot(), []);
    assert.deepEqual(
      readFileSync('/proc/mounts', 'utf8')
        .split('\n')
        .filter((l) => l.includes(root)),
      [],
    );
    assert.equal(existsSync(root), false);
    assert.deepEqual(hostPathsNow(), hostBefore);
    assert.deepEqual(kernelNow(), kernelBefore);
  });
});
