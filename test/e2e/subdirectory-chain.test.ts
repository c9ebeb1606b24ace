/**
 * Multus's subdirectory-chaining scenario on a Plexus node: the default network is the node's `.conflist` (Multus's
 * clusterNetwork as a path, linked by the installer), and `<conf dir>/<network name>/*.conf` runs after it. Real
 * reference plugins 1.9.1 (bridge, host-local, tuning), real namespaces.
 */
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { DaemonFixture, podArgs } from '../support/daemon';
import { restoreForwardingAfterwards } from '../support/forwarding';
import { ip, NetnsFixture, podLinks, uniquePrefix } from '../support/netns';
import { referencePlugins } from '../support/plugin-dir';

const prefix = uniquePrefix('sc');
const subnet = `10.${200 + Math.floor(Math.random() * 50)}.${Math.floor(Math.random() * 250)}`;

describe('subdirectory chaining of the default network (Multus subdirectory-chaining)', () => {
  const fx = new NetnsFixture(prefix);
  const dir = mkdtempSync(join(tmpdir(), 'plexus-subchain-e2e-'));
  const confFile = join(dir, '10-kindnet.conflist');
  const link = join(dir, 'state', 'default-network');
  const tuningData = join(dir, 'tuning');
  let daemon: DaemonFixture;
  restoreForwardingAfterwards();

  before(async () => {
    fx.trackHostLink(`${prefix}br`);
    writeFileSync(
      confFile,
      JSON.stringify({
        cniVersion: '1.0.0',
        name: 'kindnet',
        plugins: [
          {
            type: 'bridge',
            bridge: `${prefix}br`,
            ipam: { type: 'host-local', ranges: [[{ subnet: `${subnet}.0/24` }]], dataDir: join(dir, 'ipam') },
          },
        ],
      }),
    );
    // Multus's scenario, as its DaemonSet writes it, plus promisc so tuning keeps a backup its DEL must restore.
    mkdirSync(join(dir, 'kindnet'));
    writeFileSync(
      join(dir, 'kindnet', 'sysctltwiddle.conf'),
      JSON.stringify({
        cniVersion: '1.0.0',
        name: 'sysctltwiddle',
        type: 'tuning',
        promisc: true,
        dataDir: tuningData,
        sysctl: { 'net.ipv4.conf.IFNAME.arp_filter': '1' },
      }),
    );
    mkdirSync(join(dir, 'state'));
    symlinkSync(confFile, link);
    daemon = new DaemonFixture(link, { cniBinDir: referencePlugins() });
    await daemon.start();
  });
  after(async () => {
    await daemon?.stop();
    fx.cleanup();
    rmSync(dir, { recursive: true, force: true });
  });

  it("sets the chained sysctl on eth0 at ADD, and runs the chain's DEL before the network's at DEL", async () => {
    const pod = fx.create('pod');
    const cid = `${prefix}-c`;
    const call = (command: 'ADD' | 'DEL') =>
      daemon.cni({
        command,
        containerId: cid,
        netns: pod.path,
        ifname: 'eth0',
        args: podArgs('sysctl-modified', cid),
        config: daemon.runtimeConfig({}, '1.0.0'),
      });
    const added = await call('ADD');
    assert.equal(added.code, 0, added.stdout);
    assert.equal(
      ip('netns', 'exec', pod.name, 'cat', '/proc/sys/net/ipv4/conf/eth0/arp_filter').trim(),
      '1',
      'net.ipv4.conf.eth0.arp_filter',
    );
    assert.match(ip('-n', pod.name, 'link', 'show', 'eth0'), /PROMISC/);
    assert.deepEqual(readdirSync(tuningData), [`${cid}_eth0.json`], "tuning's backup of eth0");

    const deleted = await call('DEL');
    assert.equal(deleted.code, 0, deleted.stdout);
    // tuning removes its backup only while eth0 exists: its DEL ran, with its recorded config, before bridge's.
    assert.equal(existsSync(join(tuningData, `${cid}_eth0.json`)), false, "tuning's DEL restored eth0");
    assert.deepEqual(podLinks(pod.name), []);
    assert.deepEqual(daemon.journalFiles(), []);
  });
});
