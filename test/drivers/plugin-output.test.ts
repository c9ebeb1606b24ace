/**
 * A plugin's stdout is its answer, and it is read whole even when plexusd itself runs late: on a loaded node the
 * daemon can be off the CPU for seconds between seeing the plugin exit and reading the pipe. That wait is modelled
 * here by blocking the event loop right after the exit (through the running-plugins register, which learns of the exit
 * first), while the answer reaches the pipe after the exit (from a child the plugin left, as a plugin's helper can).
 * Seen on the three-node cluster under a load of 20-40: the reference bridge plugin's result arrived as
 * "printed no JSON result".
 */
import assert from 'node:assert/strict';
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { PluginProcesses } from '../../src/drivers/delegate';
import { execOnce } from '../../src/drivers/delegate/plugin-run';

const RESULT = '{"cniVersion":"1.0.0","interfaces":[],"ips":[]}';
let dir: string;
let plugin: string;

before(() => {
  dir = mkdtempSync(join(tmpdir(), 'plexus-plugin-output-'));
  plugin = join(dir, 'late-answer');
  // Exits at once; what it started writes the result 0.3 s later, then closes the pipe.
  writeFileSync(plugin, `#!/bin/sh\n( sleep 0.3; echo '${RESULT}' ) &\nexit 0\n`);
  chmodSync(plugin, 0o755);
});
after(() => rmSync(dir, { recursive: true, force: true }));

/** The daemon off the CPU for `ms` right after a plugin's exit is seen. */
class StalledAfterExit extends PluginProcesses {
  constructor(private readonly ms: number) {
    super();
  }
  override track(pid: number, exited: Promise<void>): void {
    super.track(pid, exited);
    void exited.then(() => {
      const until = Date.now() + this.ms;
      while (Date.now() < until) {
        /* blocked, as a descheduled process is */
      }
    });
  }
}

describe("a plugin's output read after its exit", () => {
  it('is the whole answer even when the daemon was off the CPU past the close grace (2 s)', async () => {
    const call = {
      command: 'ADD' as const,
      type: 'late-answer',
      network: 'n',
      path: plugin,
      stdin: '{}',
      cniPath: dir,
    };
    const r = await execOnce(call, { timeoutMs: 10000, processes: new StalledAfterExit(2500) });
    assert.ok(r.ok, r.ok ? '' : r.error.message);
    assert.equal(r.value.stdout.trim(), RESULT);
  });
});
