/**
 * Detaching one network from a running pod (what hot-plug builds on), with the engine in-process on the real kernel:
 * only that attachment's steps are undone, its lease released and its interface removed; the rest of the pod stays,
 * and a later DEL still removes everything.
 */
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import pino from 'pino';
import { parseCniRequest } from '../../src/cni/request';
import { AttachmentEngine } from '../../src/engine/engine';
import { Journal } from '../../src/engine/journal';
import { hostVethName } from '../../src/drivers/bridge';
import { DriverRegistry } from '../../src/drivers/registry';
import { Ipam } from '../../src/ipam';
import { Kernel } from '../../src/kernel/kernel';
import { NetworkDirectory } from '../../src/networks/directory';
import { restoreForwardingAfterwards } from '../support/forwarding';
import { hostLinksWithPrefix, ip, NetnsFixture, podLinks, uniquePrefix } from '../support/netns';
import { DEBIAN_PLUGINS } from '../support/plugin-dir';

const prefix = uniquePrefix('pd');
const fx = new NetnsFixture(prefix);
const dir = mkdtempSync(join(tmpdir(), 'plexus-detach-'));
const o = 200 + Math.floor(Math.random() * 50);
const t = Math.floor(Math.random() * 200);
let kernel: Kernel;
let ipam: Ipam;
let journal: Journal;
let engine: AttachmentEngine;

restoreForwardingAfterwards();

function nad(name: string, config: Record<string, unknown>): void {
  writeFileSync(
    join(dir, 'networks', `${name}.json`),
    JSON.stringify({
      apiVersion: 'k8s.cni.cncf.io/v1',
      kind: 'NetworkAttachmentDefinition',
      metadata: { name, namespace: 'default' },
      spec: { config: JSON.stringify({ cniVersion: '1.0.0', name, ...config }) },
    }),
  );
}
const ipamOf = (i: number): Record<string, unknown> => ({
  type: 'host-local',
  ranges: [[{ subnet: `10.${o}.${t + i}.0/24` }]],
});

before(async () => {
  mkdirSync(join(dir, 'networks'));
  for (const l of ['b0', 'b1', 'up', 'upp']) fx.trackHostLink(`${prefix}${l}`);
  ip('link', 'add', `${prefix}up`, 'type', 'veth', 'peer', 'name', `${prefix}upp`);
  ip('link', 'set', `${prefix}up`, 'up');
  nad('podnet', { type: 'bridge', bridge: `${prefix}b0`, isGateway: true, ipam: ipamOf(0) });
  nad('blue', { type: 'bridge', bridge: `${prefix}b1`, ipam: ipamOf(1) });
  nad('mv', { type: 'macvlan', master: `${prefix}up`, mode: 'bridge', ipam: ipamOf(2) });
  kernel = new Kernel();
  ipam = await Ipam.open(join(dir, 'ipam'), { sync: false });
  journal = await Journal.open(join(dir, 'journal'), false);
  engine = new AttachmentEngine({
    ports: {
      kernel,
      ipam,
      journal,
      networks: new NetworkDirectory(join(dir, 'networks')),
      drivers: new DriverRegistry(),
    },
    settings: {
      cniBinDir: DEBIAN_PLUGINS,
      naming: 'multus',
      selectionAnnotation: true,
      defaultNetworks: [],
      defaultNetwork: 'podnet',
    },
    log: pino({ level: 'silent' }),
  });
});
after(async () => {
  fx.cleanup();
  await kernel.close();
  rmSync(dir, { recursive: true, force: true });
});

let n = 0;
function request(command: 'ADD' | 'DEL') {
  const cid = `${prefix}c${n}`;
  const call = {
    env: {
      CNI_COMMAND: command,
      CNI_CONTAINERID: cid,
      CNI_NETNS: `/var/run/netns/${prefix}-p${n}`,
      CNI_IFNAME: 'eth0',
      CNI_PATH: DEBIAN_PLUGINS,
      CNI_ARGS: `IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=pod${n}`,
    },
    stdin: JSON.stringify({
      cniVersion: '1.0.0',
      name: 'plexus',
      type: 'plexus-cni',
      runtimeConfig: { 'io.kubernetes.cri.pod-annotations': { 'k8s.v1.cni.cncf.io/networks': 'blue, mv' } },
    }),
  };
  const parsed = parseCniRequest(call);
  if (!parsed.ok) throw parsed.error;
  return parsed.value as Parameters<AttachmentEngine['add']>[0];
}
async function attachedPod(): Promise<{ cid: string; ns: string }> {
  n++;
  const ns = fx.create(`p${n}`);
  const cid = `${prefix}c${n}`;
  for (const i of ['eth0', 'net1']) fx.trackHostLink(hostVethName(cid, 'eth0', i));
  const r = await engine.add(request('ADD'));
  assert.ok(r.ok, !r.ok ? r.error.message : '');
  return { cid, ns: ns.name };
}
const leasesOf = async (cid: string): Promise<string[]> =>
  (await ipam.leases())
    .filter((l) => l.containerId === cid)
    .map((l) => `${l.network} ${l.ifname}`)
    .sort();

describe('detaching one network from a running pod', () => {
  it('removes that interface, its host veth and its lease, and keeps the rest of the pod', async () => {
    const pod = await attachedPod();
    assert.deepEqual(podLinks(pod.ns), ['eth0', 'net1', 'net2']);
    assert.deepEqual(await leasesOf(pod.cid), ['blue eth0:net1', 'mv eth0:net2', 'podnet eth0:eth0']);

    const r = await engine.detachAttachment(pod.cid, 'eth0', { network: 'default/blue', ifname: 'net1' });
    assert.ok(r.ok, !r.ok ? r.error.message : '');
    assert.deepEqual(podLinks(pod.ns), ['eth0', 'net2']);
    assert.deepEqual(hostLinksWithPrefix(hostVethName(pod.cid, 'eth0', 'net1')), []);
    assert.deepEqual(hostLinksWithPrefix(hostVethName(pod.cid, 'eth0', 'eth0')), [
      hostVethName(pod.cid, 'eth0', 'eth0'),
    ]);
    assert.deepEqual(await leasesOf(pod.cid), ['mv eth0:net2', 'podnet eth0:eth0']);
    assert.deepEqual(
      r.value.interfaces.filter((i) => i.sandbox).map((i) => i.name),
      ['eth0', 'net2'],
      'the new result lacks net1',
    );

    const record = await journal.load(pod.cid, 'eth0');
    assert.deepEqual(
      record?.details?.attachments.map((a) => a.ifname),
      ['eth0', 'net2'],
    );
    assert.deepEqual(
      record?.details?.networkStatus.map((s) => s.interface),
      ['eth0', 'net2'],
    );
    assert.deepEqual(record?.result, r.value);
    assert.ok(
      record?.undoOwners.every((o) => o?.ifname !== 'net1'),
      'the record holds no step of net1 any more',
    );

    const again = await engine.detachAttachment(pod.cid, 'eth0', { network: 'default/blue', ifname: 'net1' });
    assert.ok(!again.ok && again.error.code === 7 && /no such attachment/.test(again.error.message));
    const dflt = await engine.detachAttachment(pod.cid, 'eth0', { network: 'default/podnet', ifname: 'eth0' });
    assert.ok(!dflt.ok && /default network cannot be detached/.test(dflt.error.message));

    n = Number(pod.cid.slice(`${prefix}c`.length));
    assert.ok((await engine.del(request('DEL'))).ok);
    assert.deepEqual(podLinks(pod.ns), []);
    assert.deepEqual(await leasesOf(pod.cid), []);
    assert.equal(await journal.load(pod.cid, 'eth0'), undefined);
  });

  it('refuses a pod attached by an older plexusd (journal v0), whose DEL still removes everything', async () => {
    const pod = await attachedPod();
    // Rewrite the record as a v0 daemon wrote it: no versions, no attachments on the steps.
    const file = join(dir, 'journal', `${pod.cid}@eth0.jsonl`);
    const v0 = readFileSync(file, 'utf8')
      .trim()
      .split('\n')
      .map((l) => {
        const { v: _v, a: _a, ...rest } = JSON.parse(l) as Record<string, unknown>;
        return JSON.stringify(rest);
      });
    writeFileSync(file, `${v0.join('\n')}\n`);
    const r = await engine.detachAttachment(pod.cid, 'eth0', { network: 'default/mv', ifname: 'net2' });
    assert.ok(!r.ok && /older plexusd \(journal v0\)/.test(r.error.message), !r.ok ? r.error.message : 'detached');
    assert.deepEqual(podLinks(pod.ns), ['eth0', 'net1', 'net2'], 'nothing was touched');
    n = Number(pod.cid.slice(`${prefix}c`.length));
    assert.ok((await engine.del(request('DEL'))).ok);
    assert.deepEqual(podLinks(pod.ns), []);
    assert.deepEqual(await leasesOf(pod.cid), []);
  });
});
