/**
 * An upgrade heals a bridge an older plexusd made without pinning its MAC, at daemon start and before any ADD: the
 * pods the old daemon attached keep the MAC they know, and deleting the pod whose port lent it no longer cuts the
 * others off their gateway. The old node is made faithfully: a real plexusd attaches the pods (so its journal is the
 * real one), then, while no daemon runs, the bridge is made again the way an older plexusd made it (no MAC set) and
 * the pods' host veths join it again. Real plexusd, real shim, real namespaces.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { hostVethName } from '../../src/drivers/bridge';
import { DaemonFixture, podCall, podMaker, type TestPod } from '../support/daemon';
import { ip, ipTry, NetnsFixture, uniquePrefix } from '../support/netns';

const prefix = uniquePrefix('bmh');
const fx = new NetnsFixture(prefix);
const daemon = new DaemonFixture('podnet');
const bridge = `${prefix}b0`;
const third = 200 + Math.floor(Math.random() * 50);
const gateway = `10.${third}.7.1`;
const newPod = podMaker(fx, prefix, ['eth0']);

/** The MAC of a host link. */
const macOf = (name: string): string => {
  const mac = ip('-br', 'link', 'show', name).trim().split(/\s+/)[2];
  assert.ok(mac, `no MAC for ${name}`);
  return mac;
};
const macValue = (mac: string): bigint => BigInt(`0x${mac.replaceAll(':', '')}`);
/** One ping answered within a second: no waiting for a neighbour entry to expire. */
const pingsOnce = (pod: TestPod): boolean =>
  ipTry('netns', 'exec', pod.ns, 'ping', '-c', '1', '-W', '1', gateway).status === 0;
const hostVeth = (pod: TestPod): string => hostVethName(pod.cid, 'eth0', 'eth0');

before(() => {
  fx.trackHostLink(bridge);
  daemon.writeBridgeNetwork({ name: 'podnet', bridge, subnet: `10.${third}.7.0/24` });
});
after(async () => {
  await daemon.stop();
  fx.cleanup();
});

describe('bridge MAC heal at daemon start', () => {
  it("pins an older plexusd's bridge at the MAC it has before the daemon is ready, so deleting the pod that lent it cuts no one off", async () => {
    await daemon.start();
    const pods = [newPod(), newPod(), newPod()];
    for (const pod of pods) {
      const out = await podCall(daemon, 'ADD', pod, daemon.runtimeConfig());
      assert.equal(out.code, 0, out.stdout + out.stderr);
    }
    await daemon.kill('SIGTERM');

    // The node as an older plexusd left it: the same bridge and ports, the bridge's MAC never set.
    ip('link', 'del', bridge);
    ip('link', 'add', bridge, 'type', 'bridge');
    ip('addr', 'add', `${gateway}/24`, 'dev', bridge);
    for (const pod of pods) ip('link', 'set', hostVeth(pod), 'master', bridge);
    ip('link', 'set', bridge, 'up');
    const lender = pods.reduce((low, p) => (macValue(macOf(hostVeth(p))) < macValue(macOf(hostVeth(low))) ? p : low));
    const before = macOf(bridge);
    assert.equal(before, macOf(hostVeth(lender)), "the unpinned bridge took its lowest port's MAC");
    for (const pod of pods) assert.ok(pingsOnce(pod), `${pod.name} reaches its gateway on the old node`);

    await daemon.start();
    assert.equal(macOf(bridge), before, 'the heal kept the MAC the pods know');
    for (const pod of pods) assert.ok(pingsOnce(pod), `${pod.name} still reaches its gateway after the upgrade`);

    const out = await podCall(daemon, 'DEL', lender, daemon.runtimeConfig());
    assert.equal(out.code, 0, out.stdout + out.stderr);
    const rest = pods.filter((p) => p !== lender);
    const cutOff = rest.filter((p) => !pingsOnce(p)).map((p) => p.name);
    assert.deepEqual(cutOff, [], 'every other pod still reaches its gateway at once');
    assert.equal(macOf(bridge), before, 'the bridge keeps its MAC when the port that lent it goes');
    for (const pod of rest) assert.equal((await podCall(daemon, 'DEL', pod, daemon.runtimeConfig())).code, 0);
  });
});
