/**
 * Many networks per pod through the real shim and daemon: selection in both forms, naming, native and
 * delegated drivers (Debian's reference plugins), default-route, network-status, rollback and DEL.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readdirSync, symlinkSync, unlinkSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { after, before, describe, it, type TestContext } from 'node:test';
import { hostVethName } from '../../src/drivers/bridge';
import { DaemonFixture, podArgs, podMaker, ROOT, type TestPod } from '../support/daemon';
import { restoreForwardingAfterwards } from '../support/forwarding';
import { hostLinksWithPrefix, ip, ipTry, NetnsFixture, podLinks, uniquePrefix } from '../support/netns';
import { referencePluginDir } from '../support/plugin-dir';

const prefix = uniquePrefix('pn');
const fx = new NetnsFixture(prefix);
const o = 200 + Math.floor(Math.random() * 50);
const t = Math.floor(Math.random() * 200);
const subnet = (i: number): string => `10.${o}.${t + i}.0/24`;
const gateway = (i: number): string => `10.${o}.${t + i}.1`;

// A CNI bin dir with Debian's plugins plus the fail-on-demand test double.
const daemonBase = new DaemonFixture('podnet');
const binDir = join(daemonBase.dir, 'cni-bin');
const hostLocalDir = join(daemonBase.dir, 'host-local');
const daemon = new DaemonFixture('podnet', { cniBinDir: binDir });
const uplink = `${prefix}up`;

function nad(name: string, config: Record<string, unknown>, annotations: Record<string, string> = {}): void {
  daemon.writeNad(
    `${name}.json`,
    JSON.stringify({
      apiVersion: 'k8s.cni.cncf.io/v1',
      kind: 'NetworkAttachmentDefinition',
      metadata: { name, namespace: 'default', annotations },
      spec: { config: JSON.stringify({ cniVersion: '1.0.0', name, ...config }) },
    }),
  );
}
const hostLocal = (i: number): Record<string, unknown> => ({
  type: 'host-local',
  ranges: [[{ subnet: subnet(i) }]],
  dataDir: hostLocalDir,
});

restoreForwardingAfterwards();

before(async () => {
  referencePluginDir(binDir);
  symlinkSync(join(ROOT, 'test/fixtures/fail-plugin'), join(binDir, 'fail-plugin'));
  for (const l of ['br0', 'br1', 'br2', 'up', 'upp']) fx.trackHostLink(`${prefix}${l}`);
  ip('link', 'add', uplink, 'type', 'veth', 'peer', 'name', `${prefix}upp`);
  ip('link', 'set', uplink, 'up');
  ip('link', 'set', `${prefix}upp`, 'up');
  daemon.writeBridgeNetwork({ name: 'podnet', bridge: `${prefix}br0`, subnet: subnet(0) });
  nad('blue', {
    type: 'bridge',
    bridge: `${prefix}br1`,
    isGateway: true,
    capabilities: { ips: true, mac: true },
    ipam: { type: 'host-local', ranges: [[{ subnet: subnet(1) }]] },
  });
  nad('mv', {
    type: 'macvlan',
    master: uplink,
    mode: 'bridge',
    ipam: { type: 'host-local', ranges: [[{ subnet: subnet(2) }]] },
  });
  nad('ptpnet', { type: 'ptp', ipam: hostLocal(3) }, { 'plexus.io/delegate': 'true' }); // ptp is also native: these tests are about delegation
  nad('forced', { type: 'bridge', bridge: `${prefix}br2`, ipam: hostLocal(4) }, { 'plexus.io/delegate': 'true' });
  daemon.writeNad(
    'chain.json',
    JSON.stringify({
      apiVersion: 'k8s.cni.cncf.io/v1',
      kind: 'NetworkAttachmentDefinition',
      metadata: { name: 'chain' },
      spec: {
        config: JSON.stringify({
          cniVersion: '1.0.0',
          name: 'chain',
          plugins: [
            { type: 'ptp', ipam: hostLocal(5) },
            { type: 'tuning', mtu: 1280 },
          ],
        }),
      },
    }),
  );
  nad('failnet', { type: 'fail-plugin', failOn: 'ADD' });
  nad('ptpnative', { type: 'ptp', ipam: { type: 'host-local', ranges: [[{ subnet: subnet(6) }]] } });
  // One macvlan config run natively and delegated, with and without declared capabilities.
  const macvlanOn = (i: number, delegated: boolean): Record<string, unknown> => ({
    type: 'macvlan',
    master: uplink,
    mode: 'bridge',
    ipam: delegated ? hostLocal(i) : { type: 'host-local', ranges: [[{ subnet: subnet(i) }]] },
  });
  const staticMacvlan = { type: 'macvlan', master: uplink, mode: 'bridge', ipam: { type: 'static' } };
  nad('route1', staticMacvlan);
  nad('route1d', staticMacvlan, { 'plexus.io/delegate': 'true' });
  nad('capable', { ...macvlanOn(9, false), capabilities: { ips: true, mac: true } });
  nad('capabled', { ...macvlanOn(10, true), capabilities: { ips: true, mac: true } }, { 'plexus.io/delegate': 'true' });
  await daemon.start();
});
after(async () => {
  await daemon.stop();
  await daemonBase.stop();
  fx.cleanup();
});

type Pod = TestPod;
const newPod = podMaker(fx, prefix, ['eth0', 'net1', 'net2', 'net3', 'data0']);
const withNetworks = (annotation: string, cniVersion = '1.1.0'): Record<string, unknown> =>
  daemon.runtimeConfig(
    { runtimeConfig: { 'io.kubernetes.cri.pod-annotations': { 'k8s.v1.cni.cncf.io/networks': annotation } } },
    cniVersion,
  );
const add = (pod: Pod, annotation: string, cniVersion?: string) =>
  daemon.cni({
    command: 'ADD',
    containerId: pod.cid,
    netns: pod.netns,
    ifname: 'eth0',
    args: podArgs(pod.name, pod.cid),
    config: withNetworks(annotation, cniVersion),
  });
const del = (pod: Pod, netns = pod.netns) =>
  daemon.cni({
    command: 'DEL',
    containerId: pod.cid,
    netns,
    ifname: 'eth0',
    args: podArgs(pod.name, pod.cid),
    config: daemon.runtimeConfig(),
  });
const ctlJson = async (...args: string[]): Promise<unknown> =>
  JSON.parse(
    (await promisify(execFile)(join(ROOT, 'bin/plexusctl'), ['--socket', daemon.socket, '-o', 'json', ...args])).stdout,
  );
const delegatedLeases = (network: string): string[] => {
  try {
    return readdirSync(join(hostLocalDir, network)).filter((f) => /^\d/.test(f));
  } catch {
    return [];
  }
};
const podAddress = (pod: Pod, ifname: string): string =>
  ip('-n', pod.ns, '-o', '-4', 'addr', 'show', ifname).match(/inet (\S+)/)?.[1] ?? '';

interface AddResult {
  cniVersion: string;
  interfaces: { name: string; mac?: string; sandbox?: string }[];
  ips: { address: string; interface?: number; version?: string }[];
  routes: { dst: string; gw?: string }[];
}

describe('a pod with four networks (short form)', () => {
  /** A pod of the test's own on the four networks, its ADD checked; DELed after the test. */
  async function fourNetworkPod(ctx: TestContext): Promise<{ pod: Pod; result: AddResult }> {
    const pod = newPod();
    ctx.after(() => del(pod));
    const out = await add(pod, 'blue, default/mv@data0, ptpnet');
    assert.equal(out.code, 0, out.stdout);
    return { pod, result: out.json as unknown as AddResult };
  }

  it('gets eth0 first, then net1, an explicit data0 and net3 (numbered by position, as Multus does), each configured in its netns', async (ctx) => {
    const { pod, result } = await fourNetworkPod(ctx);
    const podIfs = result.interfaces.filter((i) => i.sandbox === pod.netns).map((i) => i.name);
    assert.deepEqual(podIfs, ['eth0', 'net1', 'data0', 'net3']);
    for (const ifname of podIfs) assert.match(podAddress(pod, ifname), /^10\./, `${ifname} has an IPv4 address`);
    assert.match(podAddress(pod, 'net1'), new RegExp(`^10\\.${o}\\.${t + 1}\\.`));
    assert.match(podAddress(pod, 'data0'), new RegExp(`^10\\.${o}\\.${t + 2}\\.`));
    assert.match(podAddress(pod, 'net3'), new RegExp(`^10\\.${o}\\.${t + 3}\\.`));
    assert.match(ip('-n', pod.ns, '-d', 'link', 'show', 'data0'), /macvlan mode bridge/);
  });

  it('reports every IP against the right pod interface in the result', async (ctx) => {
    const { result } = await fourNetworkPod(ctx);
    for (const entry of result.ips) {
      const iface = result.interfaces[entry.interface ?? -1];
      assert.ok(iface?.sandbox, `ip ${entry.address} points at a pod interface`);
    }
    assert.equal(result.ips.length, 4);
  });

  it('records network-status with one default entry, namespaced names, IPs and MACs', async (ctx) => {
    const { pod } = await fourNetworkPod(ctx);
    const [record] = (await ctlJson('show', pod.cid)) as {
      details: {
        networkStatus: { name: string; interface: string; ips: string[]; mac?: string; default?: true }[];
        attachments: { driver: string }[];
      };
    }[];
    const status = record!.details.networkStatus;
    assert.deepEqual(
      status.map((s) => [s.name, s.interface, s.default === true]),
      [
        ['default/podnet', 'eth0', true],
        ['default/blue', 'net1', false],
        ['default/mv', 'data0', false],
        ['default/ptpnet', 'net3', false],
      ],
    );
    for (const s of status) {
      assert.equal(s.ips.length, 1);
      assert.match(s.mac ?? '', /^([0-9a-f]{2}:){5}[0-9a-f]{2}$/);
    }
    assert.deepEqual(
      record!.details.attachments.map((a) => a.driver),
      ['bridge', 'bridge', 'macvlan', 'delegate'],
    );
  });

  it('passes traffic on every network', async (ctx) => {
    const { pod, result } = await fourNetworkPod(ctx);
    const peer = newPod();
    const out = await add(peer, 'blue, default/mv@data0, ptpnet');
    assert.equal(out.code, 0, out.stdout);
    try {
      for (const ifname of ['eth0', 'net1', 'data0']) {
        const target = podAddress(peer, ifname).split('/')[0]!;
        const ping = ipTry('netns', 'exec', pod.ns, 'ping', '-c', '1', '-W', '2', '-I', ifname, target);
        assert.equal(ping.status, 0, `ping over ${ifname}: ${ping.out}`);
      }
      // ptp is point-to-point with the host: the pod reaches its ptp gateway (the host side).
      const ptpGw = String(result.ips.find((i) => i.address.startsWith(`10.${o}.${t + 3}.`))?.address)
        .split('/')[0]!
        .replace(/\.\d+$/, '.1');
      assert.equal(
        ipTry('netns', 'exec', pod.ns, 'ping', '-c', '1', '-W', '2', ptpGw).status,
        0,
        'ping over the delegated ptp network',
      );
    } finally {
      assert.equal((await del(peer)).code, 0);
    }
  });

  it('DEL tears every network down, delegated host-local leases included', async (ctx) => {
    const { pod } = await fourNetworkPod(ctx);
    const out = await del(pod);
    assert.equal(out.code, 0, out.stdout);
    assert.equal(ipTry('-n', pod.ns, 'link', 'show', 'data0').status, 1);
    assert.deepEqual(hostLinksWithPrefix(hostVethName(pod.cid, 'eth0', 'net1')), []);
    assert.deepEqual(delegatedLeases('ptpnet'), []);
    assert.deepEqual(daemon.leases('blue'), []);
    assert.deepEqual(daemon.leases('mv'), []);
  });
});

describe('selection options', () => {
  // Multus's own default-route1 scenario (e2e/templates/default-route1.yml.j2 at v4.3.0): macvlan with static IPAM
  // and no capabilities; Multus passes the selection's ips and mac as CNI_ARGS IP= and MAC= whatever they declare.
  for (const [name, how] of [
    ['route1', 'natively'],
    ['route1d', 'delegated'],
  ] as const) {
    it(`"ips" on a NAD declaring no capability is the pod's address, with default-route via its gateway, ${how}`, async () => {
      const pod = newPod();
      const out = await add(pod, JSON.stringify([{ name, ips: ['10.1.1.21/24'], 'default-route': ['10.1.1.254'] }]));
      assert.equal(out.code, 0, out.stdout);
      assert.equal(podAddress(pod, 'net1'), '10.1.1.21/24');
      assert.match(ip('-n', pod.ns, 'route', 'show', 'default'), /^default via 10\.1\.1\.254 dev net1/);
      assert.equal((await del(pod)).code, 0);
      assert.equal(podLinks(pod.ns).length, 0);
    });

    it(`"mac" on a NAD declaring no capability is the interface's MAC, ${how}`, async () => {
      const pod = newPod();
      const out = await add(pod, JSON.stringify([{ name, ips: ['10.1.1.22/24'], mac: '02:aa:bb:cc:dd:01' }]));
      assert.equal(out.code, 0, out.stdout);
      assert.match(ip('-n', pod.ns, 'link', 'show', 'net1'), /link\/ether 02:aa:bb:cc:dd:01 /);
      assert.equal((await del(pod)).code, 0);
    });
  }

  for (const [name, i, how] of [
    ['capable', 9, 'natively'],
    ['capabled', 10, 'delegated'],
  ] as const) {
    it(`ips and mac on a network whose config declares them are honoured, ${how}`, async () => {
      const pod = newPod();
      const wanted = `10.${o}.${t + i}.77/24`;
      const out = await add(pod, JSON.stringify([{ name, ips: [wanted], mac: '02:aa:bb:cc:dd:02' }]));
      assert.equal(out.code, 0, out.stdout);
      assert.equal(podAddress(pod, 'net1'), wanted);
      assert.match(ip('-n', pod.ns, 'link', 'show', 'net1'), /02:aa:bb:cc:dd:02/);
      assert.equal((await del(pod)).code, 0);
    });
  }

  it('JSON form: ips and mac go to a network whose config declares them', async () => {
    const pod = newPod();
    const wanted = `10.${o}.${t + 1}.77/24`;
    const out = await add(
      pod,
      JSON.stringify([{ name: 'blue', interface: 'blue0', ips: [wanted], mac: '02:aa:bb:cc:dd:ee' }]),
    );
    assert.equal(out.code, 0, out.stdout);
    assert.equal(podAddress(pod, 'blue0'), wanted);
    assert.match(ip('-n', pod.ns, 'link', 'show', 'blue0'), /02:aa:bb:cc:dd:ee/);
    assert.equal((await del(pod)).code, 0);
  });

  it('default-route moves the pod default route to the chosen network and off eth0', async () => {
    const pod = newPod();
    const out = await add(pod, JSON.stringify([{ name: 'blue', 'default-route': [gateway(1)] }]));
    assert.equal(out.code, 0, out.stdout);
    const routes = ip('-n', pod.ns, 'route', 'show', 'default');
    assert.match(routes, new RegExp(`default via ${gateway(1).replace(/\./g, '\\.')} dev net1`));
    assert.doesNotMatch(routes, /dev eth0/);
    const r = out.json as unknown as AddResult;
    assert.deepEqual(
      r.routes.filter((x) => x.dst === '0.0.0.0/0').map((x) => x.gw),
      [gateway(1)],
    );
    const [record] = (await ctlJson('show', pod.cid)) as {
      details: { networkStatus: { name: string; default?: true }[] };
    }[];
    assert.deepEqual(
      record!.details.networkStatus.filter((s) => s.default).map((s) => s.name),
      ['default/podnet'],
      'default marks the cluster network',
    );
    assert.equal((await del(pod)).code, 0);
  });

  it('IP= and MAC= in CNI_ARGS (podman) apply to the default network only, not to delegated secondary networks', async () => {
    const pod = newPod();
    const wanted = `10.${o}.${t}.233`;
    const out = await daemon.cni({
      command: 'ADD',
      containerId: pod.cid,
      netns: pod.netns,
      ifname: 'eth0',
      args: `IgnoreUnknown=1;IP=${wanted};MAC=02:01:02:03:04:05`,
      config: withNetworks('ptpnet'),
    });
    assert.equal(out.code, 0, out.stdout);
    assert.equal(podAddress(pod, 'eth0'), `${wanted}/24`);
    assert.match(podAddress(pod, 'net1'), new RegExp(`^10\\.${o}\\.${t + 3}\\.`));
    assert.doesNotMatch(ip('-n', pod.ns, 'link', 'show', 'net1'), /02:01:02:03:04:05/);
    assert.equal((await del(pod)).code, 0);
  });

  it('a NAD annotation forces delegation of a natively supported type', async () => {
    const pod = newPod();
    const out = await add(pod, 'forced');
    assert.equal(out.code, 0, out.stdout);
    const [record] = (await ctlJson('show', pod.cid)) as {
      details: { attachments: { network: string; driver: string }[] };
    }[];
    assert.deepEqual(
      record!.details.attachments.map((a) => a.driver),
      ['bridge', 'delegate'],
    );
    assert.equal(delegatedLeases('forced').length, 1);
    assert.equal((await del(pod)).code, 0);
    assert.deepEqual(delegatedLeases('forced'), []);
  });

  it('a delegated conflist chains its plugins (tuning sets the MTU after ptp)', async () => {
    const pod = newPod();
    const out = await add(pod, 'chain');
    assert.equal(out.code, 0, out.stdout);
    assert.match(ip('-n', pod.ns, 'link', 'show', 'net1'), /mtu 1280/);
    const check = await daemon.cni({
      command: 'CHECK',
      containerId: pod.cid,
      netns: pod.netns,
      ifname: 'eth0',
      config: daemon.runtimeConfig(),
    });
    assert.equal(check.code, 0, `CHECK forwarded to the chain: ${check.stdout}`);
    // Only the chain's own CHECK (tuning's) knows the MTU it set: a change behind its back must fail CHECK.
    ip('-n', pod.ns, 'link', 'set', 'net1', 'mtu', '1400');
    const drifted = await daemon.cni({
      command: 'CHECK',
      containerId: pod.cid,
      netns: pod.netns,
      ifname: 'eth0',
      config: daemon.runtimeConfig(),
    });
    assert.equal(drifted.code, 1, drifted.stdout);
    assert.match(String(drifted.json?.msg), /CHECK of network default\/chain \(net1\).*tuning/);
    assert.equal((await del(pod)).code, 0);
    assert.deepEqual(delegatedLeases('chain'), []);
  });

  it('results convert to older spec versions for a multi-network pod', async () => {
    const pod = newPod();
    const out = await add(pod, 'blue', '0.4.0');
    assert.equal(out.code, 0, out.stdout);
    const r = out.json as unknown as AddResult;
    assert.equal(r.cniVersion, '0.4.0');
    assert.ok(r.ips.every((i) => i.version === '4'));
    assert.equal(r.ips.length, 2);
    assert.equal((await del(pod)).code, 0);
  });
});

describe('failures', () => {
  const leftovers = (pod: Pod): unknown => ({
    hostVeths: ['eth0', 'net1', 'net2', 'net3'].flatMap((i) => hostLinksWithPrefix(hostVethName(pod.cid, 'eth0', i))),
    podLinks: podLinks(pod.ns).length,
    leases: [
      ...daemon.leases('podnet'),
      ...daemon.leases('blue'),
      ...daemon.leases('mv'),
      ...delegatedLeases('ptpnet'),
    ],
    journal: daemon.journalFiles().filter((f) => f.startsWith(pod.cid)),
  });
  const nothing = { hostVeths: [], podLinks: 0, leases: [], journal: [] };

  it('a failure in the last of five attachments (native, macvlan and delegated before it) undoes all of them: no link, no IP, no journal entry', async () => {
    const pod = newPod();
    const out = await add(pod, 'blue, mv, ptpnet, failnet');
    assert.equal(out.code, 1, out.stdout);
    assert.equal(out.json?.code, 117);
    assert.match(String(out.json?.msg), /failnet as net4.*failing on demand/);
    assert.deepEqual(leftovers(pod), nothing);
  });

  it('an invalid annotation fails the ADD naming the element, before anything is made', async () => {
    const pod = newPod();
    const out = await add(pod, 'blue@net1, mv@net1');
    assert.equal(out.json?.code, 7, out.stdout);
    assert.match(String(out.json?.msg), /element 2/);
    assert.deepEqual(leftovers(pod), nothing);
  });

  it('ips on a delegated network whose plugin does not declare the capability reach host-local as CNI_ARGS IP=', async () => {
    const pod = newPod();
    const wanted = `10.${o}.${t + 3}.9/24`;
    const out = await add(pod, JSON.stringify([{ name: 'ptpnet', ips: [wanted] }]));
    assert.equal(out.code, 0, out.stdout);
    assert.equal(podAddress(pod, 'net1'), wanted);
    assert.equal((await del(pod)).code, 0);
    assert.deepEqual(leftovers(pod), nothing);
  });

  it('an interface name that is not valid Unicode (a lone surrogate) is refused before anything is made', async () => {
    const pod = newPod();
    const out = await add(pod, JSON.stringify([{ name: 'blue', interface: '\ud800' }]));
    assert.equal(out.json?.code, 7, out.stdout);
    assert.match(String(out.json?.msg), /element 1.*is not valid Unicode/);
    assert.deepEqual(leftovers(pod), nothing);
  });

  it('an unknown network fails naming it', async () => {
    const pod = newPod();
    const out = await add(pod, 'nosuch');
    assert.equal(out.json?.code, 7, out.stdout);
    assert.match(String(out.json?.msg), /default\/nosuch/);
    assert.deepEqual(leftovers(pod), nothing);
  });

  it('runs ptp natively unless forced to delegate, with the pod routed through its gateway, and DEL removes it', async () => {
    const pod = newPod();
    const out = await add(pod, 'ptpnative');
    assert.equal(out.code, 0, out.stdout);
    const [record] = (await ctlJson('show', pod.cid)) as {
      details: { attachments: { network: string; driver: string }[] };
    }[];
    assert.deepEqual(
      record!.details.attachments.map((a) => [a.network, a.driver]),
      [
        ['default/podnet', 'bridge'],
        ['default/ptpnative', 'ptp'],
      ],
    );
    assert.match(
      ip('-n', pod.ns, 'route', 'show', 'dev', 'net1'),
      new RegExp(`${subnet(6).replace(/\./g, '\\.')} via ${gateway(6).replace(/\./g, '\\.')}`),
    );
    assert.equal(
      ipTry('netns', 'exec', pod.ns, 'ping', '-c', '1', '-W', '2', '-I', 'net1', gateway(6)).status,
      0,
      'ping over the native ptp network',
    );
    assert.equal((await del(pod)).code, 0);
    assert.deepEqual(leftovers(pod), nothing);
    assert.deepEqual(daemon.leases('ptpnative'), []);
  });

  it('DEL after the network definitions were deleted still cleans everything, delegated leases included', async () => {
    const pod = newPod();
    const out = await add(pod, 'blue, ptpnet');
    assert.equal(out.code, 0, out.stdout);
    unlinkSync(join(daemon.networksDir, 'blue.json'));
    unlinkSync(join(daemon.networksDir, 'ptpnet.json'));
    try {
      const d = await del(pod, '');
      assert.equal(d.code, 0, d.stdout);
      assert.deepEqual(leftovers(pod), nothing);
    } finally {
      nad('blue', {
        type: 'bridge',
        bridge: `${prefix}br1`,
        isGateway: true,
        capabilities: { ips: true, mac: true },
        ipam: { type: 'host-local', ranges: [[{ subnet: subnet(1) }]] },
      });
      nad('ptpnet', { type: 'ptp', ipam: hostLocal(3) }, { 'plexus.io/delegate': 'true' }); // ptp is also native: these tests are about delegation
    }
  });
});
