/** The native bridge driver on real namespaces: the reference bridge plugin's behaviour, in-process. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { createBridgeDriver, hostVethName } from '../../src/drivers/bridge';
import { restoreForwardingAfterwards } from '../support/forwarding';
import { hostLinksWithPrefix, ip, ipTry, podLinks } from '../support/netns';
import { attachParsed, attachRequest, driverTestbed, failure, must, plugin, RecordingEnv } from './support';

const bed = driverTestbed('pbr');
const { prefix, fx } = bed;
const subnet = (third: number): string => `10.233.${third}.0/24`;
restoreForwardingAfterwards();

describe('bridge driver', () => {
  it('makes the bridge with its gateway, a veth whose peer is the pod interface, and answers host and pod interfaces', async () => {
    const driver = createBridgeDriver();
    const bridge = `${prefix}b1`;
    fx.trackHostLink(bridge);
    const pod = fx.create('shape');
    const rec = new RecordingEnv(bed.kernel, bed.ipam);
    const req = attachRequest({
      network: `${prefix}-a`,
      config: {
        type: 'bridge',
        bridge,
        isGateway: true,
        isDefaultGateway: true,
        mtu: 1400,
        ipam: { type: 'host-local', subnet: subnet(1) },
      },
      netns: pod.path,
      ifname: 'eth0',
    });
    fx.trackHostLink(hostVethName(req.containerId, req.runtimeIfname, req.ifname));
    const result = must(await attachParsed(driver, req, rec.env));

    assert.deepEqual(
      result.interfaces.map((i) => [i.name, i.sandbox ?? 'host']),
      [
        [bridge, 'host'],
        [hostVethName(req.containerId, req.runtimeIfname, req.ifname), 'host'],
        ['eth0', pod.path],
      ],
    );
    assert.equal(result.ips[0]?.interface, 2, 'the IP points at the pod interface');
    assert.equal(result.ips[0]?.gateway, '10.233.1.1');
    assert.deepEqual(result.routes, [{ dst: '0.0.0.0/0', gw: '10.233.1.1' }]);
    assert.match(ip('addr', 'show', bridge), /inet 10\.233\.1\.1\/24/, 'isGateway puts the gateway on the bridge');
    assert.match(
      ip('-d', 'link', 'show', hostVethName(req.containerId, req.runtimeIfname, req.ifname)),
      new RegExp(`master ${bridge} `),
    );
    assert.match(ip('-n', pod.name, 'link', 'show', 'eth0'), /mtu 1400.*state UP|mtu 1400/);
    assert.match(ip('-n', pod.name, 'route', 'show', 'default'), /default via 10\.233\.1\.1 dev eth0/);
    assert.equal(
      ipTry('netns', 'exec', pod.name, 'ping', '-c', '1', '-W', '2', '10.233.1.1').status,
      0,
      'the pod reaches its gateway',
    );
    const hostVethMac = result.interfaces[1]?.mac;
    assert.match(
      ip('link', 'show', hostVethName(req.containerId, req.runtimeIfname, req.ifname)),
      new RegExp(`link/ether ${hostVethMac}`),
      "the answered MAC is the kernel's",
    );

    await rec.undo();
    assert.deepEqual(
      hostLinksWithPrefix(hostVethName(req.containerId, req.runtimeIfname, req.ifname)),
      [],
      'undo removes the veth',
    );
    assert.match(
      ip('link', 'show', bridge),
      new RegExp(bridge),
      'the bridge stays: it serves every pod of the network',
    );
  });

  it('recreates a bridge deleted by hand since it was ensured, instead of trusting its cache', async () => {
    const driver = createBridgeDriver();
    const bridge = `${prefix}b2`;
    fx.trackHostLink(bridge);
    const rec = new RecordingEnv(bed.kernel, bed.ipam);
    const config = { type: 'bridge', bridge, isGateway: true, ipam: { type: 'host-local', subnet: subnet(2) } };
    const first = attachRequest({ network: `${prefix}-b`, config, netns: fx.create('first').path });
    must(await attachParsed(driver, first, rec.env));
    ip('link', 'del', bridge);
    const second = attachRequest({ network: `${prefix}-b`, config, netns: fx.create('second').path });
    must(await attachParsed(driver, second, rec.env));
    assert.match(ip('addr', 'show', bridge), /inet 10\.233\.2\.1\/24/, 'made again, with its gateway');
    await rec.undo();
  });

  it('refuses a bridge name that belongs to another kind of link, and configs it does not implement, before making anything', async () => {
    const driver = createBridgeDriver();
    const rec = new RecordingEnv(bed.kernel, bed.ipam);
    const pod = fx.create('refuse');
    const notBridge = failure(
      await attachParsed(
        driver,
        attachRequest({
          network: `${prefix}-c`,
          config: { type: 'bridge', bridge: 'lo', ipam: { type: 'host-local', subnet: subnet(3) } },
          netns: pod.path,
        }),
        rec.env,
      ),
    );
    assert.equal(notBridge.code, 7);
    assert.match(notBridge.message, /lo exists on the host but is not a bridge/);
    await rec.undo();
    assert.equal(
      failure(driver.parse([plugin('n', { type: 'bridge', ipMasq: true })])).code,
      2,
      'ipMasq: not implemented natively',
    );
    assert.equal(
      failure(driver.parse([plugin('n', { type: 'bridge', vlan: 7 })])).code,
      2,
      'vlan: not implemented natively',
    );
    assert.match(
      failure(driver.parse([plugin('n', { type: 'bridge', bridge: 'a/b' })])).message,
      /bridge "a\/b" may not contain "\/"/,
    );
    assert.deepEqual(podLinks(pod.name), [], 'nothing in the pod');
  });
  it('refuses hairpinMode together with promiscMode, as the reference plugin does', () => {
    const refused = failure(
      createBridgeDriver().parse([plugin('n', { type: 'bridge', hairpinMode: true, promiscMode: true })]),
    );
    assert.equal(refused.code, 7);
    assert.match(refused.message, /hairpinMode and promiscMode cannot be set at the same time/);
  });

  it('refuses a gateway on a bridge that has another IPv4 address, and with forceAddress replaces that address', async () => {
    const bridge = `${prefix}b4`;
    fx.trackHostLink(bridge);
    ip('link', 'add', bridge, 'type', 'bridge');
    ip('addr', 'add', '192.0.2.1/24', 'dev', bridge);
    const config = { type: 'bridge', bridge, isGateway: true, ipam: { type: 'host-local', subnet: subnet(4) } };
    const rec = new RecordingEnv(bed.kernel, bed.ipam);
    const pod = fx.create('force');
    const refused = failure(
      await attachParsed(
        createBridgeDriver(),
        attachRequest({ network: `${prefix}-f`, config, netns: pod.path }),
        rec.env,
      ),
    );
    assert.equal(refused.code, 7);
    assert.match(
      refused.message,
      /already has an IP address \(192\.0\.2\.1\/24\) different from the gateway 10\.233\.4\.1\/24/,
    );
    assert.match(refused.details ?? '', /"forceAddress": true/);
    await rec.undo();
    assert.deepEqual(podLinks(pod.name), [], 'nothing in the pod');

    const forced = { ...config, forceAddress: true };
    must(
      await attachParsed(
        createBridgeDriver(),
        attachRequest({ network: `${prefix}-f`, config: forced, netns: pod.path }),
        rec.env,
      ),
    );
    const v4 = ip('-4', '-o', 'addr', 'show', 'dev', bridge);
    assert.doesNotMatch(v4, /192\.0\.2\.1/, 'the other address is gone');
    assert.match(v4, /inet 10\.233\.4\.1\/24/, 'the gateway took its place');
    await rec.undo();
  });
});
