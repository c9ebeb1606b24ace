/**
 * A delegated plugin still running when plexusd's stop has used its budget must not outlive plexusd: an orphan would
 * finish its ADD after the next plexusd's recovery and the runtime's DEL had undone it, leaving an interface with an
 * address in the pod and a host-local lease that no record knows. Real plexusd and plexus-cni; the plugin is a script
 * that sleeps in ADD, then execs the reference bridge plugin (and, through it, host-local).
 */
import assert from 'node:assert/strict';
import { chmodSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, it } from 'node:test';
import { DaemonFixture, podArgs, podMaker, type TestPod } from '../support/daemon';
import { restoreForwardingAfterwards } from '../support/forwarding';
import { ipTry, NetnsFixture, uniquePrefix } from '../support/netns';
import { DEBIAN_PLUGINS, referencePluginDir } from '../support/plugin-dir';
import { untilTrue } from '../support/until';

const prefix = uniquePrefix('sp');
const fx = new NetnsFixture(prefix);
/** The plugin's sleep: past plexusd's stop, its restart, recovery and the runtime's DEL. */
const SLEEP_SECONDS = 8;
const base = new DaemonFixture('podnet');
const binDir = join(base.dir, 'cni-bin');
const pidFile = join(base.dir, 'slow-bridge.pids');
const leaseDir = join(base.dir, 'host-local');
const daemon = new DaemonFixture('podnet', { cniBinDir: binDir, drainSeconds: 1 });
const newPod = podMaker(fx, prefix, ['eth0']);
const o = 200 + Math.floor(Math.random() * 50);
const t = Math.floor(Math.random() * 250);

restoreForwardingAfterwards();

before(async () => {
  referencePluginDir(binDir);
  const script = [
    '#!/bin/sh',
    `echo $$ >> ${pidFile}`,
    `if [ "$CNI_COMMAND" = ADD ]; then sleep ${SLEEP_SECONDS}; fi`,
    `exec ${join(DEBIAN_PLUGINS, 'bridge')}`,
  ];
  writeFileSync(join(binDir, 'slow-bridge'), `${script.join('\n')}\n`);
  chmodSync(join(binDir, 'slow-bridge'), 0o755);
  fx.trackHostLink(`${prefix}br0`);
  fx.trackHostLink(`${prefix}br1`);
  daemon.writeBridgeNetwork({ name: 'podnet', bridge: `${prefix}br0`, subnet: `10.${o}.${t}.0/25` });
  const slownet = {
    cniVersion: '1.0.0',
    name: 'slownet',
    type: 'slow-bridge',
    bridge: `${prefix}br1`,
    ipam: { type: 'host-local', ranges: [[{ subnet: `10.${o}.${t}.128/25` }]], dataDir: leaseDir },
  };
  daemon.writeNadOf(slownet);
  await daemon.start();
});
after(async () => {
  for (const pid of pluginProcesses()) killIfAlive(pid); // left by a plexusd that did not stop its plugins
  await daemon.stop();
  await base.stop();
  fx.cleanup();
});

function pluginPids(): number[] {
  try {
    return readFileSync(pidFile, 'utf8').split('\n').filter(Boolean).map(Number);
  } catch {
    return [];
  }
}

/** The live processes of the plugin's process groups (the script, its sleep, the bridge and host-local it runs). */
function pluginProcesses(): number[] {
  const groups = new Set(pluginPids());
  const live: number[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    let stat: string;
    try {
      stat = readFileSync(`/proc/${name}/stat`, 'utf8');
    } catch {
      continue; // gone meanwhile
    }
    // After the command name (in parentheses): state, ppid, pgrp.
    const [state, , pgrp] = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const pid = Number(name);
    if (state !== 'Z' && (groups.has(pid) || groups.has(Number(pgrp)))) live.push(pid);
  }
  return live;
}

function killIfAlive(pid: number): void {
  try {
    process.kill(pid, 'SIGKILL');
  } catch {
    /* gone */
  }
}

const leases = (): string[] => {
  try {
    return readdirSync(join(leaseDir, 'slownet')).filter((n) => !n.startsWith('last_reserved') && n !== 'lock');
  } catch {
    return [];
  }
};

function call(command: 'ADD' | 'DEL', pod: TestPod) {
  const annotations = { 'k8s.v1.cni.cncf.io/networks': 'slownet' };
  return daemon.cni({
    command,
    containerId: pod.cid,
    netns: pod.netns,
    ifname: 'eth0',
    args: podArgs(pod.name, pod.cid),
    // The runtime gives up on the ADD soon after the daemon goes away, and then DELs the sandbox.
    config: daemon.runtimeConfig(
      { daemonWaitSeconds: 1, runtimeConfig: { 'io.kubernetes.cri.pod-annotations': annotations } },
      '1.0.0',
    ),
  });
}

/** A pod whose ADD is cut off by `signal` while its slow plugin sleeps; then restart, recovery, the runtime's DEL. */
async function cutOffAdd(signal: NodeJS.Signals): Promise<TestPod> {
  const pod = newPod();
  const before = pluginPids().length;
  const add = call('ADD', pod);
  await untilTrue('the slow plugin running', () => pluginPids().length === before + 1, 10_000);
  const started = Date.now();

  await daemon.kill(signal);
  assert.notEqual((await add).code, 0, 'the ADD was cut off');
  await daemon.start(); // recovery undoes the ADD's record
  const del = await call('DEL', pod);
  assert.equal(del.code, 0, del.stdout);
  // Past the moment an orphaned plugin would have finished its ADD.
  const orphanDone = started + SLEEP_SECONDS * 1000 + 2000;
  await new Promise((r) => setTimeout(r, Math.max(0, orphanDone - Date.now())));
  return pod;
}

function assertNothingLeft(pod: TestPod): void {
  assert.deepEqual(pluginProcesses(), [], 'no plugin process survives');
  const addresses = ipTry('-n', pod.ns, '-o', 'addr', 'show', 'scope', 'global').out.trim();
  assert.equal(addresses, '', 'no address is left in the pod');
  assert.deepEqual(leases(), [], 'no host-local lease is left');
  assert.deepEqual(daemon.journalFiles(), []);
}

it('a delegated plugin running at SIGTERM leaves, after restart, recovery and DEL, no address, no lease, no process', async () => {
  assertNothingLeft(await cutOffAdd('SIGTERM'));
});

it('a delegated plugin running when plexusd is killed (SIGKILL) leaves, after restart, recovery and DEL, no address, no lease, no process', async () => {
  assertNothingLeft(await cutOffAdd('SIGKILL'));
});
