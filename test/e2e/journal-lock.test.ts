/**
 * One plexusd per state directory, even when the lock file is removed: a second daemon on the same state dir waits
 * (and says for whom) until the first has exited, and never serves the first one's journal meanwhile.
 */
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, it } from 'node:test';
import { DaemonFixture, getJson } from '../support/daemon';
import { uniquePrefix } from '../support/netns';
import { untilTrue } from '../support/until';

const prefix = uniquePrefix('pq');
const first = new DaemonFixture('podnet');
const second = new DaemonFixture('podnet', { logLevel: 'info' });
// The second daemon shares the first one's state dir (its own socket, so whether it serves can be seen).
(second as { stateDir: string }).stateDir = first.stateDir;

before(async () => {
  const network = { name: 'podnet', bridge: `${prefix}br`, subnet: '10.254.254.0/24' };
  first.writeBridgeNetwork(network);
  second.writeBridgeNetwork(network);
  await first.start();
});
after(async () => {
  await second.kill('SIGKILL');
  await first.stop();
  await second.stop();
});

const serving = async (daemon: DaemonFixture): Promise<boolean> => {
  try {
    const ready = await getJson(daemon.socket, '/readyz');
    return (ready.body as { pid?: number }).pid === daemon.pid;
  } catch {
    return false;
  }
};

it('a second plexusd on the same state dir waits while the first runs, even after plexusd.lock was removed', async () => {
  rmSync(join(first.stateDir, 'plexusd.lock'), { force: true });
  await assert.rejects(second.start(3000), /not ready after 3 s/);
  assert.ok(second.alive, 'the second daemon is still waiting, not gone');
  assert.equal(await serving(second), false, 'and it does not serve');
  assert.match(second.stderr, /waiting for the previous plexusd/);
  assert.match(second.stderr, new RegExp(`"holder":"${first.pid}"`), 'it names the daemon it waits for');

  await first.kill('SIGTERM');
  await untilTrue('the second daemon to serve once the first has exited', () => serving(second), 15000);
});
