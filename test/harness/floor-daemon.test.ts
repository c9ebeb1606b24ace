/**
 * The bench's minimal Node.js daemon (scripts/lib/bench/floor-daemon.ts): the row "ADD via bin/plexus-cni -> a
 * Node.js daemon that runs only this batch" is only a floor if that daemon really makes the attachment, through the
 * real shim, and leaves nothing behind after the DEL.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { invoke, newPod, type Plugin } from '../../scripts/lib/cni';
import { SHIM } from '../support/daemon';
import { ip, ipTry, NetnsFixture, uniquePrefix } from '../support/netns';

const prefix = uniquePrefix('pxfd');
const fx = new NetnsFixture(prefix);
const bridge = `${prefix}br`;
const root = mkdtempSync(join(tmpdir(), 'plexus-floor-daemon-'));
const socketPath = join(root, 'plexus.sock');
let daemon: ReturnType<typeof spawn> | undefined;

before(async () => {
  ip('link', 'add', bridge, 'type', 'bridge');
  fx.trackHostLink(bridge);
  ip('link', 'set', bridge, 'up');
  const settings = { socketPath, bridge, net: '10.247', prefix: `${prefix}h` };
  daemon = spawn(
    process.execPath,
    [join(__dirname, '../../scripts/lib/bench/floor-daemon.js'), JSON.stringify(settings)],
    {
      stdio: ['ignore', 'pipe', 'inherit'],
    },
  );
  await new Promise<void>((resolve, reject) => {
    daemon!.once('exit', (code) => reject(new Error(`floor daemon exited ${code}`)));
    daemon!.stdout!.once('data', () => resolve());
  });
});

after(() => {
  if (daemon?.pid !== undefined && daemon.exitCode === null) daemon.kill('SIGTERM');
  fx.cleanup();
  rmSync(root, { recursive: true, force: true });
});

describe("the bench's minimal Node.js daemon behind bin/plexus-cni", () => {
  it('ADD makes the veth on the bridge and eth0 with its address and default route; DEL removes the host veth', async () => {
    const pod = newPod('floor', 'p0', fx.create('p0').path);
    const plugin: Plugin = {
      binary: SHIM,
      env: {},
      config: { cniVersion: '1.1.0', name: 'floor', type: 'plexus-cni', socketPath },
    };
    const added = await invoke(plugin, 'ADD', pod);
    assert.equal(added.exitCode, 0, added.stdout + added.stderr);
    fx.trackHostLink(`${prefix}h0`);
    const result = JSON.parse(added.stdout) as { ips: { address: string }[] };
    assert.equal(result.ips[0]?.address, '10.247.1.2/16');
    assert.match(ip('-o', 'link', 'show', `${prefix}h0`), new RegExp(`master ${bridge} `));
    const inPod = (...args: string[]): string => ip('-n', `${prefix}-p0`, ...args);
    assert.match(inPod('-o', 'addr', 'show', 'dev', 'eth0'), /inet 10\.247\.1\.2\/16/);
    assert.match(inPod('route', 'show', 'default'), /default via 10\.247\.0\.1 dev eth0/);
    assert.match(inPod('-o', 'link', 'show', 'eth0'), /[<,]UP[,>]/);

    const deleted = await invoke(plugin, 'DEL', pod);
    assert.equal(deleted.exitCode, 0, deleted.stdout + deleted.stderr);
    assert.notEqual(ipTry('link', 'show', `${prefix}h0`).status, 0, 'the host veth is gone after DEL');
  });
});
