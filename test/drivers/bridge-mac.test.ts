/**
 * The bridge keeps its MAC while ports come and go (bridge and vxlan networks): a bridge whose MAC is not set takes
 * the lowest MAC among its ports, so deleting the pod that lent it would cut every other pod off its gateway until
 * their neighbour entries expire. The reference bridge plugin pins the MAC for that reason; so does Plexus.
 */
import assert from 'node:assert/strict';
import { randomInt } from 'node:crypto';
import { describe, it } from 'node:test';
import { createBridgeDriver, hostVethName } from '../../src/drivers/bridge';
import type { Driver } from '../../src/drivers/driver';
import { createVxlanDriver } from '../../src/drivers/vxlan';
import { restoreForwardingAfterwards } from '../support/forwarding';
import { ip, ipTry, type TestNetns } from '../support/netns';
import { attachParsed, attachRequest, driverTestbed, must, RecordingEnv } from './support';

const bed = driverTestbed('pbm');
const { prefix, fx } = bed;
restoreForwardingAfterwards();

/** The MAC of a link, in the node's netns (the host when `node` is undefined). */
const macOf = (name: string, node?: string): string => {
  const out = ip(...(node ? ['-n', node] : []), '-br', 'link', 'show', name);
  const mac = out.trim().split(/\s+/)[2];
  assert.ok(mac, `no MAC in ${out}`);
  return mac;
};
const macValue = (mac: string): bigint => BigInt(`0x${mac.replaceAll(':', '')}`);
/** One ping that must be answered within a second: no waiting for a neighbour entry to expire. */
const pingsOnce = (pod: TestNetns, address: string): boolean =>
  ipTry('netns', 'exec', pod.name, 'ping', '-c', '1', '-W', '1', address).status === 0;

interface Pod {
  readonly netns: TestNetns;
  readonly rec: RecordingEnv;
  readonly hostVeth: string;
  readonly bridgeMacAnswered: string | undefined;
}

/** Attaches `count` pods to one network through `driver`, each with its own journal so each can be deleted alone. */
async function attachPods<C>(
  driver: Driver<C>,
  tag: string,
  count: number,
  network: string,
  config: Record<string, unknown>,
): Promise<Pod[]> {
  const pods: Pod[] = [];
  for (let i = 0; i < count; i++) {
    const netns = fx.create(`${tag}${i}`);
    const rec = new RecordingEnv(bed.kernel, bed.ipam);
    const req = attachRequest({ network, config, netns: netns.path, ifname: 'eth0' });
    const hostVeth = hostVethName(req.containerId, req.runtimeIfname, req.ifname);
    fx.trackHostLink(hostVeth);
    const result = must(await attachParsed(driver, req, rec.env));
    pods.push({ netns, rec, hostVeth, bridgeMacAnswered: result.interfaces[0]?.mac });
  }
  return pods;
}

/** The pod whose host veth has the lowest MAC: the one an unpinned bridge takes its MAC from. */
const lender = (pods: readonly Pod[], node?: string): Pod =>
  pods.reduce((low, p) => (macValue(macOf(p.hostVeth, node)) < macValue(macOf(low.hostVeth, node)) ? p : low));

describe('bridge MAC', () => {
  it("keeps every pod's gateway reachable, without a lost ping, when the pod whose port had the lowest MAC is deleted", async () => {
    const bridge = `${prefix}b1`;
    fx.trackHostLink(bridge);
    const config = { type: 'bridge', bridge, isGateway: true, ipam: { type: 'host-local', subnet: '10.234.1.0/24' } };
    const pods = await attachPods(createBridgeDriver(), 'g', 4, `${prefix}-g`, config);
    for (const pod of pods) assert.ok(pingsOnce(pod.netns, '10.234.1.1'), `${pod.netns.name} reaches its gateway`);
    const before = macOf(bridge);

    const gone = lender(pods);
    await gone.rec.undo();

    const rest = pods.filter((p) => p !== gone);
    const cutOff = rest.filter((p) => !pingsOnce(p.netns, '10.234.1.1')).map((p) => p.netns.name);
    assert.deepEqual(cutOff, [], 'every other pod still reaches its gateway at once');
    assert.equal(macOf(bridge), before, 'the bridge keeps its MAC');
    for (const pod of pods) assert.equal(pod.bridgeMacAnswered, before, "the ADD result answers the bridge's real MAC");
    for (const pod of rest) await pod.rec.undo();
  });

  it('pins a bridge made before the fix at the MAC it has, on its first ADD, so its pods never see it change', async () => {
    const bridge = `${prefix}b2`;
    fx.trackHostLink(bridge);
    // What an older plexusd left: a bridge whose MAC was never set, holding a pod whose port has the lowest MAC.
    ip('link', 'add', bridge, 'type', 'bridge');
    ip('link', 'set', bridge, 'up');
    ip('addr', 'add', '10.234.2.1/24', 'dev', bridge);
    const old = fx.create('old');
    const oldPort = `${prefix}o`;
    fx.trackHostLink(oldPort);
    ip(
      'link',
      'add',
      oldPort,
      'address',
      '02:00:00:00:00:01',
      'type',
      'veth',
      'peer',
      'name',
      'eth0',
      'netns',
      old.name,
    );
    ip('link', 'set', oldPort, 'master', bridge, 'up');
    ip('-n', old.name, 'addr', 'add', '10.234.2.250/24', 'dev', 'eth0');
    ip('-n', old.name, 'link', 'set', 'eth0', 'up');
    assert.equal(macOf(bridge), '02:00:00:00:00:01', "the unpinned bridge took its port's MAC");
    assert.ok(pingsOnce(old, '10.234.2.1'), 'the old pod reaches its gateway');

    const config = { type: 'bridge', bridge, isGateway: true, ipam: { type: 'host-local', subnet: '10.234.2.0/24' } };
    const [pod] = await attachPods(createBridgeDriver(), 'n', 1, `${prefix}-n`, config);
    assert.ok(pod);
    assert.equal(macOf(bridge), '02:00:00:00:00:01', 'pinned at the MAC it had: no change for running pods');
    assert.equal(pod.bridgeMacAnswered, '02:00:00:00:00:01');
    assert.ok(pingsOnce(old, '10.234.2.1'), 'the old pod still reaches its gateway');
    assert.ok(pingsOnce(pod.netns, '10.234.2.1'), 'the new pod reaches its gateway');

    ip('link', 'del', oldPort);
    assert.equal(macOf(bridge), '02:00:00:00:00:01', 'the bridge keeps its MAC when the port that lent it goes');
    assert.ok(pingsOnce(pod.netns, '10.234.2.1'), 'the new pod still reaches its gateway at once');
    await pod.rec.undo();
  });

  it("keeps a vxlan network's bridge MAC when the pod whose port had the lowest MAC is deleted", async () => {
    const node = fx.create('node');
    const vni = randomInt(1_000_000, 16_000_000);
    const bridge = `${prefix}v`;
    const config = {
      type: 'vxlan',
      vni,
      port: randomInt(40000, 60000),
      bridge,
      remotes: ['127.0.0.77'],
      ipam: { type: 'host-local', subnet: '10.234.3.0/24' },
    };
    const pods = await attachPods(createVxlanDriver({ node: node.path }), 'x', 3, `${prefix}-x`, config);
    const before = macOf(bridge, node.name);
    for (const pod of pods) assert.equal(pod.bridgeMacAnswered, before, "the ADD result answers the bridge's real MAC");
    // The pods' host veths live in the node netns: the lender is the lowest among them and the VTEP.
    const gone = lender(pods, node.name);
    await gone.rec.undo();
    assert.equal(macOf(bridge, node.name), before, 'the bridge keeps its MAC');
    for (const pod of pods.filter((p) => p !== gone)) await pod.rec.undo();
  });
});
