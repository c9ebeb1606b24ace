/**
 * A journal record plexusd cannot use, found at start: the daemon starts, names the file and the line, never undoes
 * the record and keeps its container's leases (the pod it describes may still be running). A real plexusd, real
 * records made by real ADDs, then changed on disk while the daemon is stopped.
 */
import assert from 'node:assert/strict';
import { existsSync, readFileSync, rmSync, truncateSync, writeFileSync, appendFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { DaemonFixture, podCall, podMaker, type TestPod } from '../support/daemon';
import { hostLinksWithPrefix, ipTry, NetnsFixture, uniquePrefix } from '../support/netns';
import { hostVethName } from '../../src/drivers/bridge';

const prefix = uniquePrefix('pj');
const fx = new NetnsFixture(prefix);
const daemon = new DaemonFixture('podnet');
const newPod = podMaker(fx, prefix, ['eth0']);
const config = (): Record<string, unknown> => daemon.runtimeConfig();

before(async () => {
  fx.trackHostLink(`${prefix}br`);
  daemon.writeBridgeNetwork({
    name: 'podnet',
    bridge: `${prefix}br`,
    subnet: `10.${200 + Math.floor(Math.random() * 50)}.${Math.floor(Math.random() * 250)}.0/24`,
  });
  await daemon.start();
});
after(async () => {
  await daemon.stop();
  fx.cleanup();
});

const recordOf = (pod: TestPod): string => join(daemon.stateDir, 'journal', `${pod.cid}@eth0.jsonl`);

/** A running pod, attached by the daemon: its address (no prefix). */
async function attached(pod: TestPod): Promise<string> {
  const out = await podCall(daemon, 'ADD', pod, config());
  assert.equal(out.code, 0, out.stdout);
  return String((out.json as { ips: { address: string }[] }).ips[0]?.address).split('/')[0]!;
}

/** Stops the daemon, lets `change` rewrite the pod's record, starts it again and answers what it logged meanwhile. */
async function restartAfter(pod: TestPod, change: (path: string) => void): Promise<string> {
  await daemon.kill('SIGTERM');
  change(recordOf(pod));
  const before = daemon.stderr.length;
  await daemon.start();
  return daemon.stderr.slice(before);
}

/** The pod is as the daemon left it: record kept, lease kept, host veth there. */
function untouched(pod: TestPod, address: string): void {
  assert.ok(existsSync(recordOf(pod)), 'the record is kept');
  assert.ok(daemon.leases('podnet').includes(address), `the lease of ${address} is kept`);
  assert.deepEqual(
    hostLinksWithPrefix(hostVethName(pod.cid, 'eth0', 'eth0')),
    [hostVethName(pod.cid, 'eth0', 'eth0')],
    'the host veth is kept',
  );
}

/** The pod's DEL fails (never half undone) and says which file to look at; then the test removes it by hand. */
async function delRefusedThenCleaned(pod: TestPod): Promise<void> {
  const out = await podCall(daemon, 'DEL', pod, config());
  assert.notEqual(out.code, 0, 'DEL of a record plexusd cannot read does not pretend to succeed');
  assert.match(String(out.json?.msg), new RegExp(pod.cid));
  assert.match(`${String(out.json?.msg)} ${String(out.json?.details)}`, /line \d+/);
  rmSync(recordOf(pod), { force: true });
}

describe('a journal record plexusd cannot use', () => {
  it('a line that parses as JSON but lacks a field: plexusd starts, names file and line, keeps the lease', async () => {
    const pod = newPod();
    const address = await attached(pod);
    const lines = readFileSync(recordOf(pod), 'utf8').split('\n').length;
    const log = await restartAfter(pod, (path) =>
      appendFileSync(path, '{"v":1,"t":"detached","at":"2026-11-25T00:00:00.000Z"}\n'),
    );
    assert.ok(daemon.alive);
    untouched(pod, address);
    assert.match(log, new RegExp(`${pod.cid}@eth0\\.jsonl, line ${lines}: a: `));
    await delRefusedThenCleaned(pod);
  });

  it('a record whose every line is of a newer format is kept with its lease (after a downgrade)', async () => {
    const pod = newPod();
    const address = await attached(pod);
    const log = await restartAfter(pod, (path) =>
      writeFileSync(path, readFileSync(path, 'utf8').replaceAll('{"v":1,', '{"v":2,')),
    );
    untouched(pod, address);
    assert.match(log, new RegExp(`${pod.cid}@eth0\\.jsonl.*line 1.*v2`));
    await delRefusedThenCleaned(pod);
  });

  it('a line cut short in the middle of a record: nothing of it is undone', async () => {
    const pod = newPod();
    const address = await attached(pod);
    const log = await restartAfter(pod, (path) => {
      const lines = readFileSync(path, 'utf8').split('\n');
      lines[2] = lines[2]!.slice(0, 20);
      writeFileSync(path, lines.join('\n'));
    });
    untouched(pod, address);
    assert.match(log, new RegExp(`${pod.cid}@eth0\\.jsonl.*line 3`));
    await delRefusedThenCleaned(pod);
  });

  it('a record cut off in the middle while its pod runs: nothing is undone, the address stays leased', async () => {
    const pod = newPod();
    const address = await attached(pod);
    const log = await restartAfter(pod, (path) => truncateSync(path, Math.floor(statSync(path).size / 3)));
    untouched(pod, address);
    assert.match(log, new RegExp(`${pod.cid}@eth0\\.jsonl.*line \\d+`));
    await delRefusedThenCleaned(pod);
  });

  it('a torn last line of a pod whose netns is gone (a reboot) is undone as before', async () => {
    const pod = newPod();
    const address = await attached(pod);
    await restartAfter(pod, (path) => {
      ipTry('netns', 'del', pod.ns);
      truncateSync(path, statSync(path).size - 5);
    });
    assert.ok(!existsSync(recordOf(pod)), 'the record is undone and removed');
    assert.ok(!daemon.leases('podnet').includes(address), 'its lease is released');
  });
});
