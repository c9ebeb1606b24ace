/**
 * Multus's subdirectory-chaining-passthru scenario on a Plexus node: with plexusd's --auxiliary-chain (Multus's
 * auxiliaryCNIChainName), the chain directory's tuning plugin sets net.ipv4.conf.eth0.arp_filter in every pod, run
 * after the pod's networks under net<position> with passthru's empty result, and its DEL runs before theirs. Real
 * reference plugins 1.9.1 (bridge, host-local, tuning), real namespaces.
 */
import assert from 'node:assert/strict';
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
import { referencePlugins } from '../support/plugin-dir';

const prefix = uniquePrefix('ax');
const subnet = `10.${200 + Math.floor(Math.random() * 50)}.${Math.floor(Math.random() * 250)}`;

describe('the auxiliary chain (Multus subdirectory-chaining-passthru)', () => {
  const fx = new NetnsFixture(prefix);
  const dir = mkdtempSync(join(tmpdir(), 'plexus-auxchain-e2e-'));
  const confFile = join(dir, '10-node.conf');
  const chainDir = join(dir, 'vendor-cni-chain');
  const binDir = join(dir, 'bin');
  const callLog = join(dir, 'calls');
  const calls = (): string[] => (existsSync(callLog) ? readFileSync(callLog, 'utf8').trim().split('\n') : []);
  let daemon: DaemonFixture;
  restoreForwardingAfterwards();

  before(async () => {
    const plugins = referencePlugins();
    fx.trackHostLink(`${prefix}br`);
    writeFileSync(
      confFile,
      JSON.stringify({
        cniVersion: '1.0.0',
        name: 'node',
        type: 'bridge',
        bridge: `${prefix}br`,
        ipam: { type: 'host-local', ranges: [[{ subnet: `${subnet}.0/24` }]], dataDir: join(dir, 'ipam') },
      }),
    );
    mkdirSync(chainDir);
    writeFileSync(
      join(chainDir, 'sysctltwiddle.conf'),
      JSON.stringify({
        cniVersion: '1.0.0',
        name: 'sysctltwiddle',
        type: 'tuning',
        sysctl: { 'net.ipv4.conf.eth0.arp_filter': '1' },
      }),
    );
    // The reference plugins, bridge and tuning through wrappers that log each call: which runs when, on what name.
    mkdirSync(binDir);
    for (const p of readdirSync(plugins))
      if (p !== 'bridge' && p !== 'tuning') symlinkSync(join(plugins, p), join(binDir, p));
    for (const p of ['bridge', 'tuning'])
      writeFileSync(
        join(binDir, p),
        `#!/bin/sh\necho "${p} $CNI_COMMAND $CNI_IFNAME" >> ${callLog}\nexec ${plugins}/${p}\n`,
        { mode: 0o755 },
      );
    daemon = new DaemonFixture(confFile, { cniBinDir: binDir, auxiliaryChain: chainDir });
    await daemon.start();
  });
  after(async () => {
    await daemon?.stop();
    fx.cleanup();
    rmSync(dir, { recursive: true, force: true });
  });

  it("sets the chain's sysctl in every pod, adds no interface or status, and runs the chain's DEL first but no CHECK", async () => {
    const pod = fx.create('pod');
    const cid = `${prefix}-c`;
    const call = (command: 'ADD' | 'CHECK' | 'DEL') =>
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
    const result = JSON.parse(added.stdout) as { interfaces: { name: string }[] };
    assert.deepEqual(
      result.interfaces.map((i) => i.name).filter((n) => n !== `${prefix}br` && !n.startsWith('veth')),
      ['eth0'],
      'the chain adds no interface to the result',
    );

    // Multus never CHECKs the chain (its CHECK runs the delegates of its config, not its cache): nor does Plexus.
    const checked = await call('CHECK');
    assert.equal(checked.code, 0, checked.stdout);

    const deleted = await call('DEL');
    assert.equal(deleted.code, 0, deleted.stdout);
    assert.deepEqual(calls(), [
      'bridge ADD eth0',
      'tuning ADD net1',
      'bridge CHECK eth0',
      'tuning DEL net1',
      'bridge DEL eth0',
    ]);
    assert.deepEqual(podLinks(pod.name), []);
    assert.deepEqual(daemon.journalFiles(), []);
  });
});
