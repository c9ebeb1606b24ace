import assert from 'node:assert/strict';
import { before, describe, it } from 'node:test';
import { defaultRouteLink, resolveMaster } from '../../src/drivers/common';
import { createMacvlanDriver } from '../../src/drivers/macvlan';
import { hostLinksWithPrefix, ip } from '../support/netns';
import { attachRequest, failure, must, plugin, RecordingEnv, driverTestbed, hostUplink, attachParsed } from './support';

const macvlanDriver = createMacvlanDriver();

const bed = driverTestbed('pmv');
const { prefix, fx } = bed;
const master = `${prefix}m0`;

const ipamConfig = (third: number) => ({
  type: 'host-local',
  subnet: `10.231.${third}.0/24`,
  routes: [{ dst: '10.232.0.0/16' }],
});

before(() => {
  // The "host NIC": a veth on the host whose other end is in a test netns, so everything sent stays in our namespaces.
  hostUplink(fx, master);
});

describe('macvlan driver', () => {
  it('answers one interface in the sandbox with the requested MAC, its IPs and routes', async () => {
    const pod = fx.create('shape');
    const rec = new RecordingEnv(bed.kernel, bed.ipam);
    const req = attachRequest({
      network: `${prefix}-a`,
      config: { type: 'macvlan', master, ipam: ipamConfig(1) },
      netns: pod.path,
      mac: '02:42:ac:11:00:07',
    });
    const result = must(await attachParsed(macvlanDriver, req, rec.env));
    assert.equal(result.interfaces.length, 1);
    const [iface] = result.interfaces;
    assert.deepEqual(
      { name: iface?.name, sandbox: iface?.sandbox, mac: iface?.mac },
      { name: 'net1', sandbox: pod.path, mac: '02:42:ac:11:00:07' },
    );
    assert.equal(result.ips.length, 1);
    assert.match(result.ips[0]?.address ?? '', /^10\.231\.1\.\d+\/24$/);
    assert.equal(result.ips[0]?.gateway, '10.231.1.1');
    assert.equal(result.ips[0]?.interface, 0);
    assert.deepEqual(
      result.routes,
      [{ dst: '10.232.0.0/16' }],
      "IPAM's routes as IPAM gave them, as the reference reports them",
    );
    assert.match(ip('-n', pod.name, 'route', 'show', '10.232.0.0/16'), /via 10\.231\.1\.1 dev net1/);
    await rec.undo();
  });

  it('creates the macvlan inside the pod netns with the configured mode and MTU, addresses and routes', async () => {
    const pod = fx.create('kind');
    const rec = new RecordingEnv(bed.kernel, bed.ipam);
    const req = attachRequest({
      network: `${prefix}-b`,
      config: { type: 'macvlan', master, mode: 'private', mtu: 1400, ipam: ipamConfig(2) },
      netns: pod.path,
      ifname: 'eth9',
    });
    const result = must(await attachParsed(macvlanDriver, req, rec.env));
    const details = ip('-n', pod.name, '-d', 'link', 'show', 'eth9');
    assert.match(details, /macvlan mode private/);
    assert.match(details, /mtu 1400/);
    assert.match(details, /state UP|,UP/);
    assert.match(
      ip('-n', pod.name, 'addr', 'show', 'eth9'),
      new RegExp(result.ips[0]?.address.replace(/\./g, '\\.') ?? 'missing'),
    );
    assert.match(ip('-n', pod.name, 'route', 'show'), /10\.232\.0\.0\/16 via 10\.231\.2\.1 dev eth9/);
    assert.deepEqual(hostLinksWithPrefix('eth9'), [], 'nothing named eth9 appeared on the host');
    await rec.undo();
  });

  it('lets two pods on one master in bridge mode reach each other', async () => {
    const a = fx.create('pa');
    const b = fx.create('pb');
    const rec = new RecordingEnv(bed.kernel, bed.ipam);
    const network = `${prefix}-c`;
    const ra = must(
      await attachParsed(
        macvlanDriver,
        attachRequest({ network, config: { type: 'macvlan', master, ipam: ipamConfig(3) }, netns: a.path }),
        rec.env,
      ),
    );
    must(
      await attachParsed(
        macvlanDriver,
        attachRequest({ network, config: { type: 'macvlan', master, ipam: ipamConfig(3) }, netns: b.path }),
        rec.env,
      ),
    );
    const target = ra.ips[0]?.address.split('/')[0] ?? '';
    const ping = b.exec('ping', '-c', '1', '-W', '1', target);
    assert.equal(ping.status, 0, ping.out);
    await rec.undo();
  });

  it('undo removes the pod interface and releases the leases', async () => {
    const pod = fx.create('undo');
    const rec = new RecordingEnv(bed.kernel, bed.ipam);
    const network = `${prefix}-d`;
    must(
      await attachParsed(
        macvlanDriver,
        attachRequest({ network, config: { type: 'macvlan', master, ipam: ipamConfig(4) }, netns: pod.path }),
        rec.env,
      ),
    );
    assert.deepEqual(
      rec.steps.map((s) => s.kind),
      ['releaseIpam', 'deleteLink'],
      'the lease release is recorded before the link',
    );
    assert.equal((await bed.ipam.leases(network)).length, 1);
    await rec.undo();
    assert.equal(must(await bed.kernel.getLink(pod.path, 'net1')), null);
    assert.deepEqual(await bed.ipam.leases(network), []);
    assert.match(ip('-d', 'link', 'show', master), /veth/, 'the master is untouched');
  });

  it('fails on a missing master with code 7 and leaves nothing behind', async () => {
    const pod = fx.create('nomaster');
    const rec = new RecordingEnv(bed.kernel, bed.ipam);
    const network = `${prefix}-e`;
    const e = failure(
      await attachParsed(
        macvlanDriver,
        attachRequest({
          network,
          config: { type: 'macvlan', master: `${prefix}zz`, ipam: ipamConfig(5) },
          netns: pod.path,
        }),
        rec.env,
      ),
    );
    assert.equal(e.code, 7);
    assert.match(e.message, new RegExp(`master device ${prefix}zz not found on the host`));
    await rec.undo();
    assert.deepEqual(await bed.ipam.leases(network), []);
  });

  it('rejects invalid config with code 7 naming the field, and linkInContainer with code 2', () => {
    const cases: [Record<string, unknown>, number, RegExp][] = [
      [{ type: 'macvlan', master, mode: 'bogus' }, 7, /macvlan config of network n: mode: /],
      [{ type: 'macvlan', master, mtu: 'big' }, 7, /mtu: /],
      [{ type: 'macvlan', master: 'a/b' }, 7, /master "a\/b"/],
      [{ type: 'macvlan', master, ipam: { type: 'host-local', subnet: 'nope' } }, 7, /ipam/],
      [{ type: 'macvlan', master, linkInContainer: true }, 2, /linkInContainer/],
    ];
    for (const [config, code, message] of cases) {
      const e = failure(macvlanDriver.parse([plugin('n', config)]));
      assert.equal(e.code, code, JSON.stringify(config));
      assert.match(e.message, message);
    }
    assert.equal(
      macvlanDriver.parse([plugin('n', { type: 'macvlan', ipam: {} })]).ok,
      true,
      'no master and empty ipam are valid',
    );
  });

  it('defaults the master to the link of the default route, and fails with code 7 without one', async () => {
    const node = fx.create('node');
    node.exec('ip', 'link', 'add', 'up0', 'type', 'veth', 'peer', 'name', 'up1');
    node.exec('ip', 'link', 'set', 'up0', 'up');
    node.exec('ip', 'addr', 'add', '10.233.0.2/24', 'dev', 'up0');
    const none = failure(await resolveMaster(bed.kernel, undefined, 'network x', node.path));
    assert.equal(none.code, 7);
    assert.match(none.message, /no "master" given and the host has no default route/);
    const add = node.exec('ip', 'route', 'add', 'default', 'via', '10.233.0.1', 'dev', 'up0');
    assert.equal(add.status, 0, add.out);
    assert.equal(must(await defaultRouteLink(bed.kernel, node.path))?.name, 'up0');
    assert.equal(must(await resolveMaster(bed.kernel, undefined, 'network x', node.path)).name, 'up0');
  });
  it('gives the pod interface the MAC of the config\'s "mac" when the runtime asks for none, as the reference does', async () => {
    const pod = fx.create('confmac');
    const rec = new RecordingEnv(bed.kernel, bed.ipam);
    const config = { type: 'macvlan', master, mac: '02:42:AC:11:00:0A', ipam: ipamConfig(7) };
    const result = must(
      await attachParsed(macvlanDriver, attachRequest({ network: `${prefix}-m`, config, netns: pod.path }), rec.env),
    );
    assert.equal(result.interfaces[0]?.mac, '02:42:ac:11:00:0a');
    assert.match(ip('-n', pod.name, 'link', 'show', 'net1'), /link\/ether 02:42:ac:11:00:0a /);
    await rec.undo();
  });

  it('refuses bcqueuelen natively, saying how to delegate to the reference plugin', () => {
    const refused = failure(macvlanDriver.parse([plugin('n', { type: 'macvlan', master, bcqueuelen: 100 })]));
    assert.equal(refused.code, 2);
    assert.match(refused.message, /"bcqueuelen" is not supported natively.*plexus\.io\/delegate: "true"/);
  });
  it('sets arp_notify and ndisc_notify on the pod interface, as the reference does', async () => {
    const pod = fx.create('notify');
    const rec = new RecordingEnv(bed.kernel, bed.ipam);
    const config = { type: 'macvlan', master, ipam: ipamConfig(8) };
    must(
      await attachParsed(macvlanDriver, attachRequest({ network: `${prefix}-n`, config, netns: pod.path }), rec.env),
    );
    assert.equal(pod.exec('cat', '/proc/sys/net/ipv4/conf/net1/arp_notify').out.trim(), '1');
    assert.equal(pod.exec('cat', '/proc/sys/net/ipv6/conf/net1/ndisc_notify').out.trim(), '1');
    await rec.undo();
  });
});
