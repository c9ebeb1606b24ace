/** plexusctl against a real daemon: attachments, one attachment's transaction record, networks. */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { after, before, it } from 'node:test';
import { hostVethName } from '../../src/drivers/bridge';
import { DaemonFixture, podArgs, ROOT } from '../support/daemon';
import { NetnsFixture, uniquePrefix } from '../support/netns';

const prefix = uniquePrefix('px');
const fx = new NetnsFixture(prefix);
const daemon = new DaemonFixture('podnet');
const cid = `${prefix}c1`;
const ctl = async (...args: string[]): Promise<string> => (await promisify(execFile)(join(ROOT, 'bin/plexusctl'), ['--socket', daemon.socket, ...args])).stdout;

before(async () => {
  fx.trackHostLink(`${prefix}br`);
  fx.trackHostLink(hostVethName(cid, 'eth0'));
  daemon.writeBridgeNetwork({ name: 'podnet', bridge: `${prefix}br`, subnet: `10.${200 + Math.floor(Math.random() * 50)}.${Math.floor(Math.random() * 250)}.0/24` });
  daemon.writeNad('bad.yaml', 'apiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\nmetadata: {name: Bad_Name}\nspec: {config: "{}"}\n');
  await daemon.start();
  const netns = fx.create('pod').path;
  const out = await daemon.cni({ command: 'ADD', containerId: cid, netns, ifname: 'eth0', args: podArgs('web', cid, 'shop'), config: daemon.runtimeConfig() });
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
  assert.deepEqual(records.map((r) => r.meta.containerId), [cid]);
});

it('lists networks and reports invalid definitions', async () => {
  const text = await ctl('networks');
  assert.match(text, /default\/podnet\s+podnet\s+1\.1\.0\s+bridge/);
  assert.match(text, /invalid: .*bad\.yaml.*metadata\.name/);
});

it('fails clearly when the daemon cannot be reached', async () => {
  await assert.rejects(promisify(execFile)(join(ROOT, 'bin/plexusctl'), ['--socket', '/nonexistent/plexus.sock', 'attachments']), /cannot reach plexusd at \/nonexistent\/plexus\.sock/);
});
