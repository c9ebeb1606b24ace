/**
 * Plexus on a real node: the kubelet and containerd of SingleNode run plexus-cni as the node's only CNI plugin, and
 * plexusd (as the documented RBAC allows) reads the pods and NADs from the API. Pods get their networks (short and JSON
 * annotations), network-status matches their netns, a pod waiting for a NAD runs once it exists, a running pod's
 * networks follow `kubectl annotate`, static pods run with their mirror pods' networks, and deleting the pods leaves no
 * lease or journal record.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { ApiPods } from '../support/api-pods';
import type { DaemonFixture } from '../support/daemon';
import { type SingleNode, singleNodeMissing } from '../support/cluster/single-node';
import { ip, uniquePrefix } from '../support/netns';
import { expectedPrerequisites } from '../support/prerequisites';
import { PlexusNodeFixture } from '../support/plexus-node';
import { testBridges } from '../support/test-bridges';
import { until } from '../support/until';

const skip = expectedPrerequisites(singleNodeMissing());
const prefix = uniquePrefix('kp');
const NETWORKS = 'k8s.v1.cni.cncf.io/networks';
const bridges = testBridges(prefix, 100);

/** The pod's interfaces and IPv4 addresses, read in its netns. */
const addressesIn = (netns: string): Map<string, string> =>
  new Map(
    execFileSync('nsenter', [`--net=${netns}`, 'ip', '-o', '-4', 'addr', 'show'], { encoding: 'utf8' })
      .split('\n')
      .flatMap((l) => {
        const m = /^\d+: (\S+)\s+inet (\S+)\//.exec(l);
        return m && m[1] !== 'lo' ? [[m[1]!, m[2]!] as [string, string]] : [];
      }),
  );

describe('Plexus on a real kubelet + containerd node', { skip }, () => {
  const plexusNode = new PlexusNodeFixture();
  let node: SingleNode;
  let daemon: DaemonFixture;
  let pods: ApiPods;

  before(async () => {
    await plexusNode.start({ prefix: 'kp' });
    ({ node, daemon } = plexusNode);
    const api = node.api;
    for (const [name, i] of [
      ['podnet', 0],
      ['sec', 1],
      ['alt', 2],
    ] as const)
      assert.equal((await api.createNad('default', name, bridges.config(name, i))).status, 201);
    daemon.addSettings(plexusNode.apiSettings());
    pods = plexusNode.apiPods();
  });
  // plexusd serves the runtime's DELs while the node stops its sandboxes, then goes before the API server does.
  after(() => plexusNode.stop());

  it('runs pods with the networks their annotations select, network-status matching each netns', async () => {
    await daemon.start(30000);
    const short = await node.createPods(2, { namePrefix: 'short-', annotations: { [NETWORKS]: 'sec' } });
    const json = await node.createPods(1, {
      namePrefix: 'json-',
      annotations: { [NETWORKS]: JSON.stringify([{ name: 'alt', interface: 'data0' }, { name: 'sec' }]) },
    });
    const none = await node.createPods(1, { namePrefix: 'none-' });
    const timings = await node.waitAllRunning([...short, ...json, ...none], 120000);
    assert.equal(timings.sandboxFailures, 0, timings.failureMessages.join('\n'));
    const want: Record<string, string[]> = {
      [short[0]!]: ['eth0', 'net1'],
      [short[1]!]: ['eth0', 'net1'],
      [json[0]!]: ['eth0', 'data0', 'net2'], // net2: numbered by position, as Multus does
      [none[0]!]: ['eth0'],
    };
    for (const [name, interfaces] of Object.entries(want)) {
      const status = await pods.status('default', name, (s) => s.length === interfaces.length);
      assert.deepEqual(
        status.map((s) => s.interface),
        interfaces,
        `${name}'s network-status`,
      );
      const inNetns = addressesIn(await node.podNetns('default', name));
      for (const s of status)
        assert.deepEqual(s.ips, [inNetns.get(s.interface)], `${name} ${s.interface}: status and netns agree`);
      assert.equal(
        status
          .filter((s) => s.default)
          .map((s) => s.interface)
          .join(),
        'eth0',
      );
      const events = await pods.events(
        'default',
        name,
        (e) => e.filter((x) => x.reason === 'AddedInterface').length === interfaces.length,
      );
      assert.equal(
        events.filter((e) => e.reason === 'AddedInterface').length,
        interfaces.length,
        `${name}: one AddedInterface per interface`,
      );
    }
  });

  it('keeps a pod whose NAD does not exist yet waiting, says why, and runs it once the NAD is created', async () => {
    const [late] = await node.createPods(1, { namePrefix: 'late-', annotations: { [NETWORKS]: 'late' } });
    const warnings = await pods.events('default', late!, (e) => e.some((x) => x.reason === 'FailedAttachNetwork'));
    assert.match(
      warnings.find((e) => e.reason === 'FailedAttachNetwork')!.message,
      /network default\/late is not defined/,
    );
    assert.notEqual((await node.pod('default', late!)).status?.phase, 'Running');
    assert.equal((await node.api.createNad('default', 'late', bridges.config('late', 3))).status, 201);
    const timings = await node.waitAllRunning([late!], 120000);
    assert.equal(timings.pods, 1);
    assert.deepEqual(
      (await pods.status('default', late!, (s) => s.length === 2)).map((s) => s.name),
      ['default/podnet', 'default/late'],
    );
  });

  it("changes a running pod's networks when its annotation changes (kubectl annotate --overwrite)", async () => {
    const [pod] = await node.createPods(1, { namePrefix: 'plug-' });
    await node.waitAllRunning([pod!], 120000);
    const netns = await node.podNetns('default', pod!);
    await pods.annotate('default', pod!, NETWORKS, 'alt');
    const added = await pods.status('default', pod!, (s) => s.length === 2);
    assert.deepEqual(
      added.map((s) => `${s.name}@${s.interface}`),
      ['default/podnet@eth0', 'default/alt@net1'],
    );
    assert.equal(addressesIn(netns).get('net1'), added[1]!.ips[0]);
    await pods.annotate('default', pod!, NETWORKS, '');
    assert.deepEqual(
      (await pods.status('default', pod!, (s) => s.length === 1)).map((s) => s.interface),
      ['eth0'],
    );
    for (let i = 0; i < 50 && addressesIn(netns).has('net1'); i++) await sleep(100);
    assert.equal(addressesIn(netns).has('net1'), false);
    assert.equal((await node.pod('default', pod!)).status?.phase, 'Running', 'the pod was not restarted');
  });

  it("keeps running pods' interfaces across a restart of containerd, and the next ADD and DEL work", async () => {
    if (!daemon.alive) await daemon.start(30000);
    const [kept] = await node.createPods(1, { namePrefix: 'kept-', annotations: { [NETWORKS]: 'sec' } });
    await node.waitAllRunning([kept!], 120000);
    const netns = await node.podNetns('default', kept!);
    const before = addressesIn(netns);
    assert.deepEqual([...before.keys()].sort(), ['eth0', 'net1']);
    await node.restartContainerd();
    assert.equal(await node.podNetns('default', kept!), netns, 'the same sandbox, found again');
    assert.deepEqual(addressesIn(netns), before);
    const [next] = await node.createPods(1, { namePrefix: 'after-', annotations: { [NETWORKS]: 'sec' } });
    await node.waitAllRunning([next!], 120000);
    assert.deepEqual([...addressesIn(await node.podNetns('default', next!)).keys()].sort(), ['eth0', 'net1']);
    const journal = daemon.journalFiles().length;
    assert.equal((await node.call('DELETE', `/api/v1/namespaces/default/pods/${kept}`)).status, 200);
    await until(
      'the DEL of the pod made before the restart',
      () => (daemon.journalFiles().length < journal ? true : undefined),
      60000,
    );
  });

  it('runs static pods, with networks and without, with the networks of their mirror pods', async () => {
    const manifests = [`${prefix}-static-net`, `${prefix}-static-plain`];
    const mirrors = [node.writeStaticPod(manifests[0]!, { [NETWORKS]: 'sec' }), node.writeStaticPod(manifests[1]!)];
    try {
      for (const [mirror, interfaces] of [
        [mirrors[0]!, ['eth0', 'net1']],
        [mirrors[1]!, ['eth0']],
      ] as const) {
        const running = async (): Promise<true | undefined> =>
          (await node.pod('default', mirror).catch(() => undefined))?.status?.phase === 'Running' || undefined;
        await until(`static pod ${mirror} Running`, running, 120000, 250);
        const status = await pods.status('default', mirror, (s) => s.length === interfaces.length);
        assert.deepEqual(
          status.map((s) => s.interface),
          interfaces,
          `${mirror}'s network-status`,
        );
        assert.deepEqual([...addressesIn(await node.podNetns('default', mirror)).keys()].sort(), [...interfaces]);
      }
    } finally {
      for (const m of manifests) node.removeStaticPod(m);
    }
    const gone = async (): Promise<true | undefined> =>
      (await node.sandboxes()).some((s) => s.ready && mirrors.includes(s.name)) ? undefined : true;
    await until('the static pods stopped', gone, 120000, 250);
  });

  it('deleting every pod leaves no journal record and no lease', async () => {
    await node.deleteAllPods(120000);
    assert.deepEqual(daemon.journalFiles(), []);
    assert.deepEqual(
      ['podnet', 'sec', 'alt', 'late'].flatMap((n) => daemon.leases(n)),
      [],
    );
    assert.ok(
      ip('-n', node.netns, '-o', 'link', 'show')
        .split('\n')
        .every((l) => !l.includes(`${prefix}b`) || !/veth/.test(l)),
    );
  });
});
