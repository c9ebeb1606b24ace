/**
 * A rolling upgrade costs no pod its sandbox: plexusd replaced (SIGTERM, a new daemon at once) in the middle of a
 * burst of ADDs through the real shim; and an ADD whose connection is cut after the daemon acted on it is replayed
 * and answered with the same result, making nothing twice.
 */
import assert from 'node:assert/strict';
import { readdirSync } from 'node:fs';
import { createConnection, createServer, type Socket } from 'node:net';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { hostVethName } from '../../src/drivers/bridge';
import { DaemonFixture, podCall, podMaker, type ShimOutput, type TestPod } from '../support/daemon';
import { hostLinksWithPrefix, NetnsFixture, podLinks, uniquePrefix } from '../support/netns';

const prefix = uniquePrefix('pu');
const fx = new NetnsFixture(prefix);
const o = 200 + Math.floor(Math.random() * 50);
const t = Math.floor(Math.random() * 200);
const daemon = new DaemonFixture('podnet');
const config = (socketPath = daemon.socket): Record<string, unknown> =>
  daemon.runtimeConfig({
    socketPath,
    daemonWaitSeconds: 30,
    runtimeConfig: { 'io.kubernetes.cri.pod-annotations': { 'k8s.v1.cni.cncf.io/networks': 'sec' } },
  });

before(async () => {
  fx.trackHostLink(`${prefix}b0`);
  fx.trackHostLink(`${prefix}b1`);
  daemon.writeBridgeNetwork({ name: 'podnet', bridge: `${prefix}b0`, subnet: `10.${o}.${t}.0/24` });
  daemon.writeBridgeNetwork({ name: 'sec', bridge: `${prefix}b1`, subnet: `10.${o}.${t + 1}.0/24` });
  await daemon.start();
});
after(async () => {
  await daemon.stop();
  fx.cleanup();
});

type Pod = TestPod;
const newPod = podMaker(fx, prefix, ['eth0', 'net1']);
const add = (pod: Pod, socketPath?: string): Promise<ShimOutput> => podCall(daemon, 'ADD', pod, config(socketPath));
const del = (pod: Pod): Promise<ShimOutput> => podCall(daemon, 'DEL', pod, config());
const addresses = (out: ShimOutput): string[] =>
  ((out.json as { ips?: { address: string }[] } | undefined)?.ips ?? []).map((x) => x.address);
const leftovers = (pods: readonly Pod[]): unknown => ({
  leases: [...daemon.leases('podnet'), ...daemon.leases('sec')],
  journal: daemon.journalFiles(),
  hostVeths: pods.flatMap((p) => ['eth0', 'net1'].flatMap((i) => hostLinksWithPrefix(hostVethName(p.cid, 'eth0', i)))),
});
const nothing = { leases: [], journal: [], hostVeths: [] };

describe('plexusd replaced during a burst', () => {
  it('60 pods, 8 at a time, daemon replaced after 15: every ADD succeeds, no address twice, nothing leaked', async () => {
    const PODS = 60;
    const pods = Array.from({ length: PODS }, () => newPod());
    const results = new Array<ShimOutput>(PODS);
    let next = 0;
    let succeeded = 0;
    let replaced: Promise<Awaited<ReturnType<DaemonFixture['replace']>>> | undefined;
    let inFlightAtReplace = 0;
    let inFlight = 0;
    const worker = async (): Promise<void> => {
      while (next < PODS) {
        const i = next++;
        inFlight++;
        results[i] = await add(pods[i]!);
        inFlight--;
        if (results[i].code === 0 && ++succeeded === 15) {
          inFlightAtReplace = inFlight;
          replaced = daemon.replace();
        }
      }
    };
    await Promise.all(Array.from({ length: 8 }, worker));
    assert.ok(replaced, 'the daemon was replaced');
    const { oldExit } = await replaced;
    assert.deepEqual(await oldExit, { code: 0, signal: null }, 'the old daemon drained and exited cleanly');
    assert.ok(inFlightAtReplace > 0, 'calls were in flight when the daemon was replaced');

    const failed = results.flatMap((r, i) => (r.code === 0 ? [] : [`${pods[i]!.cid}: ${r.stdout}`]));
    assert.deepEqual(failed, [], 'every ADD succeeded');
    const all = results.flatMap(addresses);
    assert.equal(all.length, PODS * 2);
    assert.equal(new Set(all).size, all.length, 'no address given twice');
    assert.equal(daemon.leases('podnet').length, PODS);
    assert.equal(daemon.leases('sec').length, PODS);
    assert.equal(daemon.journalFiles().length, PODS);

    const dels = await Promise.all(pods.map(del));
    assert.deepEqual(
      dels.filter((d) => d.code !== 0).map((d) => d.stdout),
      [],
    );
    assert.deepEqual(leftovers(pods), nothing);
  });
});

describe('an ADD replayed after the daemon acted on it', () => {
  it('answers with the same result and attaches nothing twice', async () => {
    const pod = newPod();
    // A socket in front of plexusd that lets the first call through to the daemon, then cuts the shim off before
    // a single reply byte, as a daemon dying after its work would; later connections pass straight through.
    const proxyPath = join(daemon.dir, 'run', 'cut.sock');
    let connections = 0;
    const proxy = createServer((client: Socket) => {
      const first = connections++ === 0;
      const upstream = createConnection(daemon.socket);
      client.pipe(upstream);
      if (first) upstream.once('data', () => setTimeout(() => (client.destroy(), upstream.destroy()), 20));
      else upstream.pipe(client);
      client.on('error', () => undefined);
      upstream.on('error', () => undefined);
    });
    await new Promise<void>((r) => proxy.listen(proxyPath, r));
    try {
      const out = await add(pod, proxyPath);
      assert.equal(out.code, 0, out.stdout);
      assert.equal(connections, 2, 'the shim replayed the call once');
      const again = await add(pod);
      assert.equal(again.code, 0, again.stdout);
      assert.deepEqual(again.json, out.json, 'the replay and a later retry get the very result of the first ADD');
      assert.equal(daemon.leases('podnet').length, 1);
      assert.equal(daemon.leases('sec').length, 1);
      assert.equal(daemon.journalFiles().length, 1);
      assert.deepEqual(podLinks(pod.ns), ['eth0', 'net1'], 'eth0 and net1, once each');
    } finally {
      await new Promise<void>((r) => proxy.close(() => r()));
    }
    assert.equal((await del(pod)).code, 0);
    assert.deepEqual(leftovers([pod]), nothing);
    assert.deepEqual(
      readdirSync(join(daemon.dir, 'run')).filter((f) => f.endsWith('.sock') && f !== 'plexus.sock'),
      [],
    );
  });
});
