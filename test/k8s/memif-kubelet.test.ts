/**
 * A memif network on a real node (SingleNode: a cluster of one node, plexusd inside it) and a private OVS-DPDK: a pod
 * limited to one plexus.io/memif, on a network of type memif whose NAD names that resource, gets from the kubelet the
 * device plexusd's device plugin allocated (MEMIF_SOCKET, MEMIF_SECRET, the socket directory mounted), and the
 * switch gets one port serving exactly that device's host socket with exactly that secret: a memif client on the host
 * connects to it. network-status shows the socket as the pod sees it; deleting the pod removes the port.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { PodResourcesClient } from '../../src/deviceplugin/pod-resources';
import { memifPortName } from '../../src/drivers/memif';
import { ApiPods } from '../support/api-pods';
import type { DaemonFixture } from '../support/daemon';
import { type SingleNode, singleNodeMissing } from '../support/cluster/single-node';
import { uniquePrefix } from '../support/netns';
import { devarg, type OvsDpdkFixture, ovsDpdkMissing, unquote } from '../support/ovs-dpdk';
import { MemifNodeFixture } from '../support/memif-node';
import { Testpmd } from '../support/testpmd';
import { until } from '../support/until';
import { expectedPrerequisites } from '../support/prerequisites';

const nodeMissing = singleNodeMissing();
const ovsMissing = nodeMissing ? undefined : ovsDpdkMissing();
const skip = expectedPrerequisites(
  nodeMissing && `no real kubelet node here: ${nodeMissing}`,
  ovsMissing && `no private OVS-DPDK here: ${ovsMissing}`,
);
const prefix = uniquePrefix('mk');
const NETWORKS = 'k8s.v1.cni.cncf.io/networks';
const MEMIF = 'plexus.io/memif';

describe(
  "a memif network on a real node: the kubelet's memif device is the switch port's socket",
  { skip, timeout: 600_000 },
  () => {
    const memifNode = new MemifNodeFixture();
    let podResources: PodResourcesClient | undefined;
    let node: SingleNode;
    let daemon: DaemonFixture;
    let ovs: OvsDpdkFixture;
    let pods: ApiPods;
    let work: string;
    let bridge: string;

    const plexusPorts = (): string[] => memifNode.plexusPorts();
    before(async () => {
      await memifNode.start({
        prefix,
        resources: (dir) => [
          { name: MEMIF, kind: 'memif', count: 2, socketDir: join(dir, 'memif'), containerPath: '/run/memif' },
        ],
        memnetAnnotations: { 'k8s.v1.cni.cncf.io/resourceName': MEMIF },
      });
      ({ node, daemon, ovs, work, bridge } = memifNode);
      const api = node.api;
      podResources = new PodResourcesClient(join(node.kubeletRoot, 'pod-resources', 'kubelet.sock'));
      daemon.addSettings({
        ...memifNode.apiSettings(),
        devicePluginConfig: memifNode.resourcesFile,
        deviceInfoDir: join(work, 'devinfo'),
        podResourcesSocket: join(node.kubeletRoot, 'pod-resources', 'kubelet.sock'),
        logLevel: 'info',
      });
      pods = new ApiPods(api, node.nodeName, () => {
        throw new Error('sandboxes come from the kubelet here');
      });
      await daemon.start(30000);
      // A pod asking for a resource the node does not yet count fails admission: wait for the kubelet to publish it.
      await until(
        "plexus.io/memif in the node's allocatable",
        async () => {
          const r = await node.call('GET', `/api/v1/nodes/${node.nodeName}`);
          return (r.body as { status: { allocatable: Record<string, string> } }).status.allocatable[MEMIF] === '2'
            ? true
            : undefined;
        },
        60000,
      );
    });

    after(async () => {
      podResources?.close();
      await memifNode.stop();
    });

    let pod = '';
    let device = '';
    let hostSocket = '';
    let secret = '';
    let port = '';

    it("the pod gets MEMIF_SOCKET, MEMIF_SECRET and the device's socket directory from the kubelet", async () => {
      pod = (
        await node.createPods(1, {
          namePrefix: 'memif-',
          limits: { [MEMIF]: '1' },
          annotations: { [NETWORKS]: 'memnet' },
        })
      )[0]!;
      const timings = await node.waitAllRunning([pod], 60000);
      assert.equal(timings.sandboxFailures, 0, timings.failureMessages.join('\n'));
      const listed = await podResources!.devicesOf('default', pod);
      assert.ok(listed.ok, listed.ok ? '' : listed.error.message);
      const devices = listed.value.get(MEMIF) ?? [];
      assert.equal(devices.length, 1, `pod-resources lists ${devices.join(', ')}`);
      device = devices[0]!;
      assert.match(device, /^memif[01]$/);
      const spec = await node.containerSpec('default', pod);
      assert.equal(spec.env.get('MEMIF_SOCKET'), `/run/memif/${device}/memif.sock`);
      secret = spec.env.get('MEMIF_SECRET') ?? '';
      assert.match(secret, /^[A-Za-z0-9]{1,23}$/);
      const mount = spec.mounts.find((m) => m.destination === `/run/memif/${device}`);
      assert.equal(mount?.source, join(work, 'memif', device));
      hostSocket = join(work, 'memif', device, 'memif.sock');
    });

    it('the switch has one Plexus port, serving the host socket of the device the kubelet allocated with the secret the pod got', () => {
      const ports = plexusPorts();
      assert.equal(ports.length, 1, `Plexus ports on the switch: ${ports.join(' ')}`);
      port = ports[0]!;
      assert.deepEqual(ovs.ports(bridge), [port], `${port} is on ${bridge}`);
      memifNode.assertServes(port, hostSocket, secret);
      assert.equal(unquote(ovs.vsctl('get', 'Interface', port, 'options:n_rxq')), '2');
      assert.equal(unquote(ovs.vsctl('get', 'Interface', port, 'external_ids:plexus-pod')), `default/${pod}`);
      assert.equal(
        port,
        memifPortName(unquote(ovs.vsctl('get', 'Interface', port, 'external_ids:plexus-container-id')), 'eth0', 'net1'),
      );
      // The device plugin's own book agrees: the allocation on record is the one the port was made with.
      const book = JSON.parse(readFileSync(join(daemon.stateDir, 'devices', 'plexus.io_memif.json'), 'utf8')) as {
        devices: Record<string, { socket?: string; secret?: string }>;
      };
      assert.deepEqual(
        { socket: book.devices[device]?.socket, secret: book.devices[device]?.secret },
        { socket: hostSocket, secret },
      );
    });

    it('network-status has the memif interface, with device-info naming the socket as the pod sees it', async () => {
      const status = await pods.status('default', pod, (s) => s.length === 2);
      assert.deepEqual(
        status.map((s) => `${s.name}@${s.interface}`),
        ['default/podnet@eth0', 'default/memnet@net1'],
      );
      const entry = status[1] as unknown as { 'device-info'?: unknown };
      assert.deepEqual(entry['device-info'], {
        type: 'memif',
        version: '1.1.0',
        memif: { role: 'slave', mode: 'ethernet', path: `/run/memif/${device}/memif.sock` },
      });
    });

    it("a memif client with the pod's secret on the device's host socket gets the link up", async () => {
      await memifNode.assertLinkComesUp(port, hostSocket, secret);
    });

    it('a sandbox the kubelet makes again (its pause died) gets a new port on the same device socket and secret', async () => {
      const old = (await node.sandboxes()).find((s) => s.ready && s.name === pod);
      assert.ok(old, `a ready sandbox of ${pod}`);
      const task = node
        .ctr(['tasks', 'ls'])
        .out.split('\n')
        .map((l) => l.trim().split(/\s+/))
        .find((f) => f[0] === old.id);
      const pid = Number(task?.[1]);
      assert.ok(pid > 0, `the pause process of sandbox ${old.id}`);
      // The pause process of this test's own pod, by its PID: the kubelet sees the sandbox die and makes a new one.
      process.kill(pid, 'SIGKILL');
      const fresh = await until(
        'a new ready sandbox',
        async () => (await node.sandboxes()).find((s) => s.ready && s.name === pod && s.id !== old.id),
        60000,
      );
      const ports = await until("the new sandbox's port, and only it", () => {
        const p = plexusPorts();
        return p.length === 1 && p[0] !== port ? p : undefined;
      });
      const devargs = unquote(ovs.vsctl('get', 'Interface', ports[0]!, 'options:dpdk-devargs'));
      assert.equal(unquote(ovs.vsctl('get', 'Interface', ports[0]!, 'external_ids:plexus-container-id')), fresh.id);
      assert.equal(devarg(devargs, 'socket'), hostSocket);
      assert.equal(devarg(devargs, 'secret'), secret, 'the kubelet does not allocate again: the pod keeps its secret');
      port = ports[0]!;
      const client = await Testpmd.start({ socket: hostSocket, secret, rxq: 2, txq: 2 });
      await client.stop();
    });

    it('deleting the pod removes its port from the switch and leaves no journal record', async () => {
      await node.deleteAllPods(120000);
      assert.deepEqual(plexusPorts(), []);
      assert.deepEqual(ovs.ports(bridge), []);
      assert.deepEqual(daemon.journalFiles(), []);
    });

    it("the freed device serves the next pods: each port follows its own pod's device and new secret", async () => {
      // Two pods take both devices, so one of them is the device the deleted pod had.
      const names = await node.createPods(2, {
        namePrefix: 'again-',
        limits: { [MEMIF]: '1' },
        annotations: { [NETWORKS]: 'memnet' },
      });
      const timings = await node.waitAllRunning(names, 60000);
      assert.equal(timings.sandboxFailures, 0, timings.failureMessages.join('\n'));
      const byPod = new Map<string, { device: string; secret: string }>();
      for (const name of names) {
        const listed = await podResources!.devicesOf('default', name);
        assert.ok(listed.ok);
        const env = (await node.containerSpec('default', name)).env;
        byPod.set(name, { device: listed.value.get(MEMIF)?.[0] ?? '', secret: env.get('MEMIF_SECRET') ?? '' });
      }
      assert.deepEqual([...byPod.values()].map((d) => d.device).sort(), ['memif0', 'memif1']);
      const ports = plexusPorts();
      assert.equal(ports.length, 2, `Plexus ports: ${ports.join(' ')}`);
      for (const p of ports) {
        const owner = unquote(ovs.vsctl('get', 'Interface', p, 'external_ids:plexus-pod')).replace(/^default\//, '');
        const want = byPod.get(owner);
        assert.ok(want, `${p} belongs to ${owner}`);
        const devargs = unquote(ovs.vsctl('get', 'Interface', p, 'options:dpdk-devargs'));
        assert.equal(devarg(devargs, 'socket'), join(work, 'memif', want.device, 'memif.sock'));
        assert.equal(devarg(devargs, 'secret'), want.secret);
      }
      const reused = [...byPod.values()].find((d) => d.device === device)!;
      assert.notEqual(reused.secret, secret, 'a device allocated again gets a new secret');
      const client = await Testpmd.start({ socket: hostSocket, secret: reused.secret, rxq: 2, txq: 2 });
      await client.stop();
      await node.deleteAllPods(120000);
      assert.deepEqual(plexusPorts(), []);
    });

    it("a memif network hot-plugged into a running pod takes the pod's other device, not the one its first network uses", async () => {
      const [name] = await node.createPods(1, {
        namePrefix: 'plug-',
        limits: { [MEMIF]: '2' },
        annotations: { [NETWORKS]: 'memnet' },
      });
      const timings = await node.waitAllRunning([name!], 60000);
      assert.equal(timings.sandboxFailures, 0, timings.failureMessages.join('\n'));
      await pods.status('default', name!, (st) => st.length === 2);
      assert.equal(plexusPorts().length, 1);
      await pods.annotate('default', name!, NETWORKS, 'memnet, memnet@mem2');
      const status = await pods.status('default', name!, (st) => st.length === 3);
      assert.deepEqual(
        status.map((st) => `${st.name}@${st.interface}`),
        ['default/podnet@eth0', 'default/memnet@net1', 'default/memnet@mem2'],
      );
      const paths = status
        .slice(1)
        .map(
          (st) =>
            (st as unknown as { 'device-info'?: { memif?: { path?: string } } })['device-info']?.memif?.path ?? '',
        );
      const listed = await podResources!.devicesOf('default', name!);
      assert.ok(listed.ok);
      assert.deepEqual(
        paths.sort(),
        (listed.value.get(MEMIF) ?? []).map((d) => `/run/memif/${d}/memif.sock`).sort(),
        "each memif interface has one of the pod's two devices",
      );
      const sockets = plexusPorts()
        .map((p) => devarg(unquote(ovs.vsctl('get', 'Interface', p, 'options:dpdk-devargs')), 'socket'))
        .sort();
      assert.deepEqual(
        sockets,
        (listed.value.get(MEMIF) ?? []).map((d) => join(work, 'memif', d, 'memif.sock')).sort(),
        'two ports, one per device',
      );
      await node.deleteAllPods(120000);
      assert.deepEqual(plexusPorts(), []);
    });
  },
);
