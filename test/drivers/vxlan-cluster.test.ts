/**
 * Cluster-mode vxlan networks on real namespaces standing in for nodes, with a fake of the VtepDirectory port (what
 * the node Leases say, test/k8s/vxlan-peers.test.ts has the real one): the VTEP's flood entries follow the live peers
 * that serve the network, the failure modes are the documented codes, and a silent API never holds an ADD.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { randomInt } from 'node:crypto';
import { describe, it } from 'node:test';
import pino from 'pino';
import type { AttachRequest, Driver } from '../../src/drivers/driver';
import { createVxlanDriver, type PeerVteps, type VtepDirectory } from '../../src/drivers/vxlan';
import type { VxlanConfig } from '../../src/drivers/vxlan/config';
import type { NetworkDefinition } from '../../src/networks/nad';
import type { TestNetns } from '../support/netns';
import { attachParsed, attachRequest, driverTestbed, failure, must, RecordingEnv } from './support';

const bed = driverTestbed('pvc');
const { prefix, fx } = bed;
const log = pino({ level: 'silent' });

/** What a node's directory says; a test changes it and announces the change as a lease watch would. */
class FakeDirectory implements VtepDirectory {
  peers: PeerVteps[] = [];
  address: string | undefined;
  /** What the node's record said when the daemon started (a previous plexusd's VTEPs). */
  before: ReadonlyMap<number, string> | undefined = new Map();
  readonly published: Map<number, string>[] = [];
  private readonly listeners: (() => void)[] = [];
  constructor(
    readonly node: string,
    private readonly publishing: (vteps: ReadonlyMap<number, string>) => Promise<void> = () => Promise.resolve(),
  ) {}
  nodeAddress = (): string | undefined => this.address;
  publishedBefore = (): ReadonlyMap<number, string> | undefined => this.before;
  publish(vteps: ReadonlyMap<number, string>): Promise<void> {
    this.published.push(new Map(vteps));
    return this.publishing(vteps);
  }
  livePeers = (): readonly PeerVteps[] => this.peers;
  onChange(listener: () => void): void {
    this.listeners.push(listener);
  }
  announce(): void {
    for (const l of this.listeners) l();
  }
  start = (): Promise<void> => Promise.resolve();
  stop = (): Promise<void> => Promise.resolve();
}

const peer = (node: string, vni: number, address: string): PeerVteps => ({ node, vteps: new Map([[vni, address]]) });

/** A node (a netns) with an underlay interface `ul0` holding `address`, its peer end in a second netns. */
function nodeWithUnderlay(tag: string, address: string | undefined): TestNetns {
  const node = fx.create(tag);
  const far = fx.create(`${tag}f`);
  execFileSync('ip', ['-n', node.name, 'link', 'add', 'ul0', 'type', 'veth', 'peer', 'name', 'ul0', 'netns', far.name]);
  if (address) execFileSync('ip', ['-n', node.name, 'addr', 'add', `${address}/24`, 'dev', 'ul0']);
  execFileSync('ip', ['-n', node.name, 'link', 'set', 'ul0', 'up']);
  execFileSync('ip', ['-n', far.name, 'link', 'set', 'ul0', 'up']);
  return node;
}

/** A driver of one node, started as plexusd's lifecycle starts it; `stop` ends its background work. */
async function startedDriver(
  node: TestNetns,
  directory: VtepDirectory,
  networks: () => readonly NetworkDefinition[],
): Promise<Driver<VxlanConfig>> {
  const driver = createVxlanDriver({ node: node.path, cluster: { directory, networks }, floodIntervalMs: 200 });
  await driver.start?.({
    log,
    kernel: bed.kernel,
    recordedSteps: () => Promise.resolve([]),
    requestResync: () => undefined,
  });
  return driver;
}

/** The all-zeros entries of a node's VTEP, by remote. */
function floodEntries(node: TestNetns, device: string): string[] {
  const out = execFileSync('bridge', ['-n', node.name, 'fdb', 'show', 'dev', device], { encoding: 'utf8' });
  return [...out.matchAll(/^00:00:00:00:00:00 dst (\S+) /gm)].map((m) => m[1] ?? '').sort();
}

async function eventually(what: string, check: () => boolean, timeoutMs = 5000): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > until) throw new Error(`not within ${timeoutMs} ms: ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

function clusterRequest(
  network: string,
  vni: number,
  pod: TestNetns,
  extra: Record<string, unknown> = {},
): AttachRequest {
  return attachRequest({
    network,
    config: { type: 'vxlan', vni, ...extra, ipam: { type: 'host-local', subnet: '10.253.7.0/24' } },
    netns: pod.path,
  });
}

describe('vxlan cluster mode', () => {
  it('floods to the live peers that serve the network, and follows them as they join, move and go', async () => {
    const vni = randomInt(1_000_000, 16_000_000);
    const node = nodeWithUnderlay('fl', '192.168.241.1');
    const pod = fx.create('fl-pod');
    const dir = new FakeDirectory('a');
    dir.address = '192.168.241.1';
    dir.peers = [peer('b', vni, '192.168.241.2'), peer('c', vni + 1, '192.168.241.3')];
    const req = clusterRequest(`${prefix}-fl`, vni, pod);
    let networks: readonly NetworkDefinition[] = [req.network];
    const driver = await startedDriver(node, dir, () => networks);
    const rec = new RecordingEnv(bed.kernel, bed.ipam);
    try {
      const result = must(await attachParsed(driver, req, rec.env));
      assert.equal(result.interfaces[2]?.mtu, 1450, 'the underlay MTU (1500) less VXLAN over IPv4 (50)');
      const device = `vx${vni}`;
      await eventually('the serving peer b has an entry, c (another VNI) none', () =>
        same(floodEntries(node, device), ['192.168.241.2']),
      );
      assert.equal(dir.published.at(-1)?.get(vni), '192.168.241.1', 'the node publishes its underlay address');

      dir.peers = [peer('b', vni, '192.168.241.4'), peer('d', vni, '192.168.241.5')];
      dir.announce();
      await eventually('b moved, d joined', () => same(floodEntries(node, device), ['192.168.241.4', '192.168.241.5']));

      dir.peers = [peer('d', vni, '192.168.241.5')];
      await eventually('b expired (no event: the interval sees it)', () =>
        same(floodEntries(node, device), ['192.168.241.5']),
      );

      networks = [];
      await eventually('the network deleted: its VTEP floods to no one', () => same(floodEntries(node, device), []));
      await eventually('and the node publishes it no more', () => dir.published.at(-1)?.size === 0);
    } finally {
      await driver.stop?.();
      await rec.undo();
    }
  });

  it('a network deleted while plexusd was down: the next plexusd empties its VTEP and publishes it no more', async () => {
    const vni = randomInt(1_000_000, 16_000_000);
    const node = nodeWithUnderlay('down', '192.168.247.1');
    const pod = fx.create('down-pod');
    const req = clusterRequest(`${prefix}-down`, vni, pod);
    const device = `vx${vni}`;
    const dir = new FakeDirectory('a');
    dir.address = '192.168.247.1';
    dir.peers = [peer('b', vni, '192.168.247.2')];
    const first = await startedDriver(node, dir, () => [req.network]);
    const rec = new RecordingEnv(bed.kernel, bed.ipam);
    let second: Driver<VxlanConfig> | undefined;
    try {
      must(await attachParsed(first, req, rec.env));
      await eventually('the peer has its entry', () => same(floodEntries(node, device), ['192.168.247.2']));
      await first.stop?.();
      // The network is deleted while no plexusd runs; the next one finds the VNI on its record and the VTEP on the node.
      const next = new FakeDirectory('a');
      next.address = '192.168.247.1';
      next.peers = dir.peers;
      next.before = new Map([[vni, '192.168.247.1']]);
      second = await startedDriver(node, next, () => []);
      await eventually(`the deleted network's VTEP floods to no one (${floodEntries(node, device).join(' ')})`, () =>
        same(floodEntries(node, device), []),
      );
      await eventually('and the node publishes it no more', () => next.published.at(-1)?.size === 0);
    } finally {
      await first.stop?.();
      await second?.stop?.();
      await rec.undo();
    }
  });

  it('carries pod traffic between two nodes that found each other, with no per-node config', async () => {
    const vni = randomInt(1_000_000, 16_000_000);
    const a = fx.create('dpa');
    const b = fx.create('dpb');
    execFileSync('ip', ['-n', a.name, 'link', 'add', 'ul0', 'type', 'veth', 'peer', 'name', 'ul0', 'netns', b.name]);
    for (const [n, address] of [
      [a, '192.168.242.1'],
      [b, '192.168.242.2'],
    ] as const) {
      execFileSync('ip', ['-n', n.name, 'addr', 'add', `${address}/24`, 'dev', 'ul0']);
      execFileSync('ip', ['-n', n.name, 'link', 'set', 'ul0', 'up']);
    }
    const dirA = new FakeDirectory('a');
    const dirB = new FakeDirectory('b');
    dirA.address = '192.168.242.1';
    dirB.address = '192.168.242.2';
    dirA.peers = [peer('b', vni, '192.168.242.2')];
    dirB.peers = [peer('a', vni, '192.168.242.1')];
    const podA = fx.create('dpa-pod');
    const podB = fx.create('dpb-pod');
    const network = `${prefix}-dp`;
    const range = (rangeStart: string, rangeEnd: string) => ({
      ipam: { type: 'host-local', ranges: [[{ subnet: '10.253.8.0/24', rangeStart, rangeEnd }]] },
    });
    const reqA = clusterRequest(network, vni, podA, range('10.253.8.10', '10.253.8.19'));
    const reqB = clusterRequest(network, vni, podB, range('10.253.8.20', '10.253.8.29'));
    const driverA = await startedDriver(a, dirA, () => [reqA.network]);
    const driverB = await startedDriver(b, dirB, () => [reqB.network]);
    const recA = new RecordingEnv(bed.kernel, bed.ipam);
    const recB = new RecordingEnv(bed.kernel, bed.ipam);
    try {
      must(await attachParsed(driverA, reqA, recA.env));
      const target = must(await attachParsed(driverB, reqB, recB.env)).ips[0]?.address.split('/')[0] ?? '';
      await eventually('each node floods to the other', () => floodEntries(a, `vx${vni}`).length === 1);
      await eventually('and back', () => floodEntries(b, `vx${vni}`).length === 1);
      const ping = podA.exec('ping', '-c', '1', '-W', '2', target);
      assert.equal(ping.status, 0, ping.out);
    } finally {
      await driverA.stop?.();
      await driverB.stop?.();
      await recA.undo();
      await recB.undo();
    }
  });

  it('fails with code 11 naming why when the node has no InternalIP and the network names no underlayInterface', async () => {
    const node = nodeWithUnderlay('noip', '192.168.243.1');
    const pod = fx.create('noip-pod');
    const req = clusterRequest(`${prefix}-noip`, randomInt(1_000_000, 16_000_000), pod);
    const driver = await startedDriver(node, new FakeDirectory('lonely'), () => [req.network]);
    const rec = new RecordingEnv(bed.kernel, bed.ipam);
    try {
      const e = failure(await attachParsed(driver, req, rec.env));
      assert.equal(e.code, 11);
      assert.match(e.message, /node lonely has no usable underlay address for VXLAN: the Node has no InternalIP/);
    } finally {
      await driver.stop?.();
      await rec.undo();
    }
  });

  it('fails with code 11 naming the interface when underlayInterface has no address', async () => {
    const node = nodeWithUnderlay('noaddr', undefined);
    const pod = fx.create('noaddr-pod');
    const req = clusterRequest(`${prefix}-noaddr`, randomInt(1_000_000, 16_000_000), pod, { underlayInterface: 'ul0' });
    const dir = new FakeDirectory('n1');
    dir.address = '192.0.2.1';
    const driver = await startedDriver(node, dir, () => [req.network]);
    const rec = new RecordingEnv(bed.kernel, bed.ipam);
    try {
      const e = failure(await attachParsed(driver, req, rec.env));
      assert.equal(e.code, 11);
      assert.match(
        e.message,
        /node n1 has no usable underlay address for VXLAN: underlayInterface ul0 has no global IP/,
      );
    } finally {
      await driver.stop?.();
      await rec.undo();
    }
  });

  it('fails with code 7 naming the device that already uses the VNI and port', async () => {
    const node = nodeWithUnderlay('clash', '192.168.244.1');
    const vni = randomInt(1_000_000, 16_000_000);
    node.exec('ip', 'link', 'add', 'theirs0', 'type', 'vxlan', 'id', String(vni), 'dstport', '4789');
    const pod = fx.create('clash-pod');
    const req = clusterRequest(`${prefix}-clash`, vni, pod);
    const dir = new FakeDirectory('n1');
    dir.address = '192.168.244.1';
    const driver = await startedDriver(node, dir, () => [req.network]);
    const rec = new RecordingEnv(bed.kernel, bed.ipam);
    try {
      const e = failure(await attachParsed(driver, req, rec.env));
      assert.equal(e.code, 7);
      assert.match(e.message, new RegExp(`theirs0 on the host already uses VNI ${vni} on port 4789`));
    } finally {
      await driver.stop?.();
      await rec.undo();
    }
  });

  it('refuses with code 7 a second network on a VNI another network holds', async () => {
    const node = nodeWithUnderlay('owner', '192.168.245.1');
    const vni = randomInt(1_000_000, 16_000_000);
    const pod = fx.create('owner-pod');
    const first = clusterRequest(`${prefix}-a-first`, vni, pod);
    const second = clusterRequest(`${prefix}-b-second`, vni, pod, { bridge: `${prefix}b2` });
    const dir = new FakeDirectory('n1');
    dir.address = '192.168.245.1';
    const driver = await startedDriver(node, dir, () => [second.network, first.network]);
    const rec = new RecordingEnv(bed.kernel, bed.ipam);
    try {
      const e = failure(await attachParsed(driver, second, rec.env));
      assert.equal(e.code, 7);
      assert.match(e.message, new RegExp(`uses VXLAN VNI ${vni}, which network default/${prefix}-a-first`));
    } finally {
      await driver.stop?.();
      await rec.undo();
    }
  });

  it('answers the ADD at once while the API never answers a publish and a peer is unreachable', async () => {
    const node = nodeWithUnderlay('silent', '192.168.246.1');
    const vni = randomInt(1_000_000, 16_000_000);
    const pod = fx.create('silent-pod');
    const req = clusterRequest(`${prefix}-silent`, vni, pod);
    const dir = new FakeDirectory('n1', () => new Promise<void>(() => undefined));
    dir.address = '192.168.246.1';
    dir.peers = [peer('gone', vni, '203.0.113.9')];
    const driver = await startedDriver(node, dir, () => [req.network]);
    const rec = new RecordingEnv(bed.kernel, bed.ipam);
    try {
      const started = Date.now();
      must(await attachParsed(driver, req, rec.env));
      assert.ok(Date.now() - started < 1000, `the ADD took ${Date.now() - started} ms`);
      await eventually('the unreachable peer still gets its entry', () =>
        same(floodEntries(node, `vx${vni}`), ['203.0.113.9']),
      );
    } finally {
      await driver.stop?.();
      await rec.undo();
    }
  });
});

const same = (a: readonly string[], b: readonly string[]): boolean => JSON.stringify(a) === JSON.stringify(b);
