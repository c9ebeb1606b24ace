/** plexusctl against a real daemon: attachments, one attachment's transaction record, networks, GC. */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
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
// Multus's cache, where the tests of adopted sandboxes write what Multus would have.
const multusCacheDir = join(daemon.dir, 'multus-cache');

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
  daemon.addSettings({ multusCacheDir });
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

/**
 * `count` sandboxes as Multus leaves them (its cache of each, libcni's record of its one network with the pod and the
 * address); answers their container IDs. Removed by the returned function.
 */
function writeAdoptedSandboxes(count: number): { ids: string[]; remove: () => void } {
  mkdirSync(join(multusCacheDir, 'results'), { recursive: true });
  const ids = Array.from({ length: count }, (_, i) => `${prefix}m${i}`);
  const paths: string[] = [];
  for (const [i, id] of ids.entries()) {
    const conf = { cniVersion: '1.0.0', name: 'mvnet', type: 'macvlan' };
    const bytes = Buffer.from(JSON.stringify(conf)).toString('base64');
    paths.push(join(multusCacheDir, id), join(multusCacheDir, 'results', `mvnet-${id}-eth0`));
    writeFileSync(paths.at(-2)!, JSON.stringify([{ Name: 'mvnet', Bytes: bytes }]));
    const args = [
      ['K8S_POD_NAMESPACE', 'shop'],
      ['K8S_POD_NAME', `m${i}`],
    ];
    const result = { cniVersion: '1.0.0', ips: [{ address: `10.9.${i >> 8}.${i & 255}/16` }] };
    const record = { kind: 'cniCacheV1', containerId: id, ifName: 'eth0', networkName: 'mvnet', config: bytes };
    writeFileSync(paths.at(-1)!, JSON.stringify({ ...record, cniArgs: args, result }));
  }
  return { ids, remove: () => paths.forEach((p) => rmSync(p, { force: true })) };
}

/** plexusctl's output through a shell pipe into `reader` (e.g. `wc -l`), as an operator runs it. */
async function throughPipe(reader: string, ...args: string[]): Promise<string> {
  const script = `"$0" --socket "$1" ${args.join(' ')} | ${reader}`;
  const argv = ['-c', script, join(ROOT, 'bin/plexusctl'), daemon.socket];
  return (await promisify(execFile)('sh', argv, { maxBuffer: 64 << 20 })).stdout;
}

it('prints every line of a listing larger than a pipe holds into a pipe', async () => {
  const adopted = writeAdoptedSandboxes(3000);
  try {
    const count = Number((await throughPipe('wc -l', 'attachments')).trim());
    assert.equal(count, 1 + 1 + 3000, 'the header, our attachment and 3000 adopted sandboxes');
    const last = (await throughPipe('tail -n 1', 'attachments')).trim();
    assert.match(last, new RegExp(`^${[...adopted.ids].sort().at(-1)!}\\s`));
    const json = JSON.parse(await throughPipe('cat', '-o', 'json', 'attachments')) as unknown[];
    assert.equal(json.length, 1 + 3000);
  } finally {
    adopted.remove();
  }
});

it('lists adopted sandboxes with the pod and the addresses libcni recorded, in the table and in JSON', async () => {
  const adopted = writeAdoptedSandboxes(2);
  try {
    const id = adopted.ids[1]!;
    const line = (await ctl('attachments')).split('\n').find((l) => l.startsWith(id));
    assert.match(line ?? '', /^\S+\s+eth0\s+shop\/m1\s+mvnet\s+10\.9\.0\.1\/16\s+adopted \(multus\)$/);
    const records = JSON.parse(await ctl('-o', 'json', 'attachments')) as {
      meta: { containerId: string; pod: unknown };
      state: string;
      interfaces?: unknown;
    }[];
    const listed = records.find((r) => r.meta.containerId === id);
    assert.equal(listed?.state, 'adopted');
    assert.deepEqual(listed?.meta.pod, { namespace: 'shop', name: 'm1' });
    assert.deepEqual(listed?.interfaces, [{ network: 'mvnet', ifname: 'eth0', ips: ['10.9.0.1/16'] }]);
  } finally {
    adopted.remove();
  }
});
