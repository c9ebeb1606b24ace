/**
 * Every driver that makes a pod interface, through the one mechanism they share: undo removes only what Plexus made
 * for the attachment. When the pod interface name is taken, the attach fails and undoing what it recorded leaves the
 * other interface as it was (same ifindex); when the attach got as far as making the interface and nothing more was
 * recorded (a crash before commit), undoing the record removes it. Real kernel, real namespaces.
 */
import assert from 'node:assert/strict';
import { randomInt } from 'node:crypto';
import { describe, it } from 'node:test';
import { hostVethName } from '../../src/drivers/bridge';
import type { AttachRequest, Driver } from '../../src/drivers/driver';
import { createBridgeDriver } from '../../src/drivers/bridge';
import { createHostDeviceDriver } from '../../src/drivers/host-device';
import { createIpvlanDriver } from '../../src/drivers/ipvlan';
import { createMacvlanDriver } from '../../src/drivers/macvlan';
import { createPtpDriver } from '../../src/drivers/ptp';
import { createTapDriver } from '../../src/drivers/tap';
import { createVxlanDriver } from '../../src/drivers/vxlan';
import { ip, ipTry, type TestNetns } from '../support/netns';
import { attachParsed, attachRequest, driverTestbed, hostUplink, must, RecordingEnv } from './support';
import { skipOptional } from '../support/prerequisites';

const hostDeviceDriver = createHostDeviceDriver();
const ipvlanDriver = createIpvlanDriver();
const macvlanDriver = createMacvlanDriver();
const tapDriver = createTapDriver();

const bed = driverTestbed('pui');
const { prefix, fx } = bed;
const uplink = `${prefix}up`;
let devices = 0;
let subnets = 0;
let networks = 0;

/** A host link standing in for a NIC (a veth whose peer is in a test netns). */
function hostDevice(): string {
  const name = `${prefix}d${devices++}`;
  const far = fx.create(`far${devices}`);
  fx.trackHostLink(name);
  ip('link', 'add', name, 'type', 'veth', 'peer', 'name', 'far0', 'netns', far.name);
  return name;
}

/** Why ipvlan links cannot be made here (this kernel may lack the driver), or undefined; probed once. */
let ipvlanProbe: { readonly missing?: string } | undefined;
function ipvlanMissing(): string | undefined {
  if (!ipvlanProbe) {
    const probe = fx.create('ivprobe');
    const made = probe.exec('ip', 'link', 'add', 'p0', 'type', 'veth', 'peer', 'name', 'p1');
    const r = made.status === 0 ? probe.exec('ip', 'link', 'add', 'iv0', 'link', 'p0', 'type', 'ipvlan') : made;
    ipvlanProbe = r.status === 0 ? {} : { missing: `ipvlan not available in this kernel: ${r.out.trim()}` };
  }
  return ipvlanProbe.missing;
}

interface Kind {
  readonly name: string;
  readonly driver: () => Driver<unknown>;
  readonly config: () => Record<string, unknown>;
  /** Host links the attachment makes (deleted by cleanup if a test fails). */
  readonly hostLinks?: (req: AttachRequest) => string[];
  /** Why this kernel cannot run the kind (the test is then skipped, naming it). */
  readonly missing?: () => string | undefined;
}
const ipam = (): Record<string, unknown> => ({ type: 'host-local', subnet: `10.249.${subnets++}.0/24` });
const vni = randomInt(1_000_000, 16_000_000);
const veth = (req: AttachRequest): string[] => [hostVethName(req.containerId, req.runtimeIfname, req.ifname)];
const kinds: readonly Kind[] = [
  {
    name: 'bridge',
    driver: createBridgeDriver,
    config: () => ({ type: 'bridge', bridge: `${prefix}br`, ipam: ipam() }),
    hostLinks: veth,
  },
  { name: 'ptp', driver: createPtpDriver, config: () => ({ type: 'ptp', ipam: ipam() }), hostLinks: veth },
  {
    name: 'vxlan',
    driver: createVxlanDriver,
    hostLinks: veth,
    config: () => ({ type: 'vxlan', vni, port: 47899, bridge: `${prefix}vb`, remotes: ['127.0.0.79'], ipam: ipam() }),
  },
  {
    name: 'macvlan',
    driver: () => macvlanDriver,
    config: () => ({ type: 'macvlan', master: uplink, mode: 'bridge', ipam: ipam() }),
  },
  {
    name: 'ipvlan',
    driver: () => ipvlanDriver,
    missing: ipvlanMissing,
    config: () => ({ type: 'ipvlan', master: uplink, mode: 'l2', ipam: ipam() }),
  },
  { name: 'tap', driver: () => tapDriver, config: () => ({ type: 'tap', ipam: ipam() }) },
  {
    name: 'host-device',
    driver: () => hostDeviceDriver,
    config: () => ({ type: 'host-device', device: hostDevice(), ipam: ipam() }),
  },
];

/** `index name` of a link of the pod, or '' when it has none of that name. */
const linkOf = (ns: TestNetns, name: string): string =>
  ns
    .exec('ip', '-o', 'link', 'show', name)
    .out.match(/^(\d+): ([^:@]+)/)
    ?.slice(1, 3)
    .join(' ') ?? '';

it("host veth names are the attachment's own: another CNI_IFNAME of the same container gets another name", async () => {
  const { createHash } = await import('node:crypto');
  const a = hostVethName('c0ffee', 'eth0', 'net1');
  assert.match(a, /^veth[0-9a-f]{11}$/);
  assert.notEqual(hostVethName('c0ffee', 'eth1', 'net1'), a);
  // The default network's (runtime and pod interface are one) is the name plexusd gave it before.
  const before = `veth${createHash('sha256').update('c0ffee/eth0').digest('hex').slice(0, 11)}`;
  assert.equal(hostVethName('c0ffee', 'eth0', 'eth0'), before);
});

describe('undo removes only what Plexus made, for every driver that makes a pod interface', () => {
  let uplinkMade = false;
  const request = (kind: Kind, pod: TestNetns): AttachRequest => {
    if (!uplinkMade) {
      hostUplink(fx, uplink);
      for (const l of [`${prefix}br`, `${prefix}vb`, `vx${vni}`]) fx.trackHostLink(l);
      uplinkMade = true;
    }
    const req = attachRequest({
      network: `${prefix}-${kind.name}${++networks}`,
      config: kind.config(),
      netns: pod.path,
      ifname: 'net1',
      runtimeIfname: 'eth0',
    });
    for (const l of kind.hostLinks?.(req) ?? []) fx.trackHostLink(l);
    return req;
  };

  for (const kind of kinds) {
    it(`${kind.name}: a pod interface name that is taken fails the attach, and undo leaves that interface alone`, async (t) => {
      const missing = kind.missing?.();
      if (skipOptional(t, missing)) return;
      const pod = fx.create(`t-${kind.name}`);
      assert.equal(pod.exec('ip', 'link', 'add', 'net1', 'type', 'bridge').status, 0);
      const before = linkOf(pod, 'net1');
      const rec = new RecordingEnv(bed.kernel, bed.ipam);
      const req = request(kind, pod);
      const r = await attachParsed(kind.driver(), req, rec.env);
      assert.ok(!r.ok, 'the attach fails');
      assert.match(r.error.message, /net1 already exists/);
      await rec.undo();
      assert.equal(linkOf(pod, 'net1'), before, 'the same net1 is still there');
      for (const l of kind.hostLinks?.(req) ?? [])
        assert.equal(ipTry('link', 'show', l).status, 1, `no host link ${l}`);
      assert.deepEqual(await bed.ipam.leases(req.network.cniName), []);
    });

    it(`${kind.name}: undoing the steps recorded up to a crash after the create removes the interface it made`, async (t) => {
      const missing = kind.missing?.();
      if (skipOptional(t, missing)) return;
      const pod = fx.create(`c-${kind.name}`);
      const rec = new RecordingEnv(bed.kernel, bed.ipam);
      const req = request(kind, pod);
      must(await attachParsed(kind.driver(), req, rec.env));
      assert.notEqual(linkOf(pod, 'net1'), '');
      await rec.undo();
      assert.equal(linkOf(pod, 'net1'), '', 'net1 is gone from the pod');
      for (const l of kind.hostLinks?.(req) ?? [])
        assert.equal(ipTry('link', 'show', l).status, 1, `no host link ${l}`);
      assert.deepEqual(await bed.ipam.leases(req.network.cniName), []);
    });
  }

  it("tap: an existing tap of the name (another pod's, another plugin's) is an error, never taken over", async () => {
    const pod = fx.create('tapx');
    assert.equal(pod.exec('ip', 'tuntap', 'add', 'net1', 'mode', 'tap').status, 0);
    const before = linkOf(pod, 'net1');
    const rec = new RecordingEnv(bed.kernel, bed.ipam);
    const kind = kinds.find((k) => k.name === 'tap')!;
    const r = await attachParsed(kind.driver(), request(kind, pod), rec.env);
    assert.ok(!r.ok);
    assert.match(r.error.message, /net1 already exists/);
    await rec.undo();
    assert.equal(linkOf(pod, 'net1'), before);
    assert.doesNotMatch(ip('-n', pod.name, 'addr', 'show', 'net1'), /inet /, 'no address was put on it');
  });

  it("a pod link of the same name that another attachment made is not deleted by this one's undo", async () => {
    const pod = fx.create('other');
    const mine = new RecordingEnv(bed.kernel, bed.ipam);
    const theirs = new RecordingEnv(bed.kernel, bed.ipam);
    const kind = kinds.find((k) => k.name === 'macvlan')!;
    must(await attachParsed(kind.driver(), request(kind, pod), theirs.env));
    const before = linkOf(pod, 'net1');
    // A second attachment (another container) pointed at the same netns and name: it recorded its step, then failed.
    const r = await attachParsed(kind.driver(), request(kind, pod), mine.env);
    assert.ok(!r.ok);
    await mine.undo();
    assert.equal(linkOf(pod, 'net1'), before);
    await theirs.undo();
    assert.equal(linkOf(pod, 'net1'), '');
  });
});
