/**
 * Leases of every network a pod has survive restarts, crashes and GC: three bridge networks with host-local
 * (the default and two selected), pods with all three, through the real shim and daemon on real namespaces.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { after, before, describe, it } from 'node:test';
import { DaemonFixture, podCall, podMaker, ROOT, type ShimOutput, type TestPod } from '../support/daemon';
import { ip, NetnsFixture, uniquePrefix } from '../support/netns';

const prefix = uniquePrefix('pl');
const fx = new NetnsFixture(prefix);
const o = 200 + Math.floor(Math.random() * 50);
const t = Math.floor(Math.random() * 200);
const NETWORKS = ['podnet', 'sec1', 'sec2'] as const;
const daemon = new DaemonFixture('podnet');
const config = daemon.runtimeConfig({
  daemonWaitSeconds: 30,
  runtimeConfig: { 'io.kubernetes.cri.pod-annotations': { 'k8s.v1.cni.cncf.io/networks': 'sec1, sec2' } },
});

before(async () => {
  NETWORKS.forEach((name, i) => {
    fx.trackHostLink(`${prefix}b${i}`);
    daemon.writeBridgeNetwork({ name, bridge: `${prefix}b${i}`, subnet: `10.${o}.${t + i}.0/24` });
  });
  await daemon.start();
});
after(async () => {
  await daemon.stop();
  fx.cleanup();
});

type Pod = TestPod;
const newPod = podMaker(fx, prefix, ['eth0', 'net1', 'net2']);
const add = (pod: Pod): Promise<ShimOutput> => podCall(daemon, 'ADD', pod, config);
const del = (pod: Pod): Promise<ShimOutput> => podCall(daemon, 'DEL', pod, config);
const addressesOf = (out: ShimOutput): string[] =>
  ((out.json as { ips?: { address: string }[] } | undefined)?.ips ?? []).map((x) => x.address.split('/')[0]!);

/** Every lease on disk, as "network/address owner ifname". */
function leasesOnDisk(): string[] {
  return NETWORKS.flatMap((network) =>
    daemon.leases(network).map((address) => {
      const [owner, ifname] = readFileSync(join(daemon.stateDir, 'ipam', network, address), 'utf8').split('\n');
      return `${network}/${address} ${owner} ${ifname}`;
    }),
  ).sort();
}
const leasesOf = (pod: Pod): string[] => leasesOnDisk().filter((l) => l.includes(` ${pod.cid} `));

async function ctlJson(...args: string[]): Promise<{
  removed: unknown[];
  leases: { network: string; address: string; containerId: string; ifname: string }[];
  leasesReleased: number;
}> {
  const { stdout } = await promisify(execFile)(join(ROOT, 'bin/plexusctl'), [
    '--socket',
    daemon.socket,
    '-o',
    'json',
    ...args,
  ]);
  return JSON.parse(stdout) as Awaited<ReturnType<typeof ctlJson>>;
}

describe('pods with three networks', () => {
  const pods: Pod[] = [];
  let held: string[] = [];

  before(async () => {
    for (let i = 0; i < 3; i++) {
      const pod = newPod();
      const out = await add(pod);
      assert.equal(out.code, 0, out.stdout);
      pods.push(pod);
    }
    held = leasesOnDisk();
  });

  it('hold one lease per network each, under the pod interface that has the address', () => {
    assert.equal(held.length, 9, held.join('\n'));
    for (const pod of pods) {
      const mine = leasesOf(pod);
      assert.deepEqual(
        mine.map((l) => l.split('/')[0]),
        [...NETWORKS],
      );
      // The owner is the whole attachment: the runtime's interface and the pod's (docs/ipam.md).
      assert.deepEqual(
        mine.map((l) => l.split(' ')[2]),
        ['eth0:eth0', 'eth0:net1', 'eth0:net2'],
      );
      for (const lease of mine) {
        const address = lease.split(' ')[0]!.split('/')[1]!;
        const ifname = lease.split(' ')[2]!.split(':')[1]!;
        assert.match(
          ip('-n', pod.ns, '-o', '-4', 'addr', 'show', ifname),
          new RegExp(`inet ${address.replace(/\./g, '\\.')}/`),
        );
      }
    }
  });

  it('keep every lease across a clean restart and across a kill -9', async () => {
    await daemon.kill('SIGTERM');
    await daemon.start();
    assert.deepEqual(leasesOnDisk(), held, 'after SIGTERM and restart');
    await daemon.kill('SIGKILL');
    await daemon.start();
    assert.deepEqual(leasesOnDisk(), held, 'after SIGKILL and restart');
  });

  it('keep every lease through plexusctl gc, whose dry run lists nothing to release', async () => {
    const dry = await ctlJson('gc', '--dry-run');
    assert.deepEqual(dry.removed, []);
    assert.deepEqual(dry.leases, []);
    const real = await ctlJson('gc');
    assert.deepEqual(real.leases, []);
    assert.deepEqual(leasesOnDisk(), held);
  });

  it('gc --dry-run lists exactly the leases of an attachment whose journal record was lost, and gc then releases exactly those', async () => {
    const lost = newPod();
    const out = await add(lost);
    assert.equal(out.code, 0, out.stdout);
    const lostLeases = leasesOf(lost);
    assert.equal(lostLeases.length, 3);
    rmSync(join(daemon.stateDir, 'journal', `${lost.cid}@eth0.jsonl`)); // an operator wiping state by hand

    const describe = (l: { network: string; address: string; containerId: string; ifname: string }): string =>
      `${l.network}/${l.address.split('/')[0]} ${l.containerId} ${l.ifname}`;
    const dry = await ctlJson('gc', '--dry-run');
    assert.deepEqual(dry.leases.map(describe).sort(), lostLeases);
    assert.deepEqual(leasesOnDisk(), [...held, ...lostLeases].sort(), 'a dry run releases nothing');
    const real = await ctlJson('gc');
    assert.deepEqual(real.leases.map(describe).sort(), lostLeases, 'gc does what its dry run said');
    assert.equal(real.leasesReleased, 3);
    assert.deepEqual(leasesOnDisk(), held, 'the live pods keep theirs');
  });

  it('a restart releases a lease no attachment holds, and only that one', async () => {
    await daemon.kill('SIGTERM');
    const stray = join(daemon.stateDir, 'ipam', 'sec2', `10.${o}.${t + 2}.250`);
    writeFileSync(stray, `${prefix}gone\nnet2\n10.${o}.${t + 2}.250/24\n\n`);
    await daemon.start();
    assert.deepEqual(leasesOnDisk(), held);
  });

  it('a kill -9 in the middle of pod churn never gives a new pod an address a live pod holds', async () => {
    const ROUNDS = 4;
    const PER_ROUND = 6;
    const liveAddresses = new Set(held.map((l) => l.split(' ')[0]!));
    for (let round = 0; round < ROUNDS; round++) {
      const churn = Array.from({ length: PER_ROUND }, () => newPod());
      let done = 0;
      const adds = churn.map((p) => add(p).then((r) => (done++, r)));
      while (done < 2) await new Promise((r) => setTimeout(r, 5));
      await daemon.kill('SIGKILL');
      await daemon.start();
      const results = await Promise.all(adds);
      assert.deepEqual(
        leasesOnDisk().filter((l) => held.includes(l)),
        held,
        `round ${round}: the long-lived pods kept their leases`,
      );
      const given = results.flatMap((r) => (r.code === 0 ? addressesOf(r) : []));
      for (const a of given)
        assert.ok(
          ![...liveAddresses].some((l) => l.endsWith(`/${a}`)),
          `round ${round}: ${a} was given to a new pod while a live pod holds it`,
        );
      assert.equal(new Set(given).size, given.length, `round ${round}: no address given twice`);
      for (const r of results)
        if (r.code !== 0)
          assert.equal(r.json?.code, 11, `an ADD cut off by the crash says "try again later": ${r.stdout}`);
      for (const p of churn) assert.equal((await del(p)).code, 0);
      assert.deepEqual(leasesOnDisk(), held, `round ${round}: after DEL only the long-lived pods' leases remain`);
    }
    for (const pod of pods) assert.equal((await del(pod)).code, 0);
    assert.deepEqual(leasesOnDisk(), []);
    assert.deepEqual(daemon.journalFiles(), []);
  });
});
