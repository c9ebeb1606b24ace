import assert from 'node:assert/strict';
import { randomInt } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import { describe, it } from 'node:test';
import { hostVethName } from '../../src/drivers/bridge';
import type { AttachRequest, DriverEnv } from '../../src/drivers/driver';
import { createVxlanDriver } from '../../src/drivers/vxlan';

const vxlanDriver = createVxlanDriver();
/** One driver per node (a netns standing in for another node of the cluster), which remembers its overlays. */
const nodeDrivers = new Map<string, ReturnType<typeof createVxlanDriver>>();
const attachVxlan = (req: AttachRequest, env: DriverEnv, node: string) => {
  const driver = nodeDrivers.get(node) ?? createVxlanDriver({ node });
  nodeDrivers.set(node, driver);
  return attachParsed(driver, req, env);
};
import { ip, ipTry, type NetnsFixture } from '../support/netns';
import { attachRequest, failure, must, plugin, RecordingEnv, driverTestbed, attachParsed } from './support';

const bed = driverTestbed('pvx');
const { prefix, fx } = bed;

/** Two "nodes" (netns) joined by a veth underlay: VTEP traffic never leaves our namespaces. */
function twoNodes(tag: string): { a: ReturnType<NetnsFixture['create']>; b: ReturnType<NetnsFixture['create']> } {
  const a = fx.create(`${tag}A`);
  const b = fx.create(`${tag}B`);
  ip('-n', a.name, 'link', 'add', 'ul0', 'type', 'veth', 'peer', 'name', 'ul0', 'netns', b.name);
  for (const [n, addr] of [
    [a, '192.168.250.1/24'],
    [b, '192.168.250.2/24'],
  ] as const) {
    ip('-n', n.name, 'addr', 'add', addr, 'dev', 'ul0');
    ip('-n', n.name, 'link', 'set', 'ul0', 'up');
  }
  return { a, b };
}

describe('vxlan driver', () => {
  it('creates the bridge and a VTEP with the VNI, port and a flood entry per remote on the host, and plugs the pod in', async () => {
    // Remotes on loopback, so whatever the VTEP floods stays on this machine.
    const vni = randomInt(1_000_000, 16_000_000);
    const port = randomInt(40000, 60000);
    const bridge = `${prefix}b`;
    const vtep = `vx${vni}`;
    fx.trackHostLink(vtep);
    fx.trackHostLink(bridge);
    const pod = fx.create('host');
    const rec = new RecordingEnv(bed.kernel, bed.ipam);
    const req = attachRequest({
      network: `${prefix}-a`,
      config: {
        type: 'vxlan',
        vni,
        port,
        bridge,
        remotes: ['127.0.0.77', '127.0.0.78'],
        ipam: { type: 'host-local', subnet: '10.252.9.0/24' },
      },
      netns: pod.path,
    });
    const host = hostVethName(req.containerId, req.runtimeIfname, req.ifname);
    fx.trackHostLink(host);
    const result = must(await attachParsed(vxlanDriver, req, rec.env));

    const details = ip('-d', 'link', 'show', vtep);
    assert.match(details, new RegExp(`vxlan id ${vni} `));
    assert.match(details, new RegExp(`dstport ${port} `));
    assert.match(details, new RegExp(`master ${bridge} `));
    assert.match(details, /state UNKNOWN|,UP/);
    const fdb = execFileSync('bridge', ['fdb', 'show', 'dev', vtep], { encoding: 'utf8' });
    assert.match(fdb, /00:00:00:00:00:00 dst 127\.0\.0\.77 /);
    assert.match(fdb, /00:00:00:00:00:00 dst 127\.0\.0\.78 /);
    assert.match(ip('link', 'show', host), new RegExp(`master ${bridge} `));

    assert.deepEqual(
      result.interfaces.map((i) => i.name),
      [bridge, host, 'net1'],
    );
    assert.equal(result.interfaces[2]?.sandbox, pod.path);
    assert.equal(result.ips[0]?.interface, 2);

    await rec.undo();
    assert.equal(ipTry('link', 'show', host).status, 1, 'the host-side veth is gone');
    assert.equal(must(await bed.kernel.getLink(pod.path, 'net1')), null);
    assert.equal(ipTry('link', 'show', vtep).status, 0, 'the VTEP is shared infrastructure: it stays');
    assert.deepEqual(await bed.ipam.leases(`${prefix}-a`), []);
  });

  it('carries pod traffic between two nodes across the overlay', async () => {
    const { a, b } = twoNodes('dp');
    const podA = fx.create('podA');
    const podB = fx.create('podB');
    const network = `${prefix}-b`;
    const conf = (local: string, remote: string, rangeStart: string) => ({
      type: 'vxlan',
      vni: 42,
      local,
      remotes: [remote],
      underlayInterface: 'ul0',
      bridge: 'ovl0',
      ipam: {
        type: 'host-local',
        ranges: [
          [{ subnet: '10.252.0.0/24', rangeStart, rangeEnd: rangeStart.replace(/\d+$/, (n) => String(Number(n) + 9)) }],
        ],
      },
    });
    const recA = new RecordingEnv(bed.kernel, bed.ipam);
    const recB = new RecordingEnv(bed.kernel, bed.ipam);
    const ra = must(
      await attachVxlan(
        attachRequest({ network, config: conf('192.168.250.1', '192.168.250.2', '10.252.0.10'), netns: podA.path }),
        recA.env,
        a.path,
      ),
    );
    const rb = must(
      await attachVxlan(
        attachRequest({ network, config: conf('192.168.250.2', '192.168.250.1', '10.252.0.20'), netns: podB.path }),
        recB.env,
        b.path,
      ),
    );
    assert.equal(ra.interfaces[2]?.mtu, 1450, 'the pod MTU leaves room for the VXLAN header (underlay 1500 - 50)');
    const target = rb.ips[0]?.address.split('/')[0] ?? '';
    const ping = podA.exec('ping', '-c', '1', '-W', '1', target);
    assert.equal(ping.status, 0, ping.out);
    await recA.undo();
    await recB.undo();
    assert.deepEqual(await bed.ipam.leases(network), []);
  });

  it('makes the overlay again when its bridge was deleted since the last attach', async () => {
    const node = fx.create('again');
    const pods = [fx.create('again-p1'), fx.create('again-p2')];
    const rec = new RecordingEnv(bed.kernel, bed.ipam);
    const config = { type: 'vxlan', vni: 77, remotes: ['192.168.250.9'], bridge: 'ovl7' };
    must(
      await attachVxlan(attachRequest({ network: `${prefix}-e`, config, netns: pods[0]!.path }), rec.env, node.path),
    );
    node.exec('ip', 'link', 'del', 'ovl7');
    must(
      await attachVxlan(attachRequest({ network: `${prefix}-e`, config, netns: pods[1]!.path }), rec.env, node.path),
    );
    assert.match(ip('-n', node.name, '-d', 'link', 'show', 'vx77'), /master ovl7 /);
    assert.match(
      execFileSync('ip', ['netns', 'exec', node.name, 'bridge', 'fdb', 'show', 'dev', 'vx77'], { encoding: 'utf8' }),
      /dst 192\.168\.250\.9 /,
    );
    await rec.undo();
  });

  it('fails with code 7 when the underlay interface is missing', async () => {
    const node = fx.create('nound');
    const pod = fx.create('nound-pod');
    const rec = new RecordingEnv(bed.kernel, bed.ipam);
    const e = failure(
      await attachVxlan(
        attachRequest({
          network: `${prefix}-c`,
          config: { type: 'vxlan', vni: 7, underlayInterface: 'missing0', remotes: ['192.168.250.9'] },
          netns: pod.path,
        }),
        rec.env,
        node.path,
      ),
    );
    assert.equal(e.code, 7);
    assert.match(e.message, /underlayInterface missing0 not found on the host/);
    await rec.undo();
  });

  it('fails with code 7 when another VXLAN device already uses the VNI and port', async () => {
    const node = fx.create('clash');
    const pod = fx.create('clash-pod');
    node.exec('ip', 'link', 'add', 'theirs', 'type', 'vxlan', 'id', '99', 'dstport', '4789');
    const rec = new RecordingEnv(bed.kernel, bed.ipam);
    const e = failure(
      await attachVxlan(
        attachRequest({
          network: `${prefix}-d`,
          config: { type: 'vxlan', vni: 99, remotes: ['192.168.250.9'] },
          netns: pod.path,
        }),
        rec.env,
        node.path,
      ),
    );
    assert.equal(e.code, 7);
    assert.match(e.message, /already uses VNI 99 on port 4789/);
    await rec.undo();
  });

  it('rejects invalid config with code 7 naming the field', () => {
    const cases: [Record<string, unknown>, RegExp][] = [
      [{ type: 'vxlan' }, /vxlan config of network n: vni: /],
      [{ type: 'vxlan', vni: 16777216 }, /vni: /],
      [{ type: 'vxlan', vni: 1, port: 0 }, /port: /],
      [{ type: 'vxlan', vni: 1, remotes: ['10.0.0.1', 'nope'] }, /remotes\[1\]: must be an IP address/],
      [
        { type: 'vxlan', vni: 1, remotes: ['10.0.0.1', 'fd00::1'] },
        /remotes\[1\]: fd00::1 is not of the same IP family/,
      ],
      [{ type: 'vxlan', vni: 1, local: '10.0.0.1', remotes: ['10.0.0.1'] }, /remotes: contains the local address/],
      [
        { type: 'vxlan', vni: 1, bridge: 'a-very-long-bridge-name' },
        /bridge "a-very-long-bridge-name" is longer than 15 bytes/,
      ],
    ];
    for (const [config, message] of cases) {
      const e = failure(vxlanDriver.parse([plugin('n', config)]));
      assert.equal(e.code, 7);
      assert.match(e.message, message);
    }
  });
});
