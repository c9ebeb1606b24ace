import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Kernel } from '../../src/kernel/kernel';
import { hostLinksWithPrefix, ip, NetnsFixture, uniquePrefix } from '../support/netns';

const prefix = uniquePrefix('pk');
const fx = new NetnsFixture(prefix);
let kernel: Kernel;

before(() => {
  kernel = new Kernel();
});
after(async () => {
  fx.cleanup();
  await kernel.close();
});

const must = <T>(r: { ok: true; value: T } | { ok: false; error: Error }): T => {
  if (!r.ok) throw r.error;
  return r.value;
};

describe('kernel layer (rtnetlink over koffi, real netns)', () => {
  it('creates a veth whose peer is born inside the pod netns with its final name', async () => {
    const pod = fx.create('veth');
    const host = `${prefix}v0`;
    fx.trackHostLink(host);
    must(
      await kernel.batch(undefined, [
        {
          op: 'linkAdd',
          link: { kind: 'veth', name: host, up: true, mtu: 1400, peer: { name: 'eth0', netns: pod.path } },
        },
      ]),
    );
    must(await kernel.batch(pod.path, [{ op: 'linkSet', name: 'eth0', up: true }]));
    const peer = must(await kernel.getLink(pod.path, 'eth0'));
    assert.ok(peer, 'eth0 exists in the pod netns');
    assert.equal(peer.kind, 'veth');
    assert.equal(peer.mtu, 1400);
    assert.equal(peer.up, true);
    assert.match(peer.mac ?? '', /^([0-9a-f]{2}:){5}[0-9a-f]{2}$/);
    const hostSide = must(await kernel.getLink(undefined, host));
    assert.equal(hostSide?.up, true);
    assert.ok(ip('-n', pod.name, 'link', 'show', 'eth0').includes('eth0'));
  });

  it('adds addresses and routes inside a netns and lists them back', async () => {
    const pod = fx.create('addr');
    must(
      await kernel
        .batch(pod.path, [{ op: 'linkAdd', link: { kind: 'dummy', name: 'd0', up: true } }])
        .then((r) =>
          r.ok
            ? r
            : r.error.is('EOPNOTSUPP') || r.error.failure.extack?.includes('Unknown device type')
              ? { ok: true as const, value: [] }
              : r,
        ),
    );
    const haveDummy = must(await kernel.getLink(pod.path, 'd0')) !== null;
    const dev = haveDummy ? 'd0' : 'lo';
    must(
      await kernel.batch(pod.path, [
        { op: 'addrAdd', name: dev, address: '10.77.0.2/24' },
        { op: 'addrAdd', name: dev, address: 'fd77::2/64', noDad: true },
        ...(haveDummy ? [{ op: 'routeAdd' as const, route: { dst: '10.78.0.0/16', gw: '10.77.0.1' } }] : []),
      ]),
    );
    const addrs = must(await kernel.listAddresses(pod.path, dev)).map((a) => a.address);
    assert.ok(addrs.includes('10.77.0.2/24'), `addresses: ${addrs.join(', ')}`);
    assert.ok(addrs.includes('fd77::2/64'), `addresses: ${addrs.join(', ')}`);
    if (haveDummy) {
      const routes = must(await kernel.listRoutes(pod.path, 4));
      assert.ok(
        routes.some((r) => r.dst === '10.78.0.0/16' && r.gw === '10.77.0.1'),
        JSON.stringify(routes),
      );
    }
  });

  it('reports errno names and the kernel extended ack text', async () => {
    const pod = fx.create('err');
    const r = await kernel.batch(pod.path, [
      { op: 'addrAdd', name: 'lo', address: '10.1.1.1/8' },
      { op: 'addrAdd', name: 'lo', address: '10.1.1.1/8' },
    ]);
    assert.equal(r.ok, false);
    if (!r.ok) {
      assert.equal(r.error.failure.errnoName, 'EEXIST');
      assert.equal(r.error.index, 1);
      assert.match(r.error.details, /^errno=17 EEXIST/, 'errno in details, for the CNI error a driver makes of it');
    }
    const bad = await kernel.batch(pod.path, [
      { op: 'linkAdd', link: { kind: 'macvlan', name: 'm0', master: 'lo', mode: 'bridge' } },
    ]);
    assert.equal(bad.ok, false);
    if (!bad.ok) assert.ok(bad.error.failure.extack || bad.error.failure.errnoName, 'an explanation is present');
  });

  it('names a missing link, or one whose name no link can have, as ENODEV', async () => {
    const pod = fx.create('nodev');
    for (const name of ['nosuchlink', 'a-name-longer-than-15']) {
      const r = await kernel.batch(pod.path, [{ op: 'addrAdd', name, address: '10.1.1.1/8' }]);
      assert.equal(r.ok, false);
      if (!r.ok) assert.equal(r.error.failure.errnoName, 'ENODEV', name);
    }
  });

  it('tolerates listed errnos so deletes are idempotent', async () => {
    const r = await kernel.deleteLink(undefined, `${prefix}nope`);
    assert.equal(r.ok, true);
  });

  it('creates a macvlan on a host link directly inside the pod netns', async () => {
    const pod = fx.create('mv');
    const uplink = `${prefix}up`;
    fx.trackHostLink(uplink);
    fx.trackHostLink(`${prefix}upp`);
    must(
      await kernel.batch(undefined, [
        { op: 'linkAdd', link: { kind: 'veth', name: uplink, up: true, peer: { name: `${prefix}upp` } } },
      ]),
    );
    must(
      await kernel.batch(undefined, [
        {
          op: 'linkAdd',
          link: { kind: 'macvlan', name: 'net1', master: uplink, mode: 'bridge', netns: pod.path, up: true },
        },
      ]),
    );
    const l = must(await kernel.getLink(pod.path, 'net1'));
    assert.equal(l?.kind, 'macvlan');
  });

  it('creates a bridge, enslaves a port, sets hairpin and promisc', async () => {
    const br = `${prefix}br`;
    const port = `${prefix}p`;
    fx.trackHostLink(br);
    fx.trackHostLink(port);
    must(
      await kernel.batch(undefined, [
        { op: 'linkAdd', link: { kind: 'bridge', name: br, up: true } },
        { op: 'linkAdd', link: { kind: 'veth', name: port, bridge: br, up: true, peer: { name: `${prefix}q` } } },
        { op: 'linkSet', name: port, hairpin: true },
        { op: 'linkSet', name: br, promisc: true },
      ]),
    );
    const b = must(await kernel.getLink(undefined, br));
    const p = must(await kernel.getLink(undefined, port));
    assert.equal(p?.masterIndex, b?.index);
    assert.equal(b?.promisc, true);
    assert.match(ip('-d', 'link', 'show', port), /hairpin on/);
  });

  it('creates a persistent tap inside a netns through the tun ioctls', async () => {
    const pod = fx.create('tap');
    must(
      await kernel.batch(pod.path, [
        { op: 'tapAdd', tap: { name: 'tap0', owner: 0, multiQueue: true, mtu: 1300, up: true } },
      ]),
    );
    const l = must(await kernel.getLink(pod.path, 'tap0'));
    assert.equal(l?.kind, 'tun');
    assert.equal(l?.mtu, 1300);
  });

  it('creates a vxlan device and appends a remote VTEP', async () => {
    const pod = fx.create('vx');
    must(
      await kernel
        .batch(pod.path, [
          { op: 'addrAdd', name: 'lo', address: '127.0.0.9/8' },
          {
            op: 'linkAdd',
            link: { kind: 'vxlan', name: 'vx0', vni: 42, port: 4789, local: '127.0.0.9', learning: false, up: true },
          },
          { op: 'fdbAppend', dev: 'vx0', mac: '00:00:00:00:00:00', dst: '127.0.0.10' },
        ])
        .then((r) => (r.ok || !r.error.is('EEXIST') ? r : { ok: true as const, value: [] })),
    );
    const l = must(await kernel.getLink(pod.path, 'vx0'));
    assert.equal(l?.kind, 'vxlan');
    assert.match(pod.exec('bridge', 'fdb', 'show', 'dev', 'vx0').out, /dst 127\.0\.0\.10/);
  });

  it('deletes every link of a link group in one request', async () => {
    const group = 4000 + Math.floor(Math.random() * 1000);
    const names = [0, 1, 2].map((i) => `${prefix}g${i}`);
    for (const n of names) fx.trackHostLink(n);
    must(
      await kernel.batch(
        undefined,
        names.map((n) => ({
          op: 'linkAdd' as const,
          link: { kind: 'veth' as const, name: n, group, peer: { name: `${n}x` } },
        })),
      ),
    );
    assert.equal(hostLinksWithPrefix(`${prefix}g`).length, 6);
    must(await kernel.batch(undefined, [{ op: 'linkDelGroup', group }]));
    assert.deepEqual(hostLinksWithPrefix(`${prefix}g`), []);
  });

  it('deletes links together through a group of their own, and never a stranger that shares the group', async () => {
    const group = 5000 + Math.floor(Math.random() * 1000);
    const ours = [0, 1, 2].map((i) => `${prefix}m${i}`);
    const stranger = `${prefix}s0`;
    for (const n of [...ours, stranger]) fx.trackHostLink(n);
    must(
      await kernel.batch(
        undefined,
        [...ours, stranger].map((n) => ({
          op: 'linkAdd' as const,
          link: { kind: 'veth' as const, name: n, peer: { name: `${n}x` } },
        })),
      ),
    );
    must(await kernel.batch(undefined, [{ op: 'linkSet', name: stranger, group }]));
    // With the stranger in the group, ours go one by one; the already-missing name counts as deleted.
    const first = must(
      await kernel.batch(undefined, [{ op: 'linkDelMany', names: [ours[0]!, ours[1]!, `${prefix}gone`], group }]),
    );
    assert.deepEqual(first[0], { failed: [] });
    assert.deepEqual(hostLinksWithPrefix(`${prefix}m`).sort(), [ours[2]!, `${ours[2]!}x`].sort());
    assert.deepEqual(
      hostLinksWithPrefix(`${prefix}s`).sort(),
      [stranger, `${stranger}x`].sort(),
      'the stranger in the group is kept',
    );
    // Without it, by group.
    must(await kernel.batch(undefined, [{ op: 'linkSet', name: stranger, group: 0 }]));
    const second = must(await kernel.batch(undefined, [{ op: 'linkDelMany', names: [ours[2]!, stranger], group }]));
    assert.deepEqual(second[0], { failed: [] });
    assert.deepEqual(hostLinksWithPrefix(`${prefix}m`), []);
    assert.deepEqual(hostLinksWithPrefix(`${prefix}s`), []);
  });

  it('deletes host links asked for concurrently, each answered on its own', async () => {
    const names = Array.from({ length: 12 }, (_, i) => `${prefix}c${i}`);
    for (const n of names) fx.trackHostLink(n);
    must(
      await kernel.batch(
        undefined,
        names.map((n) => ({
          op: 'linkAdd' as const,
          link: { kind: 'veth' as const, name: n, peer: { name: `${n}x` } },
        })),
      ),
    );
    const results = await Promise.all([...names, `${prefix}cnone`].map((n) => kernel.deleteLink(undefined, n)));
    assert.ok(
      results.every((r) => r.ok),
      JSON.stringify(results.filter((r) => !r.ok)),
    );
    assert.deepEqual(hostLinksWithPrefix(`${prefix}c`), []);
  });

  it('deletes links in many pod namespaces at once, each answered on its own, with the kernel errors of the others', async () => {
    const pods = Array.from({ length: 8 }, (_, i) => fx.create(`d${i}`));
    for (const [i, pod] of pods.entries()) {
      fx.trackHostLink(`${prefix}d${i}`);
      must(
        await kernel.batch(undefined, [
          { op: 'linkAdd', link: { kind: 'veth', name: `${prefix}d${i}`, peer: { name: 'net1', netns: pod.path } } },
        ]),
      );
    }
    const results = await Promise.all([
      ...pods.map((p) => kernel.deleteLink(p.path, 'net1')),
      kernel.deleteLink(pods[0]!.path, 'absent0'),
      kernel.deleteLink(pods[1]!.path, 'lo'),
      kernel.deleteLink(`/var/run/netns/${prefix}-gone`, 'net1'),
    ]);
    assert.ok(
      results.slice(0, pods.length + 1).every((r) => r.ok),
      'deleted, and a missing link counts as deleted',
    );
    for (const pod of pods) assert.doesNotMatch(ip('-n', pod.name, '-o', 'link', 'show'), /net1/);
    const lo = results[pods.length + 1]!;
    assert.ok(
      !lo.ok && lo.error.failure.op === 'RTM_DELLINK' && lo.error.is('EOPNOTSUPP'),
      'the kernel refuses to delete lo, and says so',
    );
    const gone = results[pods.length + 2]!;
    assert.ok(
      !gone.ok && gone.error.failure.op === 'open netns' && gone.error.is('ENOENT'),
      'a netns that is gone is reported as such',
    );
    assert.deepEqual(hostLinksWithPrefix(`${prefix}d`), [], 'the host ends went with their peers');
  });

  it('fails cleanly for a netns that does not exist', async () => {
    const r = await kernel.getLink(`/var/run/netns/${prefix}-missing`, 'eth0');
    assert.equal(r.ok, false);
    if (!r.ok) assert.equal(r.error.failure.errnoName, 'ENOENT');
  });
  it('writes sysctls of one netns in a row from inside it, tolerating what an op tolerates and stopping at a failure', async () => {
    const ns = fx.create('sysctls');
    ip('-n', ns.name, 'link', 'add', 'v0', 'type', 'veth', 'peer', 'name', 'v1');
    const read = (key: string): string => ns.exec('cat', `/proc/sys/${key}`).out.trim();
    const r = await kernel.batch(ns.path, [
      { op: 'sysctlWrite', key: 'net/ipv4/conf/nosuch0/arp_notify', value: '1', ignore: ['ENOENT'] },
      { op: 'sysctlWrite', key: 'net/ipv4/conf/v0/arp_notify', value: '1' },
      { op: 'sysctlWrite', key: 'net/ipv4/conf/nosuch1/arp_notify', value: '1' },
      { op: 'sysctlWrite', key: 'net/ipv4/conf/v1/arp_notify', value: '1' },
    ]);
    assert.equal(r.ok, false);
    if (!r.ok) {
      assert.equal(r.error.index, 2, 'the first failure not tolerated');
      assert.equal(r.error.failure.errnoName, 'ENOENT');
    }
    assert.equal(read('net/ipv4/conf/v0/arp_notify'), '1', 'written in the pod netns');
    assert.equal(read('net/ipv4/conf/v1/arp_notify'), '0', 'nothing after the failure');
  });
});
