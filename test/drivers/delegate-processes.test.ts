/**
 * A delegated plugin's process group: what a plugin starts in turn (the IPAM plugin it delegates to, a helper) is
 * killed with it, at its deadline and when plexusd stops its plugins; a stopping plexusd starts no plugin. The plugin
 * is a shell script that starts a `sleep` and waits for it, writing the sleep's PID where the test can see it.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { CniCode } from '../../src/cni/errors';
import { PluginPidFiles, PluginProcesses } from '../../src/drivers/delegate';
import { processStart } from '../../src/drivers/delegate/plugin-pid-files';
import { execPlugin, type PluginCall } from '../../src/drivers/delegate/exec';
import { holdsWithin } from '../support/until';

let dir: string;
let plugin: string;
const started: number[] = [];

before(() => {
  dir = mkdtempSync(join(tmpdir(), 'plexus-plugin-group-'));
  plugin = join(dir, 'waiting-plugin');
  const script = ['#!/bin/sh', 'read -r pidfile', 'sleep 30 &', 'echo $! > "$pidfile"', 'wait'];
  writeFileSync(plugin, `${script.join('\n')}\n`);
  chmodSync(plugin, 0o755);
});
after(() => {
  for (const pid of started) killIfAlive(pid);
  rmSync(dir, { recursive: true, force: true });
});

function killIfAlive(pid: number): void {
  try {
    process.kill(pid, 'SIGKILL');
  } catch {
    /* gone */
  }
}

/** Whether the process runs (a zombie, dead and waiting to be reaped, does not). */
function running(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z';
  } catch {
    return false;
  }
}

async function childOf(pidFile: string): Promise<number> {
  await holdsWithin(() => existsSync(pidFile), 5000, 10);
  const pid = Number(readFileSync(pidFile, 'utf8'));
  started.push(pid);
  return pid;
}

const gone = (pid: number, ms = 2000): Promise<boolean> => holdsWithin(() => !running(pid), ms, 10);

const call = (pidFile: string): PluginCall => ({
  command: 'ADD',
  type: 'waiting-plugin',
  network: 'net',
  path: plugin,
  stdin: `${pidFile}\n`,
  containerId: 'c1',
  netns: '',
  ifname: 'net1',
  cniPath: dir,
});

describe('a delegated plugin and what it starts', () => {
  it('are killed together at the deadline: no child of a timed-out plugin is left running', async () => {
    const pidFile = join(dir, 'timeout.pid');
    const outcome = execPlugin(call(pidFile), { timeoutMs: 500 });
    const child = await childOf(pidFile);
    const r = await outcome;
    assert.ok(!r.ok && r.error.code === CniCode.TryAgainLater, JSON.stringify(r));
    assert.ok(await gone(child), `the plugin's sleep (${child}) still runs`);
  });

  it('are killed together and waited for when the plugins are stopped, and no plugin starts after', async () => {
    const processes = new PluginProcesses();
    const pidFile = join(dir, 'stop.pid');
    const outcome = execPlugin(call(pidFile), { processes });
    const child = await childOf(pidFile);
    assert.equal(processes.size, 1);

    assert.deepEqual(await processes.stop(2000), { killed: 1, left: 0 });
    assert.ok(!running(child), `the plugin's sleep (${child}) still runs after the stop`);
    assert.equal((await outcome).ok, false);

    const late = join(dir, 'late.pid');
    const refused = await execPlugin(call(late), { processes });
    assert.ok(!refused.ok && refused.error.code === CniCode.TryAgainLater, JSON.stringify(refused));
    assert.match(refused.error.message, /plexusd is stopping/);
    assert.equal(existsSync(late), false, 'the plugin was not started');
  });
});

describe('plugins a plexusd that died without its stop left running', () => {
  /** A process group of this test's own, as a dead plexusd's plugin would be: a detached `sleep`. */
  function leftPlugin(): number {
    const child = spawn('sleep', ['30'], { detached: true, stdio: 'ignore' });
    child.unref();
    started.push(child.pid!);
    return child.pid!;
  }

  it('are killed at the next start when their PID and start time still match, and their notes removed', async () => {
    const notes = join(dir, 'left-running');
    const pid = leftPlugin();
    new PluginPidFiles(notes).add(pid);
    const stopped = await new PluginProcesses(new PluginPidFiles(notes)).stopLeftovers(2000);
    assert.deepEqual(stopped, { killed: 1, left: 0 });
    assert.ok(await gone(pid), `the left plugin (${pid}) still runs`);
    assert.deepEqual(readdirSync(notes), []);
  });

  it('are not killed when the PID now names another process (another start time), nor for a note not of that shape', async () => {
    const notes = join(dir, 'reused');
    const pid = leftPlugin();
    const files = new PluginPidFiles(notes);
    writeFileSync(join(notes, `${pid}-${processStart(pid)! + 1}`), '');
    writeFileSync(join(notes, `${pid}`), '');
    writeFileSync(join(notes, `-${pid}-1`), '');
    const stopped = await new PluginProcesses(files).stopLeftovers(500);
    assert.deepEqual(stopped, { killed: 0, left: 0 });
    assert.ok(running(pid), 'another process of the same PID is left alone');
    assert.deepEqual(readdirSync(notes), [], 'notes that name no running plugin are removed');
  });

  it('cost nothing but the notes when their directory cannot be made: plugins run, none is noted', async () => {
    const notes = join(dir, 'a-file');
    writeFileSync(notes, '');
    const processes = new PluginProcesses(new PluginPidFiles(notes));
    assert.deepEqual(await processes.stopLeftovers(100), { killed: 0, left: 0 });
    const r = await execPlugin(call(join(dir, 'noted.pid')), { processes, timeoutMs: 200 });
    assert.ok(!r.ok && r.error.code === CniCode.TryAgainLater, 'the plugin ran, until its deadline');
  });
});
