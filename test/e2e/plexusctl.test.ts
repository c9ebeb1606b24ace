/** plexusctl against a real daemon: attachments, one attachment's transaction record, networks, GC. */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { request as httpRequest } from 'node:http';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { after, before, it } from 'node:test';
import { hostVethName } from '../../src/drivers/bridge';
import { DaemonFixture, podArgs, ROOT } from '../support/daemon';
import { hostLinksWithPrefix, ip, NetnsFixture, uniquePrefix } from '../support/netns';

const prefix = uniquePrefix('px');
const fx = new NetnsFixture(prefix);
const daemon = new DaemonFixture('podnet');
const cid = `${prefix}c1`;
const ctl = async (...args: string[]): Promise<string> =>
  (await promisify(execFile)(join(ROOT, 'bin/plexusctl'), ['--socket', daemon.socket, ...args])).stdout;

before(async () => {
  fx.trackHostLink(`${prefix}br`);
  fx.trackHostLink(hostVethName(cid, 'eth0', 'eth0'));
  daemon.writeBridgeNetwork({
    name: 'podnet',
    bridge: `${prefix}br`,
    subnet: `10.${200 + Math.floor(Math.random() * 50)}.${Math.floor(Math.random() * 250)}.0/24`,
  });
  daemon.writeNad(
    'bad.yaml',
    'apiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\nmetadata: {name: Bad_Name}\nspec: {config: "{}"}\n',
  );
  await daemon.start();
  const netns = fx.create('pod').path;
  const out = await daemon.cni({
    command: 'ADD',
    containerId: cid,
    netns,
    ifname: 'eth0',
    args: podArgs('web', cid, 'shop'),
    config: daemon.runtimeConfig(),
  });
  assert.equal(out.code, 0, out.stdout);
});
after(async () => {
  await daemon.cni({ command: 'DEL', containerId: cid, netns: '', ifname: 'eth0', config: daemon.runtimeConfig() });
  await daemon.stop();
  fx.cleanup();
});

it('lists attachments with pod, network, IPs and state', async () => {
  const text = await ctl('attachments');
  const line = text.split('\n').find((l) => l.startsWith(cid));
  assert.ok(line, text);
  assert.match(line, /eth0\s+shop\/web\s+default\/podnet\s+10\.\d+\.\d+\.\d+\/24\s+attached/);
});

it('shows one attachment with its transaction record and timings', async () => {
  const text = await ctl('show', cid, 'eth0');
  assert.match(text, /interface 2: eth0 .* \(in \/var\/run\/netns\//);
  assert.match(text, /attach default\/podnet as eth0 \(bridge\) \(\d+(\.\d+)? ms\)/);
  assert.match(text, /committed/);
  assert.match(text, /undo steps recorded: 2/);
});

it('prints JSON with -o json', async () => {
  const records = JSON.parse(await ctl('-o', 'json', 'attachments')) as { meta: { containerId: string } }[];
  assert.deepEqual(
    records.map((r) => r.meta.containerId),
    [cid],
  );
});

it('lists networks and reports invalid definitions', async () => {
  const text = await ctl('networks');
  assert.match(text, /default\/podnet\s+podnet\s+1\.1\.0\s+bridge/);
  assert.match(text, /invalid: .*bad\.yaml.*metadata\.name/);
});

it('fails clearly when the daemon cannot be reached', async () => {
  await assert.rejects(
    promisify(execFile)(join(ROOT, 'bin/plexusctl'), ['--socket', '/nonexistent/plexus.sock', 'attachments']),
    /cannot reach plexusd at \/nonexistent\/plexus\.sock/,
  );
});

/** Adds a pod on the default network and answers its address (without prefix). */
async function addPod(id: string): Promise<{ netns: string; nsName: string; address: string }> {
  fx.trackHostLink(hostVethName(id, 'eth0', 'eth0'));
  const ns = fx.create(id.slice(-6));
  const out = await daemon.cni({
    command: 'ADD',
    containerId: id,
    netns: ns.path,
    ifname: 'eth0',
    args: podArgs(id, id),
    config: daemon.runtimeConfig(),
  });
  assert.equal(out.code, 0, out.stdout);
  return {
    netns: ns.path,
    nsName: ns.name,
    address: (out.json as { ips: { address: string }[] }).ips[0]!.address.split('/')[0]!,
  };
}
const attachedIds = async (): Promise<string[]> =>
  (JSON.parse(await ctl('-o', 'json', 'attachments')) as { meta: { containerId: string } }[])
    .map((r) => r.meta.containerId)
    .sort();

it('gc removes an attachment whose network namespace is gone, releasing its lease; --dry-run only lists it', async () => {
  const gone = `${prefix}gone`;
  const pod = await addPod(gone);
  ip('netns', 'del', pod.nsName); // the runtime lost the sandbox without a DEL: the lease would leak
  const dry = await ctl('gc', '--dry-run');
  assert.match(dry, new RegExp(`would remove ${gone} eth0: network namespace ${pod.netns} is gone`));
  assert.match(dry, /1 to remove, 1 kept, 0 failed/);
  assert.deepEqual(await attachedIds(), [cid, gone].sort(), 'a dry run changes nothing');
  assert.ok(daemon.leases('podnet').includes(pod.address));

  const text = await ctl('gc');
  assert.match(text, new RegExp(`removed ${gone} eth0: network namespace`));
  assert.deepEqual(await attachedIds(), [cid], 'the live pod is kept');
  assert.ok(!daemon.leases('podnet').includes(pod.address), 'the lease is released');
});

it('gc --keep removes every attachment not kept, with its host link, and reports as JSON', async () => {
  const extra = `${prefix}extra`;
  await addPod(extra);
  const report = JSON.parse(await ctl('-o', 'json', 'gc', '--keep', `${cid}@eth0`)) as {
    removed: { containerId: string; reason: string }[];
    kept: number;
    failures: unknown[];
  };
  assert.deepEqual(
    report.removed.map((r) => [r.containerId, r.reason]),
    [[extra, 'not in the keep list']],
  );
  assert.equal(report.kept, 1);
  assert.deepEqual(report.failures, []);
  assert.deepEqual(await attachedIds(), [cid]);
  assert.deepEqual(hostLinksWithPrefix(hostVethName(extra, 'eth0', 'eth0')), []);
});

it('gc rejects a malformed request with a clear error and removes nothing', async () => {
  const bad = await new Promise<{ status: number; body: string }>((resolve, reject) => {
    const req = httpRequest({ socketPath: daemon.socket, path: '/v1/gc', method: 'POST' }, (res) => {
      let body = '';
      res.on('data', (c: Buffer) => (body += c.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('error', reject);
    req.end(JSON.stringify({ keep: 'not-a-list' }));
  });
  assert.equal(bad.status, 400);
  assert.match(bad.body, /invalid GC request.*keep/);
  await assert.rejects(
    promisify(execFile)(join(ROOT, 'bin/plexusctl'), ['--socket', daemon.socket, 'gc', '--everything']),
    (e: { code: number; stdout: string }) => e.code === 2 && /unexpected argument --everything/.test(e.stdout),
  );
  assert.deepEqual(await attachedIds(), [cid]);
});
