/**
 * The Multus-style consumer on a real node (SingleNode with the scheduler and the controller-manager): a
 * second DRA driver (test/support/dra-test-driver.ts, not plexus.io) publishes a device whose slice attributes carry
 * k8s.cni.cncf.io/resourceName and k8s.cni.cncf.io/deviceID (a veth end the test made in the node's network
 * namespace). A pod claims that device through a ResourceClaimTemplate and asks for a host-device network whose NAD
 * names the same resource: plexusd, inside the node, reads the claim and the slice and moves that very device in as
 * net1; it returns to the node's namespace after the pod goes.
 * A claimed device of another resource does not serve the NAD: the attach fails naming the resource. plexusd runs
 * as the `plexus` user with deploy/10-rbac.yaml only (no --dra: consuming needs no plexus.io driver).
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { ApiPods } from '../support/api-pods';
import { DaemonFixture } from '../support/daemon';
import { create, podEvents } from '../support/dra-node';
import { DraTestDriver } from '../support/dra-test-driver';
import { k8sOlderThan, PLEXUS_USER, podnetBridge } from '../support/k8s';
import { PAUSE_IMAGE, plexusConflist } from '../support/kube-node';
import { SingleNode, singleNodeMissing } from '../support/cluster/single-node';
import { addNicStandIn, ip, ipTry, uniquePrefix } from '../support/netns';
import { until } from '../support/until';
import { expectedPrerequisites, optionalSkip } from '../support/prerequisites';
import { plexusPluginDir } from '../support/plugin-dir';

const missing = singleNodeMissing();
/** DRA (resource.k8s.io/v1) is served from 1.34 on: a pass on an older Kubernetes skips with that reason. */
const skip = expectedPrerequisites(missing) || optionalSkip(missing ? undefined : k8sOlderThan('1.34'));
const prefix = uniquePrefix('drc');
const DRIVER = 'nics.plexus-test.example';
const RESOURCE = 'example.com/fastnic';
const OTHER = 'example.com/slownic';
const NICS = [`${prefix}n0`, `${prefix}n1`];
const PEERS = [`${prefix}p0`, `${prefix}p1`];
const NS = 'default';
const NETWORKS = 'k8s.v1.cni.cncf.io/networks';
const o = 100 + Math.floor(Math.random() * 50);
const t = Math.floor(Math.random() * 200);

describe('a device another DRA driver allocated, given to the network whose NAD names its resource', { skip }, () => {
  let node: SingleNode;
  let daemon: DaemonFixture;
  let driver: DraTestDriver;
  let pods: ApiPods;
  let work: string;
  const macs = new Map<string, string>();

  const eventsOf = (name: string): Promise<string[]> => podEvents(node, NS, name);
  const phase = async (name: string): Promise<string | undefined> =>
    (await node.pod(NS, name).catch(() => undefined))?.status?.phase;
  /** A template for one device of the test driver, chosen by its deviceID attribute (CEL has no device name). */
  const template = (name: string, deviceID: string): unknown => ({
    apiVersion: 'resource.k8s.io/v1',
    kind: 'ResourceClaimTemplate',
    metadata: { name, namespace: NS },
    spec: {
      spec: {
        devices: {
          requests: [
            {
              name: 'nic',
              exactly: {
                deviceClassName: 'nics.plexus-test.example',
                selectors: [{ cel: { expression: `device.attributes["k8s.cni.cncf.io"].deviceID == "${deviceID}"` } }],
              },
            },
          ],
        },
      },
    },
  });
  /** A pod the scheduler places (with claims it must), on the network `network`. */
  const claimingPod = (name: string, templateName: string, network: string): unknown => ({
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, namespace: NS, annotations: { [NETWORKS]: network } },
    spec: {
      automountServiceAccountToken: false,
      enableServiceLinks: false,
      terminationGracePeriodSeconds: 1,
      resourceClaims: [{ name: 'nic', resourceClaimTemplateName: templateName }],
      containers: [
        { name: 'c', image: PAUSE_IMAGE, imagePullPolicy: 'Never', resources: { claims: [{ name: 'nic' }] } },
      ],
    },
  });
  const claimUidOf = async (pod: string): Promise<string> => {
    const got = await node.call('GET', `/api/v1/namespaces/${NS}/pods/${pod}`);
    const claim = (got.body as { status?: { resourceClaimStatuses?: { resourceClaimName: string }[] } }).status
      ?.resourceClaimStatuses?.[0];
    assert.ok(claim, `pod ${pod} has a claim in its status`);
    const c = await node.call(
      'GET',
      `/apis/resource.k8s.io/v1/namespaces/${NS}/resourceclaims/${claim.resourceClaimName}`,
    );
    return (c.body as { metadata: { uid: string } }).metadata.uid;
  };
  const deletePod = async (name: string): Promise<void> => {
    await node.call('DELETE', `/api/v1/namespaces/${NS}/pods/${name}`);
    await until(
      `pod ${name} gone from the API`,
      async () => ((await node.call('GET', `/api/v1/namespaces/${NS}/pods/${name}`)).status === 404 ? true : undefined),
      60000,
      200,
    );
  };
  /** Whether a link is in the node's own network namespace (the "host" of its pods). */
  const hostDevice = (name: string): boolean => ipTry('-n', node.netns, 'link', 'show', 'dev', name).status === 0;
  const macOf = (name: string): string | undefined =>
    /link\/ether (\S+)/.exec(ip('-n', node.netns, '-o', 'link', 'show', 'dev', name))?.[1];

  before(async () => {
    work = mkdtempSync(join(tmpdir(), 'plexus-drc-'));
    const binDir = join(work, 'bin');
    plexusPluginDir(binDir);
    daemon = new DaemonFixture('podnet');
    node = await SingleNode.start({ cniBinDir: binDir, cniConfList: plexusConflist(daemon.socket) });
    daemon.launcher = node.launcher;
    // veth ends in the node's namespace stand in for the driver's NICs; each peer, kept up there, gives its end
    // carrier. They go with the node's namespace.
    for (const [i, name] of NICS.entries()) {
      addNicStandIn(node.netns, name, PEERS[i]!);
      macs.set(name, macOf(name)!);
    }
    const api = node.api;
    const podnet = podnetBridge(`${prefix}b0`, `10.${o}.${t}.0/24`);
    assert.equal((await api.createNad(NS, 'podnet', podnet)).status, 201);
    const fast = JSON.stringify({
      cniVersion: '1.0.0',
      name: 'fast',
      type: 'host-device',
      ipam: { type: 'static', addresses: [{ address: `10.${o}.${t + 1}.5/24` }] },
    });
    const made = await api.request('POST', `/apis/k8s.cni.cncf.io/v1/namespaces/${NS}/network-attachment-definitions`, {
      apiVersion: 'k8s.cni.cncf.io/v1',
      kind: 'NetworkAttachmentDefinition',
      metadata: { name: 'fast', annotations: { 'k8s.v1.cni.cncf.io/resourceName': RESOURCE } },
      spec: { config: fast },
    });
    assert.equal(made.status, 201, JSON.stringify(made.body));
    driver = new DraTestDriver(DRIVER, node.kubeletRoot, node.nodeName, (m, p, b) => node.call(m, p, b));
    await driver.createDeviceClass('nics.plexus-test.example');
    await driver.publish([
      { name: 'nic0', deviceID: NICS[0]!, resourceName: RESOURCE },
      { name: 'nic1', deviceID: NICS[1]!, resourceName: OTHER },
    ]);
    await driver.start();
    daemon.addSettings({
      kubeconfig: node.nodeKubeconfig(PLEXUS_USER),
      nodeName: node.nodeName,
      cniBinDir: binDir,
      podResourcesSocket: join(node.kubeletRoot, 'pod-resources', 'kubelet.sock'),
      logLevel: 'info',
    });
    await daemon.start(30000);
    pods = new ApiPods(api, node.nodeName, () => {
      throw new Error('sandboxes come from the kubelet here');
    });
  });

  after(async () => {
    // The work directory goes even when stopping the node or a daemon fails; the links go with the node.
    try {
      await node?.stop({ runtimeStopped: () => daemon?.stop() });
      await daemon?.stop();
      await driver?.stop();
    } finally {
      if (work) rmSync(work, { recursive: true, force: true });
    }
  });

  it('the test driver registers with the kubelet under its own name', async () => {
    await until(
      "the kubelet's registration of the test driver",
      () => (driver.registrations.some((r) => r.plugin_registered) ? true : undefined),
      30000,
      100,
    );
    assert.deepEqual(
      driver.registrations.filter((r) => !r.plugin_registered),
      [],
    );
  });

  it("a pod claiming the driver's device runs with that device as the NAD's interface, moved in by plexusd", async () => {
    await create(node, template('fast0', NICS[0]!));
    const startedAt = Date.now();
    await create(node, claimingPod('drc-a', 'fast0', 'fast'));
    await until(
      'pod drc-a Running',
      async () => ((await phase('drc-a')) === 'Running' ? true : undefined),
      90000,
      200,
    ).catch(async (e: Error) =>
      assert.fail(`${e.message}: ${(await eventsOf('drc-a')).join(' | ')}\n${daemon.stderr.slice(-2000)}`),
    );
    console.log(`# pod claiming another driver's device: created to Running in ${Date.now() - startedAt} ms`);
    assert.ok(driver.prepared.includes(await claimUidOf('drc-a')), 'the kubelet had the test driver prepare the claim');
    const netns = await node.podNetns(NS, 'drc-a');
    const inPod = /link\/ether (\S+)/.exec(
      execFileSync('nsenter', [`--net=${netns}`, 'ip', '-o', 'link', 'show', 'dev', 'net1'], { encoding: 'utf8' }),
    )?.[1];
    assert.equal(inPod, macs.get(NICS[0]!), 'net1 in the pod is the claimed device');
    assert.equal(hostDevice(NICS[0]!), false, "it left the node's namespace");
    assert.equal(hostDevice(NICS[1]!), true, 'the unclaimed device stays');
    const status = await pods.status(NS, 'drc-a', (s) => s.length === 2);
    assert.deepEqual(
      status.map((s) => `${s.name}@${s.interface}`),
      ['default/podnet@eth0', 'default/fast@net1'],
    );
    assert.deepEqual(status[1]!.ips, [`10.${o}.${t + 1}.5`]);
  });

  it("after the pod goes the device is back in the node's namespace and the driver unprepared the claim", async () => {
    const claim = await claimUidOf('drc-a');
    await deletePod('drc-a');
    await until("the device back in the node's namespace", () => (hostDevice(NICS[0]!) ? true : undefined), 60000, 200);
    await until('the claim unprepared', () => (driver.unprepared.includes(claim) ? true : undefined), 60000, 200);
    assert.equal(macOf(NICS[0]!), macs.get(NICS[0]!));
  });

  it('a claimed device of another resource does not serve the NAD: the attach fails naming the resource', async () => {
    await create(node, template('slow1', NICS[1]!));
    await create(node, claimingPod('drc-b', 'slow1', 'fast'));
    const events = await until(
      'a FailedAttachNetwork event',
      async () => {
        const all = await eventsOf('drc-b');
        return all.some((e) => e.startsWith('FailedAttachNetwork')) ? all : undefined;
      },
      60000,
      250,
    );
    assert.match(
      events.find((e) => e.startsWith('FailedAttachNetwork'))!,
      /needs a device of example\.com\/fastnic/,
    );
    assert.notEqual(await phase('drc-b'), 'Running');
    assert.equal(hostDevice(NICS[1]!), true, 'the other device never moved');
    await deletePod('drc-b');
  });
});
