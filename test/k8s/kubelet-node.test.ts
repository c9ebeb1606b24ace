/**
 * The single-node cluster itself (cluster/single-node.ts), with the reference bridge + host-local as the node's only
 * network: it runs the run's pair (the containerd $PLEXUS_STACK picks, with its config version, and the run's kubelet);
 * its pods run in the node's own network and mount namespaces, the host's kubelet and CNI paths untouched; a pod keeps
 * running, the same sandbox and address, through a kubelet restart and a containerd restart; and stop() leaves nothing
 * of the node: no process in its mount namespace or cgroups, no network namespace, link, mount or directory, no kernel
 * setting changed. What every cluster shares (nodes Ready, one kubelet socket per node) is test/cluster/fixture.test.ts's.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { SingleNode, singleNodeMissing } from '../support/cluster/single-node';
import { containerdMajor, containerdVersion } from '../support/containerd';
import { k8sBinary } from '../support/k8s';
import { hostLinksWithPrefix, ip, ipTry, uniquePrefix } from '../support/netns';
import { expectedPrerequisites } from '../support/prerequisites';
import { DEBIAN_PLUGINS } from '../support/plugin-dir';

const skip = expectedPrerequisites(singleNodeMissing());
const prefix = uniquePrefix('kn');
/** The pods' bridge, in the node's network namespace (the cluster's own host bridge is `${prefix}br`). */
const bridge = `${prefix}pods`;

/** A 10.x.y.0/24 that no host address or route mentions. */
function freeSubnet(): string {
  const used = `${ip('-o', '-4', 'addr', 'show')}\n${ip('-o', '-4', 'route', 'show', 'table', 'all')}`;
  for (;;) {
    const [x, y] = [100 + Math.floor(Math.random() * 100), Math.floor(Math.random() * 250)];
    if (!used.includes(`10.${x}.`)) return `10.${x}.${y}`;
  }
}

/**
 * Host paths the kubelet, containerd and the runtime's CNI config use, which the node has its own copy of. (The host's
 * /var/lib/cni and /run/netns other tests change meanwhile: the node's CNI cache and namespaces are looked for there
 * by name.)
 */
const HOST_PATHS = [
  '/var/lib/kubelet',
  '/var/log/pods',
  '/var/log/containers',
  '/etc/cni/net.d',
  '/opt/cni/bin',
  '/opt/containerd',
];
/** Every file under a host path, or undefined when the path is absent. */
const listing = (path: string): string[] | undefined =>
  existsSync(path) ? readdirSync(path, { recursive: true, encoding: 'utf8' }).sort() : undefined;
const hostPathsNow = (): Record<string, string[] | undefined> =>
  Object.fromEntries(HOST_PATHS.map((p) => [p, listing(p)]));
// The kubelet sets these at start (kernel.panic=10, panic_on_oops=1, ...): the cluster must put them back.
const KERNEL = [
  'vm/overcommit_memory',
  'vm/panic_on_oom',
  'kernel/panic',
  'kernel/panic_on_oops',
  'kernel/keys/root_maxkeys',
  'kernel/keys/root_maxbytes',
];
const kernelNow = (): string[] => KERNEL.map((k) => `${k}=${readFileSync(`/proc/sys/${k}`, 'utf8').trim()}`);
const hostNetns = (): string[] =>
  ip('netns', 'list')
    .split('\n')
    .map((l) => l.split(' ')[0] ?? '')
    .filter(Boolean);
/** The node's directory in each cgroup hierarchy (v1: /sys/fs/cgroup/<controller>/<node>) that still exists. */
const cgroupsOf = (name: string): string[] =>
  ['', ...readdirSync('/sys/fs/cgroup')].map((h) => join('/sys/fs/cgroup', h, name)).filter((d) => existsSync(d));
/** Whether a process runs (a zombie, killed but not yet reaped by PID 1, does not). */
const alive = (pid: number): boolean => {
  try {
    return !/^[ZX]/.test(readFileSync(`/proc/${pid}/stat`, 'utf8').replace(/^.*\) /s, ''));
  } catch {
    return false;
  }
};
const major = (version: string): number => Number(/(?:^|[^\d.])v?(\d+)\.\d+\.\d+/.exec(version)?.[1] ?? NaN);

interface PodState {
  podIP: string;
  sandboxId: string;
  restarts: number;
}

describe('the single-node cluster (one node in its own namespaces) with the reference bridge network', { skip }, () => {
  const net = freeSubnet();
  let node: SingleNode;
  let hostBefore: Record<string, string[] | undefined>;
  let kernelBefore: string[];
  let podsMade = 0;

  const makePods = async (n: number, namePrefix: string): Promise<string[]> => {
    const names = await node.createPods(n, { namePrefix });
    podsMade += n;
    const timings = await node.waitAllRunning(names, 60000);
    assert.equal(timings.sandboxFailures, 0, timings.failureMessages.join('\n'));
    return names;
  };
  /** A pod's address, its one sandbox (CRI) and its container's restarts. */
  const podState = async (name: string): Promise<PodState> => {
    const pod = (await node.call('GET', `/api/v1/namespaces/default/pods/${name}`)).body as {
      status?: { phase?: string; podIP?: string; containerStatuses?: { restartCount?: number }[] };
    };
    assert.equal(pod.status?.phase, 'Running', name);
    const sandboxes = (await node.sandboxes()).filter((s) => s.name === name);
    assert.equal(sandboxes.length, 1, `${name}'s sandboxes: ${JSON.stringify(sandboxes)}`);
    assert.ok(sandboxes[0]!.ready, `${name}'s sandbox is ready`);
    const restarts = pod.status?.containerStatuses?.[0]?.restartCount ?? NaN;
    return { podIP: pod.status?.podIP ?? '', sandboxId: sandboxes[0]!.id, restarts };
  };

  before(async () => {
    hostBefore = hostPathsNow();
    kernelBefore = kernelNow();
    node = await SingleNode.start({
      prefix,
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
  });
  after(async () => {
    await node?.stop();
  });

  it("runs the run's pair: this run's containerd (its config version) and kubelet", async () => {
    const server = /Server:[\s\S]*?Version:\s*(\S+)/.exec(node.ctr(['version']).out)?.[1] ?? '';
    assert.equal(
      major(server),
      containerdMajor(),
      `the node's containerd ${server}; the run's: ${containerdVersion()}`,
    );
    const config = readFileSync(join(node.dir, 'etc', 'containerd.toml'), 'utf8');
    assert.match(config, new RegExp(`^version = ${containerdMajor() >= 2 ? 3 : 2}$`, 'm'));
    const info = (
      (await node.call('GET', `/api/v1/nodes/${node.nodeName}`)).body as {
        status: { nodeInfo: { kubeletVersion: string; containerRuntimeVersion: string } };
      }
    ).status.nodeInfo;
    assert.equal(major(info.containerRuntimeVersion), containerdMajor(), info.containerRuntimeVersion);
    const kubelet = execFileSync(k8sBinary('kubelet')!, ['--version'], { encoding: 'utf8' });
    assert.equal(`Kubernetes ${info.kubeletVersion}`, kubelet.trim());
  });

  it("runs three pods in the node's namespaces, each with an address of the network's subnet and a port on the node's bridge", async () => {
    const names = await makePods(3, 'smoke-');
    const ips: string[] = [];
    for (const name of names) {
      const { podIP } = await podState(name);
      assert.match(podIP, new RegExp(`^${net.replace(/\./g, '\\.')}\\.\\d+$`), `${name}'s IP`);
      ips.push(podIP);
      const netns = await node.podNetns('default', name);
      assert.match(netns, /^\/proc\/\d+\/root\/run\/netns\/[^/]+$/, `${name}'s netns is in the node's /run/netns`);
      assert.ok(node.netnsLeft().includes(join('/run/netns', basename(netns))), `${name}'s netns among the node's`);
      assert.ok(!hostNetns().includes(basename(netns)), `${name}'s netns is not the host's`);
      const eth0 = execFileSync('nsenter', [`--net=${netns}`, 'ip', '-o', '-4', 'addr', 'show', 'eth0'], {
        encoding: 'utf8',
      });
      assert.ok(eth0.includes(`inet ${podIP}/`), `${name}'s eth0: ${eth0}`);
    }
    assert.equal(new Set(ips).size, 3, `distinct IPs: ${ips.join(' ')}`);
    const ports = ip('-n', node.netns, '-o', 'link', 'show', 'master', bridge).trim().split('\n');
    assert.equal(ports.length, 3, 'one veth per pod on the bridge');
    assert.notEqual(ipTry('link', 'show', bridge).status, 0, "the pods' bridge is not the host's");
  });

  it("leaves the host's kubelet, containerd and CNI paths as they were while it runs", async () => {
    const now = hostPathsNow();
    // A path absent before is the node's empty mount point now, as long as the cluster runs.
    for (const p of HOST_PATHS) assert.deepEqual(now[p] ?? [], hostBefore[p] ?? [], p);
    assert.ok(
      readFileSync('/proc/mounts', 'utf8')
        .split('\n')
        .every((l) => !l.includes(node.dir)),
      "the node's mounts are not the host's",
    );
    // containerd caches each sandbox's CNI result under /var/lib/cni/results: the node's, not the host's.
    const ids = (await node.sandboxes()).map((x) => x.id);
    const cached = (dir: string): string[] => (listing(dir) ?? []).filter((f) => ids.some((id) => f.includes(id)));
    const nodeCache = cached(join(dirname(node.node.hostLocalDataDir), 'results'));
    assert.deepEqual(
      ids.filter((id) => !nodeCache.some((f) => f.includes(id))),
      [],
      "every sandbox's result in the node's cache",
    );
    assert.deepEqual(cached('/var/lib/cni'), [], "the host's /var/lib/cni");
  });

  it('keeps a pod running, its sandbox and address the same, through a kubelet restart and a containerd restart', async () => {
    const [kept] = await makePods(1, 'kept-');
    const before = await podState(kept!);
    assert.equal(before.restarts, 0);
    const { kubelet, containerd } = node.pids;
    await node.restartKubelet();
    assert.notEqual(node.pids.kubelet, kubelet, 'a new kubelet');
    await makePods(1, 'after-kubelet-'); // the new kubelet has synced the node's pods
    assert.deepEqual(await podState(kept!), before, 'after the kubelet restart');
    await node.restartContainerd();
    assert.notEqual(node.pids.containerd, containerd, 'a new containerd');
    await makePods(1, 'after-containerd-'); // the kubelet has seen the new runtime's sandboxes
    assert.deepEqual(await podState(kept!), before, 'after the containerd restart');
  });

  it('stops leaving nothing: no process, network namespace, link, cgroup, mount, directory or kernel setting of its own', async () => {
    const { nodeName, dir } = node;
    const clusterDir = node.cluster.dir;
    const daemons = Object.values(node.pids);
    const processes = node.node.processes();
    for (const pid of daemons) assert.ok(processes.includes(pid), `daemon ${pid} among the node's processes`);
    assert.ok(processes.length > daemons.length + podsMade, `shims and pods too: ${processes.length} processes`);
    assert.equal(node.netnsLeft().length, podsMade, "the pods' namespaces, before");
    assert.ok(hostNetns().includes(nodeName), "the node's network namespace, before");
    assert.notDeepEqual(hostLinksWithPrefix(prefix), [], 'the uplinks and the bridge, before');

    assert.deepEqual(await node.stop(), []);
    assert.deepEqual(node.node.processes(), [], 'no process in its mount namespace or cgroups');
    assert.deepEqual(processes.filter(alive), [], 'its processes of before');
    assert.deepEqual(cgroupsOf(nodeName), []);
    assert.ok(!hostNetns().includes(nodeName), "the node's network namespace is gone");
    assert.deepEqual(hostLinksWithPrefix(prefix), [], 'uplinks and bridge gone');
    assert.deepEqual(
      readFileSync('/proc/mounts', 'utf8')
        .split('\n')
        .filter((l) => l.includes(clusterDir)),
      [],
    );
    assert.equal(existsSync(dir), false, "the node's root directory");
    assert.equal(existsSync(clusterDir), false, "the cluster's directory");
    assert.deepEqual(hostPathsNow(), hostBefore);
    assert.deepEqual(kernelNow(), kernelBefore);
  });
});
