/** plexusd killed with SIGKILL in the middle of a burst of pods: the cut-off ADDs are replayed, and after DELs nothing is leaked. */
import assert from 'node:assert/strict';
import { after, before, it } from 'node:test';
import { hostVethName } from '../../src/drivers/bridge';
import { DaemonFixture, podArgs, type ShimOutput } from '../support/daemon';
import { hostLinksWithPrefix, NetnsFixture, uniquePrefix } from '../support/netns';

const prefix = uniquePrefix('pc');
const fx = new NetnsFixture(prefix);
const daemon = new DaemonFixture('podnet');
const PODS = 40;

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

it('a SIGKILL mid-burst followed by a restart leaks no link, IP or journal record once the pods are deleted', async () => {
  const pods = Array.from({ length: PODS }, (_, i) => ({
    cid: `${prefix}c${i}`,
    name: `pod${i}`,
    netns: fx.create(`p${i}`).path,
  }));
  for (const p of pods) fx.trackHostLink(hostVethName(p.cid, 'eth0', 'eth0'));
  const config = daemon.runtimeConfig({ daemonWaitSeconds: 30 });

  let done = 0;
  const adds: Promise<ShimOutput>[] = pods.map((p) =>
    daemon
      .cni({ command: 'ADD', containerId: p.cid, netns: p.netns, ifname: 'eth0', args: podArgs(p.name, p.cid), config })
      .then((r) => {
        done++;
        return r;
      }),
  );
  // Kill while the burst is under way: some ADDs done, some in the daemon, some still connecting.
  while (done < 6) await new Promise((r) => setTimeout(r, 5));
  const pendingAtKill = PODS - done;
  await daemon.kill('SIGKILL');
  assert.ok(pendingAtKill > 0, 'the kill happened mid-burst');
  await daemon.start();
  const results = await Promise.all(adds);

  const succeeded = results.map((r, i) => ({ r, pod: pods[i]! })).filter(({ r }) => r.code === 0);
  const failed = results.filter((r) => r.code !== 0);
  for (const f of failed)
    assert.equal(f.json?.code, 11, `an ADD cut off by the crash says "try again later": ${f.stdout}`);
  const ips = succeeded.map(({ r }) => String((r.json as { ips: { address: string }[] }).ips[0]?.address));
  assert.equal(new Set(ips).size, ips.length, 'no duplicate IPs');
  // What succeeded survived the crash: each IP is still leased and the pod still has it.
  const leased = daemon.leases('podnet');
  for (const a of ips) assert.ok(leased.includes(a.split('/')[0]!), `lease for ${a} survived`);
  // Recovery undid every half-done ADD: what remains is exactly one lease per committed attachment.
  assert.equal(leased.length, daemon.journalFiles().length, 'every lease has a journal record and vice versa');
  // An ADD cut off by the crash before any reply byte is replayed by plexus-cni on the restarted daemon, whose
  // recovery first undid the half-done attempt: every pod of the burst ends up attached, exactly once.
  assert.equal(succeeded.length, PODS, `every ADD succeeded: ${failed.map((f) => f.stdout).join('; ')}`);

  // The runtime deletes every pod of the burst, failed ones included (containerd does after a failed ADD).
  const dels = await Promise.all(
    pods.map((p) =>
      daemon.cni({
        command: 'DEL',
        containerId: p.cid,
        netns: p.netns,
        ifname: 'eth0',
        args: podArgs(p.name, p.cid),
        config,
      }),
    ),
  );
  for (const d of dels) assert.equal(d.code, 0, d.stdout);
  assert.deepEqual(daemon.leases('podnet'), [], 'no leaked IP');
  assert.deepEqual(daemon.journalFiles(), [], 'no journal record left');
  const leakedLinks = pods.flatMap((p) => hostLinksWithPrefix(hostVethName(p.cid, 'eth0', 'eth0')));
  assert.deepEqual(leakedLinks, [], 'no leaked host veth');
});
