/**
 * One container ID added twice under two CNI_IFNAMEs (containerd does this with two CNI configs), each in its own
 * netns, on the same networks: every lease and host link belongs to one attachment (container, runtime interface,
 * pod interface), so neither ADD, nor a DEL, nor a failed ADD's rollback touches what the other holds.
 * Real plexusd, real shim, real namespaces.
 */
import assert from 'node:assert/strict';
import { mkdirSync, readdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it, type TestContext } from 'node:test';
import { DaemonFixture, podArgs, ROOT, type ShimOutput } from '../support/daemon';
import { ip, ipTry, NetnsFixture, uniquePrefix } from '../support/netns';

const prefix = uniquePrefix('ak');
const fx = new NetnsFixture(prefix);
const o = 200 + Math.floor(Math.random() * 50);
const t = Math.floor(Math.random() * 200);
const subnet = (i: number): string => `10.${o}.${t + i}.0/24`;

const base = new DaemonFixture('podnet');
const binDir = join(base.dir, 'cni-bin');
const daemon = new DaemonFixture('podnet', { cniBinDir: binDir });

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

before(async () => {
  mkdirSync(binDir);
  symlinkSync(join(ROOT, 'test/fixtures/fail-plugin'), join(binDir, 'fail-plugin'));
  for (const b of ['b0', 'b1']) fx.trackHostLink(`${prefix}${b}`);
  daemon.writeBridgeNetwork({ name: 'podnet', bridge: `${prefix}b0`, subnet: subnet(0) });
  nad('lan', {
    type: 'bridge',
    bridge: `${prefix}b1`,
    isGateway: true,
    ipam: { type: 'host-local', ranges: [[{ subnet: subnet(1) }]] },
  });
  nad('failnet', { type: 'fail-plugin', failOn: 'ADD' });
  await daemon.start();
});
after(async () => {
  await daemon.stop();
  await base.stop();
  fx.cleanup();
});

interface Side {
  readonly cid: string;
  readonly ifname: string;
  readonly ns: string;
  readonly netns: string;
}
/** One attachment of the container `cid`: a netns of its own (named after both) to ADD under CNI_IFNAME `ifname`. */
const side = (cid: string, ifname: string): Side => {
  const ns = fx.create(`${cid.slice(prefix.length)}-${ifname}`);
  return { cid, ifname, ns: ns.name, netns: ns.path };
};
const config = (annotation: string): Record<string, unknown> =>
  daemon.runtimeConfig({
    runtimeConfig: { 'io.kubernetes.cri.pod-annotations': { 'k8s.v1.cni.cncf.io/networks': annotation } },
  });
const call = (command: 'ADD' | 'DEL' | 'CHECK', s: Side, annotation = 'lan'): Promise<ShimOutput> =>
  daemon.cni({
    command,
    containerId: s.cid,
    netns: s.netns,
    ifname: s.ifname,
    args: podArgs('twice', s.cid),
    config: config(annotation),
  });

/** The address of a pod interface, without its prefix. */
const addressOf = (s: Side, ifname: string): string =>
  ip('-n', s.ns, '-o', '-4', 'addr', 'show', ifname).match(/inet (\S+)\//)?.[1] ?? '';
/** The ifindex of the host end of a pod veth (`net1@if42`). */
const hostPeerIndex = (s: Side, ifname: string): string =>
  ip('-n', s.ns, '-o', 'link', 'show', ifname).match(/@if(\d+)/)?.[1] ?? '';
const hostLinkExists = (index: string): boolean =>
  ipTry('-o', 'link', 'show')
    .out.split('\n')
    .some((l) => l.startsWith(`${index}:`));
/** Every lease of a network on disk: address -> "container interface". */
function leases(network: string): Map<string, string> {
  const dir = join(daemon.stateDir, 'ipam', network);
  const files = readdirSync(dir).filter((f) => /^\d/.test(f));
  return new Map(files.map((f) => [f, readFileSync(join(dir, f), 'utf8').split('\n').slice(0, 2).join(' ')]));
}

describe('one container ID, CNI_IFNAME eth0 and eth1, each in its own netns', () => {
  /**
   * A container of the test's own (`name`) ADDed under eth0 and, unless `only`, under eth1: the ADDs checked, and
   * every attachment DELed after the test.
   */
  async function sandbox(t: TestContext, name: string, only?: 'eth0') {
    const cid = `${prefix}${name}`;
    const [first, second] = [side(cid, 'eth0'), side(cid, 'eth1')];
    t.after(async () => {
      for (const s of [first, second]) await call('DEL', s);
    });
    const a = await call('ADD', first);
    assert.equal(a.code, 0, a.stdout);
    if (only === undefined) {
      const b = await call('ADD', second);
      assert.equal(b.code, 0, `the second ADD: ${b.stdout}`);
    }
    const firstLan = addressOf(first, 'net1');
    assert.notEqual(firstLan, '');
    const firstPeers = [hostPeerIndex(first, 'eth0'), hostPeerIndex(first, 'net1')];
    return { cid, first, second, firstLan, firstPeers };
  }

  it('gets distinct addresses and distinct host links for each ADD', async (t) => {
    const { first, second, firstLan, firstPeers } = await sandbox(t, 'add');
    assert.notEqual(addressOf(second, 'net1'), firstLan, 'net1 of each sandbox has its own address');
    assert.notEqual(addressOf(second, 'eth1'), addressOf(first, 'eth0'));
    const secondPeers = [hostPeerIndex(second, 'eth1'), hostPeerIndex(second, 'net1')];
    assert.equal(new Set([...firstPeers, ...secondPeers]).size, 4, 'four host veths');
    assert.equal(leases('lan').size, 2);
  });

  it('DEL of the eth1 attachment leaves the eth0 attachment its lease and its links', async (t) => {
    const { cid, first, second, firstLan, firstPeers } = await sandbox(t, 'del1');
    const d = await call('DEL', second);
    assert.equal(d.code, 0, d.stdout);
    assert.deepEqual([...leases('lan').keys()], [firstLan], 'the first sandbox keeps its lease on lan');
    assert.match(leases('lan').get(firstLan) ?? '', new RegExp(`^${cid} `));
    for (const index of firstPeers)
      assert.ok(hostLinkExists(index), `host link ${index} of the first sandbox is still there`);
    assert.equal(addressOf(first, 'net1'), firstLan);
    const check = await call('CHECK', first);
    assert.equal(check.code, 0, `CHECK of the first sandbox: ${check.stdout}`);
  });

  it('a failed ADD under a third CNI_IFNAME rolls back only its own leases and links', async (t) => {
    const { cid, first, firstLan, firstPeers } = await sandbox(t, 'fail', 'eth0');
    const third = side(cid, 'eth2');
    const f = await call('ADD', third, 'lan, failnet');
    assert.notEqual(f.code, 0, 'failnet fails the ADD');
    assert.deepEqual([...leases('lan').keys()], [firstLan], 'the rollback released only its own lan lease');
    for (const index of firstPeers)
      assert.ok(hostLinkExists(index), `host link ${index} of the first sandbox is still there`);
    const check = await call('CHECK', first);
    assert.equal(check.code, 0, `CHECK of the first sandbox after the rollback: ${check.stdout}`);
    assert.equal((await call('DEL', third, 'lan, failnet')).code, 0);
  });

  it('DEL of the eth0 attachment then releases its lease too', async (t) => {
    const { first, second } = await sandbox(t, 'del0');
    assert.equal((await call('DEL', second)).code, 0);
    const d = await call('DEL', first);
    assert.equal(d.code, 0, d.stdout);
    assert.equal(leases('lan').size, 0);
    assert.deepEqual(daemon.journalFiles(), []);
  });
});

describe('after an upgrade: a record and leases the previous plexusd wrote (owner: the bare pod interface)', () => {
  const oldCid = `${prefix}up`;
  const old: Side = { ...side(oldCid, 'old'), ifname: 'eth0' };
  const fresh: Side = { ...side(oldCid, 'new'), ifname: 'eth1' };
  const callOn = (command: 'ADD' | 'DEL', s: Side): Promise<ShimOutput> =>
    daemon.cni({
      command,
      containerId: oldCid,
      netns: s.netns,
      ifname: s.ifname,
      args: podArgs('upgraded', oldCid),
      config: config('lan'),
    });
  /** Rewrites a file's text: what the previous plexusd wrote differs from this one's only in the owner's interface. */
  const rewrite = (path: string, from: string, to: string): void =>
    writeFileSync(path, readFileSync(path, 'utf8').split(from).join(to));

  it('keeps those leases at start, gives the same container under eth1 its own, and releases them at the DEL', async () => {
    assert.equal((await callOn('ADD', old)).code, 0);
    await daemon.kill('SIGTERM');
    rewrite(join(daemon.stateDir, 'journal', `${oldCid}@eth0.jsonl`), '"ifname":"eth0:', '"ifname":"');
    for (const network of ['podnet', 'lan']) {
      for (const [address, owner] of leases(network)) {
        if (owner.startsWith(`${oldCid} `)) rewrite(join(daemon.stateDir, 'ipam', network, address), '\neth0:', '\n');
      }
    }
    const oldLan = [...leases('lan')].filter(([, owner]) => owner === `${oldCid} net1`).map(([address]) => address);
    assert.equal(oldLan.length, 1, 'the lan lease is in the old format');
    await daemon.start();
    assert.deepEqual(
      [...leases('lan').keys()].filter((a) => oldLan.includes(a)),
      oldLan,
      'recovery kept it: its record holds it',
    );
    assert.equal((await callOn('ADD', fresh)).code, 0);
    const newLan = addressOf(fresh, 'net1');
    assert.notEqual(newLan, oldLan[0]);
    assert.equal((await callOn('DEL', old)).code, 0);
    assert.deepEqual(
      [...leases('lan')].filter(([, owner]) => owner.startsWith(`${oldCid} `)),
      [[newLan, `${oldCid} eth1:net1`]],
    );
    assert.equal((await callOn('DEL', fresh)).code, 0);
    assert.equal(leases('lan').size, 0);
    assert.equal(leases('podnet').size, 0);
  });
});
