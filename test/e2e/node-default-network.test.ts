/**
 * The node's own CNI config file as the default network (what the installer sets up): eth0 is made by the node's own
 * plugins with their own IPAM state, shared with sandboxes made before Plexus; a DEL of such a sandbox, which Plexus
 * never attached, is handed to them, so its address is released where it was taken. Real reference plugins, real
 * namespaces.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { DaemonFixture, podArgs } from '../support/daemon';
import { restoreForwardingAfterwards } from '../support/forwarding';
import { ip, NetnsFixture, podLinks, uniquePrefix } from '../support/netns';
import { DEBIAN_PLUGINS } from '../support/plugin-dir';

const prefix = uniquePrefix('nd');
const subnet = `10.${200 + Math.floor(Math.random() * 50)}.${Math.floor(Math.random() * 250)}`;

describe("the node's own CNI config as the default network", () => {
  const fx = new NetnsFixture(prefix);
  const dir = mkdtempSync(join(tmpdir(), 'plexus-nodenet-'));
  const dataDir = join(dir, 'cni-data');
  const confFile = join(dir, '10-node.conflist');
  const binDir = join(dir, 'bin');
  const callLog = join(dir, 'bridge-calls');
  const calls = (): string[] => (existsSync(callLog) ? readFileSync(callLog, 'utf8').trim().split('\n') : []);
  const nodeConfig = {
    cniVersion: '1.0.0',
    name: 'nodenet',
    plugins: [
      {
        type: 'bridge',
        bridge: `${prefix}br`,
        isGateway: true,
        ipam: { type: 'host-local', ranges: [[{ subnet: `${subnet}.0/24` }]], dataDir },
      },
    ],
  };
  let daemon: DaemonFixture;
  restoreForwardingAfterwards();
  const leases = (): string[] => {
    try {
      return readdirSync(join(dataDir, 'nodenet')).filter((f) => /^\d/.test(f));
    } catch {
      return [];
    }
  };

  before(async () => {
    fx.trackHostLink(`${prefix}br`);
    writeFileSync(confFile, JSON.stringify(nodeConfig));
    // The node's bridge plugin, through a wrapper that logs each call: which DELs reach the node's plugins.
    mkdirSync(binDir);
    for (const p of readdirSync(DEBIAN_PLUGINS))
      if (p !== 'bridge') symlinkSync(join(DEBIAN_PLUGINS, p), join(binDir, p));
    writeFileSync(
      join(binDir, 'bridge'),
      `#!/bin/sh\necho "$CNI_COMMAND $CNI_CONTAINERID" >> ${callLog}\nexec ${DEBIAN_PLUGINS}/bridge\n`,
      { mode: 0o755 },
    );
    daemon = new DaemonFixture(confFile, { cniBinDir: binDir });
    await daemon.start();
  });
  after(async () => {
    await daemon?.stop();
    fx.cleanup();
    rmSync(dir, { recursive: true, force: true });
  });

  it("makes eth0 with the node's plugins (their lease store), and hands them the DEL of a sandbox they made before Plexus", async () => {
    // A sandbox from before Plexus: the runtime ran the node's plugin itself.
    const before = fx.create('before');
    const old = `${prefix}-old`;
    execFileSync(join(DEBIAN_PLUGINS, 'bridge'), [], {
      input: JSON.stringify({ ...nodeConfig.plugins[0], name: 'nodenet', cniVersion: '1.0.0' }),
      env: {
        CNI_COMMAND: 'ADD',
        CNI_CONTAINERID: old,
        CNI_NETNS: before.path,
        CNI_IFNAME: 'eth0',
        CNI_PATH: DEBIAN_PLUGINS,
        CNI_ARGS: podArgs('old', old),
        PATH: process.env.PATH ?? '',
      },
    });
    assert.equal(leases().length, 1, "the node plugin's lease");

    // A sandbox through Plexus: same lease store, so no address is handed out twice.
    const now = fx.create('now');
    const cid = `${prefix}-new`;
    const added = await daemon.cni({
      command: 'ADD',
      containerId: cid,
      netns: now.path,
      ifname: 'eth0',
      args: podArgs('new', cid),
      config: daemon.runtimeConfig({}, '1.0.0'),
    });
    assert.equal(added.code, 0, added.stdout);
    assert.equal(leases().length, 2, "Plexus's eth0 took its address from the node plugin's store");
    assert.notEqual(
      /inet (\S+)/.exec(ip('-n', now.name, '-o', '-4', 'addr', 'show', 'eth0'))![1],
      /inet (\S+)/.exec(ip('-n', before.name, '-o', '-4', 'addr', 'show', 'eth0'))![1],
    );

    // The old sandbox's DEL now reaches Plexus, which never attached it: forwarded, its lease and veth go.
    const del = await daemon.cni({
      command: 'DEL',
      containerId: old,
      netns: before.path,
      ifname: 'eth0',
      args: podArgs('old', old),
      config: daemon.runtimeConfig({}, '1.0.0'),
    });
    assert.equal(del.code, 0, del.stdout);
    assert.equal(leases().length, 1, "the old sandbox's address is released");
    assert.deepEqual(podLinks(before.name), []);
    assert.equal(
      (
        await daemon.cni({
          command: 'DEL',
          containerId: old,
          netns: '',
          ifname: 'eth0',
          args: podArgs('old', old),
          config: daemon.runtimeConfig({}, '1.0.0'),
        })
      ).code,
      0,
      'a second DEL (empty netns) succeeds',
    );

    assert.equal(
      (
        await daemon.cni({
          command: 'DEL',
          containerId: cid,
          netns: now.path,
          ifname: 'eth0',
          args: podArgs('new', cid),
          config: daemon.runtimeConfig({}, '1.0.0'),
        })
      ).code,
      0,
    );
    assert.deepEqual(leases(), []);
    assert.deepEqual(daemon.journalFiles(), []);
    // containerd's second DEL of a sandbox Plexus removed: answered without running the node's plugins again.
    assert.equal(
      (
        await daemon.cni({
          command: 'DEL',
          containerId: cid,
          netns: '',
          ifname: 'eth0',
          args: podArgs('new', cid),
          config: daemon.runtimeConfig({}, '1.0.0'),
        })
      ).code,
      0,
    );
    assert.deepEqual(
      calls().filter((c) => c.endsWith(cid)),
      [`ADD ${cid}`, `DEL ${cid}`],
      'the node plugin saw one ADD and one DEL of the Plexus sandbox',
    );
  });
});
