import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { podLinkMark } from '../../src/drivers/common/attachment-id';
import { createTapDriver } from '../../src/drivers/tap';
import { ip } from '../support/netns';
import { attachRequest, failure, must, plugin, RecordingEnv, driverTestbed, attachParsed } from './support';

const tapDriver = createTapDriver();

const bed = driverTestbed('ptp');
const { prefix, fx } = bed;

describe('tap driver', () => {
  it('answers the tap in the sandbox with the configured MAC and MTU, and its IPs', async () => {
    const pod = fx.create('shape');
    const rec = new RecordingEnv(bed.kernel, bed.ipam);
    const req = attachRequest({
      network: `${prefix}-a`,
      config: {
        type: 'tap',
        mac: '02:00:00:AA:BB:01',
        mtu: 1400,
        ipam: { type: 'host-local', subnet: '10.251.0.0/24' },
      },
      netns: pod.path,
      ifname: 'tap0',
    });
    const result = must(await attachParsed(tapDriver, req, rec.env));
    assert.deepEqual(result.interfaces, [{ name: 'tap0', mac: '02:00:00:aa:bb:01', mtu: 1400, sandbox: pod.path }]);
    assert.match(result.ips[0]?.address ?? '', /^10\.251\.0\.\d+\/24$/);
    assert.equal(result.ips[0]?.interface, 0);
    assert.match(
      ip('-n', pod.name, 'addr', 'show', 'tap0'),
      new RegExp((result.ips[0]?.address ?? 'missing').replace(/\./g, '\\.')),
    );
    await rec.undo();
  });

  it('creates a persistent multi-queue tap owned by the configured user and group inside the pod netns', async () => {
    const pod = fx.create('mq');
    const rec = new RecordingEnv(bed.kernel, bed.ipam);
    must(
      await attachParsed(
        tapDriver,
        attachRequest({
          network: `${prefix}-b`,
          config: {
            type: 'tap',
            multiQueue: true,
            owner: 1234,
            group: 4321,
          },
          netns: pod.path,
        }),
        rec.env,
      ),
    );
    const details = ip('-n', pod.name, '-d', 'link', 'show', 'net1');
    assert.match(details, /tun type tap/);
    assert.match(details, /multi_queue/);
    assert.match(details, /persist on/);
    assert.match(details, /user 1234/);
    assert.match(details, /group 4321/);
    await rec.undo();
  });

  it('uses the runtime-requested MAC over the configured one', async () => {
    const pod = fx.create('mac');
    const rec = new RecordingEnv(bed.kernel, bed.ipam);
    const result = must(
      await attachParsed(
        tapDriver,
        attachRequest({
          network: `${prefix}-c`,
          config: { type: 'tap', mac: '02:00:00:00:00:01' },
          netns: pod.path,
          mac: '02:00:00:00:00:02',
        }),
        rec.env,
      ),
    );
    assert.equal(result.interfaces[0]?.mac, '02:00:00:00:00:02');
    await rec.undo();
  });

  it('enslaves the tap to a bridge that exists in the pod netns', async () => {
    const pod = fx.create('br');
    pod.exec('ip', 'link', 'add', 'br0', 'type', 'bridge');
    const rec = new RecordingEnv(bed.kernel, bed.ipam);
    must(
      await attachParsed(
        tapDriver,
        attachRequest({ network: `${prefix}-d`, config: { type: 'tap', bridge: 'br0' }, netns: pod.path }),
        rec.env,
      ),
    );
    assert.match(ip('-n', pod.name, 'link', 'show', 'net1'), /master br0/);
    await rec.undo();
  });

  it('fails with code 7 when the bridge is not in the pod netns, and undo leaves no tap', async () => {
    const pod = fx.create('nobr');
    const rec = new RecordingEnv(bed.kernel, bed.ipam);
    const e = failure(
      await attachParsed(
        tapDriver,
        attachRequest({ network: `${prefix}-e`, config: { type: 'tap', bridge: 'nobr0' }, netns: pod.path }),
        rec.env,
      ),
    );
    assert.equal(e.code, 7);
    assert.match(e.message, /bridge nobr0 not found in the pod netns/);
    await rec.undo();
    assert.equal(must(await bed.kernel.getLink(pod.path, 'net1')), null);
  });

  it('undo deletes the tap and releases the lease', async () => {
    const pod = fx.create('undo');
    const rec = new RecordingEnv(bed.kernel, bed.ipam);
    const network = `${prefix}-f`;
    const req = attachRequest({
      network,
      config: { type: 'tap', ipam: { type: 'host-local', subnet: '10.251.1.0/24' } },
      netns: pod.path,
      runtimeIfname: 'eth0',
    });
    must(await attachParsed(tapDriver, req, rec.env));
    assert.deepEqual(rec.steps, [
      { kind: 'releaseIpam', network, containerId: req.containerId, ifname: 'eth0:net1' },
      { kind: 'deleteLink', netns: pod.path, name: 'net1', mark: podLinkMark(req.containerId, 'eth0', 'net1') },
    ]);
    await rec.undo();
    assert.equal(must(await bed.kernel.getLink(pod.path, 'net1')), null);
    assert.deepEqual(await bed.ipam.leases(network), []);
  });

  it('rejects invalid config with code 7 naming the field', () => {
    const cases: [Record<string, unknown>, RegExp][] = [
      [{ type: 'tap', owner: -1 }, /tap config of network n: owner: /],
      [{ type: 'tap', group: 'wheel' }, /group: /],
      [{ type: 'tap', mac: 'nope' }, /mac: must be a MAC address/],
      [{ type: 'tap', multiQueue: 'yes' }, /multiQueue: /],
      [{ type: 'tap', bridge: 'has space' }, /bridge "has space"/],
    ];
    for (const [config, message] of cases) {
      const e = failure(tapDriver.parse([plugin('n', config)]));
      assert.equal(e.code, 7);
      assert.match(e.message, message);
    }
  });
});
