/**
 * DEL answers before the kernel has deleted the pod's links; plexusd is killed (SIGKILL) while those teardowns are
 * pending. The bar: no address is handed out while a live interface still carries it (every test netns is scanned),
 * and after the restart nothing is leaked: no link, no lease, no journal record. The background is held by
 * PLEXUS_TEST_TEARDOWN_HOLD_MS (a test-only knob) so the kill always lands while every teardown is pending.
 */
import assert from 'node:assert/strict';
import { after, before, it } from 'node:test';
import { hostVethName } from '../../src/drivers/bridge';
import { DaemonFixture, podCall, podMaker, type ShimOutput, type TestPod } from '../support/daemon';
import { hostLinksWithPrefix, ip, ipTry, NetnsFixture, podLinks, uniquePrefix } from '../support/netns';
import { untilTrue } from '../support/until';

const prefix = uniquePrefix('ptc');
const fx = new NetnsFixture(prefix);
const daemon = new DaemonFixture('podnet');
daemon.settleDels = false;
const HOLD = 'PLEXUS_TEST_TEARDOWN_HOLD_MS';
/** A /27: 29 addresses after the gateway, so the ADDs after the DELs run out unless addresses are reused early. */
const DELETED = 24;
const LATER = 8;
const FREE_AFTER = 29 - DELETED;

const newPod = podMaker(fx, prefix, ['eth0']);
const config = (): Record<string, unknown> => daemon.runtimeConfig({ daemonWaitSeconds: 30 });

before(async () => {
  fx.trackHostLink(`${prefix}br`);
  const subnet = `10.${200 + Math.floor(Math.random() * 50)}.${Math.floor(Math.random() * 250)}.0/27`;
  daemon.writeBridgeNetwork({ name: 'podnet', bridge: `${prefix}br`, subnet });
  process.env[HOLD] = '600000';
  await daemon.start();
});
after(async () => {
  delete process.env[HOLD];
  await daemon.stop();
  fx.cleanup();
});

/** Every IPv4 address on an interface of a live test netns, with where it is: an address twice is a failure. */
function addressesInTestNetns(): Map<string, string[]> {
  const where = new Map<string, string[]>();
  const names = ip('netns', 'list')
    .split('\n')
    .map((l) => l.split(' ')[0] ?? '')
    .filter((n) => n.startsWith(`${prefix}-`));
  for (const ns of names) {
    const out = ipTry('-n', ns, '-o', '-4', 'addr', 'show');
    for (const line of out.out.split('\n')) {
      const m = /^\d+:\s+(\S+)\s+inet\s+(\S+)/.exec(line);
      if (!m || m[1] === 'lo') continue;
      where.set(m[2]!, [...(where.get(m[2]!) ?? []), `${ns}:${m[1]}`]);
    }
  }
  return where;
}

const onTwo = (where: Map<string, string[]>): string[] =>
  [...where].filter(([, at]) => at.length > 1).map(([a, at]) => `${a} on ${at.join(', ')}`);
const addressOf = (r: ShimOutput): string => String((r.json as { ips: { address: string }[] }).ips[0]?.address);

it('plexusd killed while DELs are torn down in the background: no address reused early, nothing leaked after the restart', async () => {
  const pods: TestPod[] = Array.from({ length: DELETED }, newPod);
  for (const p of pods) assert.equal((await podCall(daemon, 'ADD', p, config())).code, 0);

  // The runtime deletes every pod: each DEL answers while its links are still there (the background is held).
  const dels = await Promise.all(pods.map((p) => podCall(daemon, 'DEL', p, config())));
  for (const d of dels) assert.equal(d.code, 0, d.stdout);
  const veths = pods.map((p) => hostVethName(p.cid, 'eth0', 'eth0'));
  assert.equal(
    veths.flatMap((v) => hostLinksWithPrefix(v)).length,
    DELETED,
    'the teardowns are pending: every host veth is there',
  );
  assert.equal(daemon.journalFiles().length, DELETED, 'each pending teardown is journaled');
  assert.equal(daemon.leases('podnet').length, DELETED, 'and keeps its lease');
  // As a runtime does, half the sandboxes' netns go now (their links with them); the other half stay (KubeVirt-like).
  for (const p of pods.slice(DELETED / 2)) ip('netns', 'del', p.ns);

  // New pods right after the DELs answered: only the addresses no pending teardown holds may be given.
  const later: TestPod[] = Array.from({ length: LATER }, newPod);
  const adds = await Promise.all(later.map((p) => podCall(daemon, 'ADD', p, config())));
  assert.deepEqual(onTwo(addressesInTestNetns()), [], 'no address on two live interfaces');
  const given = adds.filter((r) => r.code === 0);
  assert.equal(
    given.length,
    FREE_AFTER,
    `the ${FREE_AFTER} free addresses were given, none still held: ${adds.map((r) => r.stdout).join(' ')}`,
  );
  for (const r of adds.filter((a) => a.code !== 0))
    assert.ok(r.json?.code !== undefined && r.json?.msg, `a refused ADD is a CNI error: ${r.stdout}`);

  await daemon.kill('SIGKILL');
  delete process.env[HOLD];
  await daemon.start();

  // Recovery finishes every teardown the crash cut off: links, leases and records of the deleted pods are gone.
  await untilTrue("the deleted pods' records are gone", () => daemon.journalFiles().length === FREE_AFTER, 20_000);
  assert.deepEqual(
    veths.flatMap((v) => hostLinksWithPrefix(v)),
    [],
    'no host veth of a deleted pod',
  );
  for (const p of pods.slice(0, DELETED / 2))
    assert.deepEqual(podLinks(p.ns), [], `${p.ns} (kept by its runtime) has no link left`);
  assert.equal(daemon.leases('podnet').length, FREE_AFTER, 'only the live pods hold leases');

  // The ADDs that found the pool full succeed now, and still no address is on two interfaces.
  const retried = await Promise.all(
    later.filter((_, i) => adds[i]!.code !== 0).map((p) => podCall(daemon, 'ADD', p, config())),
  );
  for (const r of retried) assert.equal(r.code, 0, r.stdout);
  const live = [...given, ...retried].map(addressOf);
  assert.equal(new Set(live).size, LATER, 'every live pod has its own address');
  assert.deepEqual(onTwo(addressesInTestNetns()), [], 'no address on two live interfaces after the restart');

  // Deleting the rest leaves nothing once the background is done.
  for (const p of later) assert.equal((await podCall(daemon, 'DEL', p, config())).code, 0);
  await untilTrue('every record closed', () => daemon.journalFiles().length === 0, 20_000);
  assert.deepEqual(daemon.leases('podnet'), [], 'no leaked lease');
  const laterVeths = later.map((p) => hostVethName(p.cid, 'eth0', 'eth0'));
  assert.deepEqual(
    [...veths, ...laterVeths].flatMap((v) => hostLinksWithPrefix(v)),
    [],
    'no leaked host veth',
  );
  for (const p of later) assert.deepEqual(podLinks(p.ns), [], `${p.ns} has no link left`);
});
