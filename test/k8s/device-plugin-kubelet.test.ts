/**
 * plexusd as the kubelet's device plugin on a real node (SingleNode: kube-apiserver, containerd, kubelet): the
 * kubelet registers plexus.io/memif and a host-device pool (node capacity shows them), a pod limited to one memif
 * gets MEMIF_SOCKET, MEMIF_SECRET and its socket directory mounted (read from containerd's container spec), a pod on
 * a network whose NAD names the pool's resource gets exactly the device the kubelet allocated it (pod-resources),
 * health follows the link, a restarted kubelet gets the resources registered again, and a network added to a running
 * pod just after a kubelet restart still gets the pod's device.
 */
import { serviceOf, unary, unixTarget } from '../../src/kubelet/grpc';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import * as grpc from '@grpc/grpc-js';
import { podResourcesPackage } from '../../src/deviceplugin/api';
import { PodResourcesClient } from '../../src/deviceplugin/pod-resources';
import { readDeviceInfo } from '../../src/deviceplugin/device-info';
import { ApiPods } from '../support/api-pods';
import { DaemonFixture } from '../support/daemon';
import { plexusConflist } from '../support/kube-node';
import { SingleNode, singleNodeMissing } from '../support/cluster/single-node';
import { addNicStandIn, ip, ipTry, uniquePrefix } from '../support/netns';
import { until } from '../support/until';
import { expectedPrerequisites } from '../support/prerequisites';
import { podnetBridge } from '../support/k8s';
import { plexusPluginDir } from '../support/plugin-dir';

const skip = expectedPrerequisites(singleNodeMissing());
const prefix = uniquePrefix('dp');
const NETWORKS = 'k8s.v1.cni.cncf.io/networks';
const MEMIF = 'plexus.io/memif';
const NIC = 'plexus.io/testnic';
const NICS = [`${prefix}n0`, `${prefix}n1`];
const PEERS = [`${prefix}p0`, `${prefix}p1`];
const o = 100 + Math.floor(Math.random() * 50);
const t = Math.floor(Math.random() * 200);

describe("plexusd as the kubelet's device plugin on a real node", { skip }, () => {
  let node: SingleNode;
  let daemon: DaemonFixture;
  let work: string;
  let binDir: string;
  let pods: ApiPods;
  // The kubelet serves pod-resources under its --root-dir (device-plugins is the one path it hard-codes).
  let podResources: PodResourcesClient;
  const macs = new Map<string, string>();
  /** The kubelet's device-plugins directory (a path it hard-codes), as the host reaches the node's. */
  const pluginDir = (): string => join(node.kubeletRoot, 'device-plugins');
  /** Whether a link is in the node's network namespace (its "host"), not in a pod's. */
  const onNode = (link: string): boolean => ipTry('-n', node.netns, 'link', 'show', 'dev', link).status === 0;

  const nodeResources = async (): Promise<{
    capacity: Record<string, string>;
    allocatable: Record<string, string>;
  }> => {
    const r = await node.call('GET', `/api/v1/nodes/${node.nodeName}`);
    const status = (r.body as { status: { capacity: Record<string, string>; allocatable: Record<string, string> } })
      .status;
    return { capacity: status.capacity, allocatable: status.allocatable };
  };
  /** The devices the running kubelet knows (pod-resources GetAllocatableResources), per resource. */
  const allocatable = async (): Promise<Map<string, string[]>> => {
    const Lister = serviceOf(podResourcesPackage(), 'PodResourcesLister');
    const client = new Lister(
      unixTarget(join(node.kubeletRoot, 'pod-resources', 'kubelet.sock')),
      grpc.credentials.createInsecure(),
    );
    try {
      const reply = await unary<object, { devices?: { resource_name: string; device_ids?: string[] }[] }>(
        client,
        'GetAllocatableResources',
        {},
        2000,
      );
      const out = new Map<string, string[]>();
      for (const d of reply.devices ?? [])
        out.set(d.resource_name, [...(out.get(d.resource_name) ?? []), ...(d.device_ids ?? [])]);
      return out;
    } finally {
      client.close();
    }
  };
  before(async () => {
    work = mkdtempSync(join(tmpdir(), 'plexus-dp-'));
    binDir = join(work, 'bin');
    plexusPluginDir(binDir);
    writeFileSync(
      join(work, 'devices.yaml'),
      JSON.stringify({
        resources: [
          { name: MEMIF, kind: 'memif', count: 4, socketDir: join(work, 'memif'), containerPath: '/run/memif' },
          { name: NIC, kind: 'host-device', devices: NICS },
        ],
      }),
    );
    daemon = new DaemonFixture('podnet');
    node = await SingleNode.start({ cniBinDir: binDir, cniConfList: plexusConflist(daemon.socket), prefix });
    daemon.launcher = node.launcher; // plexusd runs on the node, where the kubelet and the pool's devices are
    // veth pairs in the node's namespace stand in for its NICs (no dummy module on the test kernels): the pool's end
    // goes to the pod; its peer, kept up on the node, gives it carrier. They go with the node's namespace.
    for (const [i, name] of NICS.entries()) {
      addNicStandIn(node.netns, name, PEERS[i]!);
      macs.set(
        name,
        (JSON.parse(ip('-n', node.netns, '-j', 'link', 'show', 'dev', name)) as { address: string }[])[0]!.address,
      );
    }
    podResources = new PodResourcesClient(join(node.kubeletRoot, 'pod-resources', 'kubelet.sock'));
    const api = node.api;
    const podnet = podnetBridge(`${prefix}b0`, `10.${o}.${t}.0/24`);
    assert.equal((await api.createNad('default', 'podnet', podnet)).status, 201);
    const fast = JSON.stringify({
      cniVersion: '1.0.0',
      name: 'fast',
      type: 'host-device',
      ipam: { type: 'static', addresses: [{ address: `10.${o}.${t + 1}.5/24` }] },
    });
    const made = await api.request(
      'POST',
      '/apis/k8s.cni.cncf.io/v1/namespaces/default/network-attachment-definitions',
      {
        apiVersion: 'k8s.cni.cncf.io/v1',
        kind: 'NetworkAttachmentDefinition',
        metadata: { name: 'fast', annotations: { 'k8s.v1.cni.cncf.io/resourceName': NIC } },
        spec: { config: fast },
      },
    );
    assert.equal(made.status, 201, JSON.stringify(made.body));
    daemon.addSettings({
      kubeconfig: node.nodeKubeconfig('plexus'),
      nodeName: node.nodeName,
      cniBinDir: binDir,
      devicePluginConfig: join(work, 'devices.yaml'),
      deviceInfoDir: join(work, 'devinfo'),
      podResourcesSocket: join(node.kubeletRoot, 'pod-resources', 'kubelet.sock'),
      logLevel: 'info',
    });
    pods = new ApiPods(api, node.nodeName, () => {
      throw new Error('sandboxes come from the kubelet here');
    });
  });

  after(async () => {
    podResources?.close();
    /** plexusd's sockets left in the kubelet's directory once it stopped (read before the node's files go). */
    let socketsLeft: string[] = [];
    const problems = await node?.stop({
      runtimeStopped: async () => {
        await daemon.stop();
        const dir = pluginDir();
        socketsLeft = existsSync(dir) ? readdirSync(dir).filter((f) => f.startsWith('plexus-')) : [];
      },
    });
    await daemon?.stop();
    if (work) rmSync(work, { recursive: true, force: true });
    assert.deepEqual(problems ?? [], []);
    assert.deepEqual(socketsLeft, [], 'plexusd removed its sockets when it stopped');
  });

  it("registers plexus.io/memif and the host-device pool: the node's capacity shows them", async () => {
    const startedAt = Date.now();
    await daemon.start(30000);
    const capacity = await until("the resources in the node's allocatable", async () => {
      const r = await nodeResources();
      return r.allocatable[MEMIF] === '4' && r.allocatable[NIC] === '2' ? r : undefined;
    });
    assert.equal(capacity.capacity[MEMIF], '4');
    assert.equal(capacity.capacity[NIC], '2');
    assert.ok(existsSync(join(pluginDir(), 'plexus-plexus.io-memif.sock')));
    console.log(`# plexusd start to both resources allocatable on the node: ${Date.now() - startedAt} ms`);
  });

  it('a pod limited to one memif gets MEMIF_SOCKET, MEMIF_SECRET and its socket directory mounted', async () => {
    const [pod] = await node.createPods(1, { namePrefix: 'memif-', limits: { [MEMIF]: '1' } });
    const timings = await node.waitAllRunning([pod!], 60000);
    assert.equal(timings.sandboxFailures, 0, timings.failureMessages.join('\n'));
    const listed = await podResources.devicesOf('default', pod!);
    assert.ok(listed.ok);
    const [device] = listed.value.get(MEMIF) ?? [];
    assert.match(device ?? '', /^memif[0-3]$/);
    const spec = await node.containerSpec('default', pod!);
    const env = spec.env;
    assert.equal(env.get('MEMIF_SOCKET'), `/run/memif/${device}/memif.sock`);
    assert.match(env.get('MEMIF_SECRET') ?? '', /^[A-Za-z0-9]{1,23}$/);
    const mount = spec.mounts.find((m) => m.destination === `/run/memif/${device}`);
    assert.equal(mount?.source, join(work, 'memif', device!));
    assert.ok(statSync(mount.source).isDirectory());
    assert.deepEqual(readDeviceInfo(join(work, 'devinfo'), MEMIF, device!), {
      type: 'memif',
      version: '1.1.0',
      memif: { role: 'slave', path: `/run/memif/${device}/memif.sock`, mode: 'ethernet' },
    });
  });

  it("a pod on a network naming the pool's resource gets the device the kubelet allocated it", async () => {
    const [pod] = await node.createPods(1, {
      namePrefix: 'nic-',
      limits: { [NIC]: '1' },
      annotations: { [NETWORKS]: 'fast' },
    });
    const timings = await node.waitAllRunning([pod!], 60000);
    assert.equal(timings.sandboxFailures, 0, timings.failureMessages.join('\n'));
    const listed = await podResources.devicesOf('default', pod!);
    assert.ok(listed.ok);
    const [device] = listed.value.get(NIC) ?? [];
    assert.ok(NICS.includes(device ?? ''), `pod-resources lists ${device}`);
    const netns = await node.podNetns('default', pod!);
    const inPod = /link\/ether (\S+)/.exec(
      execFileSync('nsenter', [`--net=${netns}`, 'ip', '-o', 'link', 'show', 'dev', 'net1'], { encoding: 'utf8' }),
    )?.[1];
    assert.equal(inPod, macs.get(device!), 'net1 in the pod is the device the kubelet allocated');
    assert.equal(onNode(device!), false, "it left the node's namespace");
    const status = await pods.status('default', pod!, (s) => s.length === 2);
    assert.deepEqual(
      status.map((s) => `${s.name}@${s.interface}`),
      ['default/podnet@eth0', 'default/fast@net1'],
    );
    assert.deepEqual(status[1]!.ips, [`10.${o}.${t + 1}.5`]);
    // What deviceID adds to an ADD: one pod-resources List (median of 20, this node's few pods), spaced out so the
    // kubelet's rate limit (a burst of 10) does not make plexusd's client wait and retry.
    const samples: number[] = [];
    for (let i = 0; i < 20; i++) {
      await sleep(100);
      const t0 = performance.now();
      assert.ok((await podResources.devicesOf('default', pod!)).ok);
      samples.push(performance.now() - t0);
    }
    samples.sort((a, b) => a - b);
    // A burst of 40 lookups at once (a node's worth of ADDs) shares Lists and is not refused by that rate limit.
    const t1 = performance.now();
    const burst = await Promise.all(Array.from({ length: 40 }, () => podResources.devicesOf('default', pod!)));
    assert.ok(burst.every((r) => r.ok && r.value.get(NIC)?.[0] === device));
    console.log(`# 40 concurrent deviceID lookups: ${(performance.now() - t1).toFixed(1)} ms`);
    console.log(
      `# pod-resources List (deviceID lookup per ADD): median ${samples[10]!.toFixed(2)} ms, max ${samples[19]!.toFixed(2)} ms`,
    );
    // In a pod, the device is not on the node, yet it stays healthy: both still allocatable-counted.
    await sleep(2500);
    assert.equal((await nodeResources()).allocatable[NIC], '2');
  });

  it('a pod that asks no device for such a network is refused with a message naming the resource', async () => {
    const [pod] = await node.createPods(1, { namePrefix: 'nodev-', annotations: { [NETWORKS]: 'fast' } });
    const events = await pods.events('default', pod!, (e) => e.some((x) => x.reason === 'FailedAttachNetwork'));
    assert.match(
      events.find((e) => e.reason === 'FailedAttachNetwork')!.message,
      /network default\/fast \(net1\) needs a device of plexus\.io\/testnic .* allocated pod default\/nodev-0 0 for 1 network/,
    );
    await node.call('DELETE', `/api/v1/namespaces/default/pods/${pod}`);
  });

  it('health follows the link: a pool device taken down is not allocatable until it is up again', async () => {
    const free = NICS.find(onNode)!;
    ip('-n', node.netns, 'link', 'set', 'dev', free, 'down');
    await until('allocatable to drop to 1', async () =>
      (await nodeResources()).allocatable[NIC] === '1' ? true : undefined,
    );
    ip('-n', node.netns, 'link', 'set', 'dev', free, 'up');
    await until('allocatable back to 2', async () =>
      (await nodeResources()).allocatable[NIC] === '2' ? true : undefined,
    );
  });

  it('registers again when the kubelet restarts (it wipes the device-plugins directory)', async () => {
    const registrations = (): number[] =>
      daemon.stderr
        .split('\n')
        .filter((l) => l.includes('registered with the kubelet'))
        .map((l) => (JSON.parse(l) as { time: number }).time);
    const before = registrations().length;
    const spawnedAt = await node.restartKubelet();
    const again = await until(
      'plexusd to register both resources again',
      () => (registrations().length >= before + 2 ? registrations().slice(before) : undefined),
      60000,
    );
    // The new kubelet's own word (the node object keeps the old allocatable until the kubelet posts its status).
    await until(
      'the new kubelet to know every device again',
      async () => {
        const known = await allocatable().catch(() => undefined);
        return known?.get(MEMIF)?.length === 4 && known.get(NIC)?.length === 2 ? true : undefined;
      },
      60000,
    );
    // The pods' devices survive the restart (the kubelet's checkpoint), and new pods get devices.
    const kept = await podResources.devicesOf('default', 'memif-0');
    assert.ok(
      kept.ok && kept.value.get(MEMIF)?.length === 1,
      kept.ok ? JSON.stringify([...kept.value]) : kept.error.message,
    );
    const [pod] = await node.createPods(1, { namePrefix: 'after-', limits: { [MEMIF]: '1' } });
    await node.waitAllRunning([pod!], 60000);
    console.log(`# kubelet spawned to plexusd registered again: ${Math.max(...again) - spawnedAt} ms (both resources)`);
  });

  it('a network added to a running pod just after a kubelet restart gets the device the kubelet allocated the pod', async () => {
    // A restarted kubelet lists no pods in pod-resources for about a second (its socket first missing, then an empty
    // List until its pod sources sync): plexusd's device lookup waits for the pod instead of failing the change.
    const [pod] = await node.createPods(1, { namePrefix: 'spare-', limits: { [NIC]: '1' } });
    await node.waitAllRunning([pod!], 60000);
    const held = await podResources.devicesOf('default', pod!);
    assert.ok(held.ok);
    const [device] = held.value.get(NIC) ?? [];
    assert.ok(NICS.includes(device ?? ''), `pod-resources lists ${device}`);
    await node.restartKubelet();
    await pods.annotate('default', pod!, NETWORKS, 'fast');
    const status = await pods.status('default', pod!, (s) => s.length === 2, 400);
    const events = await pods.events('default', pod!, () => true);
    const failed = events.filter((e) => e.reason === 'FailedAttachNetwork').map((e) => e.message);
    assert.deepEqual(failed, []);
    assert.deepEqual(
      status.map((s) => `${s.name}@${s.interface}`),
      ['default/podnet@eth0', 'default/fast@net1'],
    );
    const netns = await node.podNetns('default', pod!);
    const inPod = /link\/ether (\S+)/.exec(
      execFileSync('nsenter', [`--net=${netns}`, 'ip', '-o', 'link', 'show', 'dev', 'net1'], { encoding: 'utf8' }),
    )?.[1];
    assert.equal(inPod, macs.get(device!), 'net1 is the device the kubelet allocated the pod');
  });

  it('deleting the pods returns the device to the node, up and allocatable again, and leaves no journal record', async () => {
    await node.deleteAllPods(120000);
    for (const name of NICS) assert.ok(onNode(name), `${name} is back in the node's namespace`);
    assert.deepEqual(daemon.journalFiles(), []);
    // It was up when its pod took it: it is up again, so the pool has both devices for the next pods.
    await until('both pool devices allocatable again', async () =>
      (await nodeResources()).allocatable[NIC] === '2' ? true : undefined,
    );
  });
});
