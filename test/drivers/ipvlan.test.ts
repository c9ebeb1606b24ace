import assert from 'node:assert/strict';
import { before, describe, it } from 'node:test';
import { createIpvlanDriver } from '../../src/drivers/ipvlan';
import { ip } from '../support/netns';
import { skipOptional } from '../support/prerequisites';
import { attachRequest, failure, must, plugin, RecordingEnv, driverTestbed, hostUplink, attachParsed } from './support';

const ipvlanDriver = createIpvlanDriver();

const bed = driverTestbed('piv');
const { prefix, fx } = bed;
const master = `${prefix}m0`;
/** Why ipvlan cannot be tested here, or undefined when the kernel has it. */
let missing: string | undefined;

before(async () => {
  hostUplink(fx, master);
  // Probe in a scratch netns, on a master of its own, so the probe touches nothing on the host.
  const scratch = fx.create('probe');
  scratch.exec('ip', 'link', 'add', 'p0', 'type', 'veth', 'peer', 'name', 'p1');
  const probe = await bed.kernel.batch(scratch.path, [
    { op: 'linkAdd', link: { kind: 'ipvlan', name: 'iv0', master: 'p0', mode: 'l2' } },
  ]);
  if (!probe.ok) missing = probe.error.failure.extack ?? probe.error.message;
});

describe('ipvlan driver', () => {
  it('creates the ipvlan inside the pod netns with the configured mode, and answers its IPs', async (t) => {
    if (skipOptional(t, missing && `ipvlan not built into this kernel: ${missing}`)) return;
    const pod = fx.create('kind');
    const rec = new RecordingEnv(bed.kernel, bed.ipam);
    const result = must(
      await attachParsed(
        ipvlanDriver,
        attachRequest({
          network: `${prefix}-a`,
          config: { type: 'ipvlan', master, mode: 'l3', ipam: { type: 'host-local', subnet: '10.253.0.0/24' } },
          netns: pod.path,
        }),
        rec.env,
      ),
    );
    assert.equal(result.interfaces[0]?.sandbox, pod.path);
    assert.match(ip('-n', pod.name, '-d', 'link', 'show', 'net1'), /ipvlan {2}mode l3|ipvlan mode l3/);
    await rec.undo();
    assert.equal(must(await bed.kernel.getLink(pod.path, 'net1')), null);
    assert.deepEqual(await bed.ipam.leases(`${prefix}-a`), []);
  });

  it('lets two pods on one master in l2 mode reach each other', async (t) => {
    if (skipOptional(t, missing && `ipvlan not built into this kernel: ${missing}`)) return;
    const a = fx.create('pa');
    const b = fx.create('pb');
    const rec = new RecordingEnv(bed.kernel, bed.ipam);
    const config = { type: 'ipvlan', master, ipam: { type: 'host-local', subnet: '10.253.1.0/24' } };
    const ra = must(
      await attachParsed(ipvlanDriver, attachRequest({ network: `${prefix}-b`, config, netns: a.path }), rec.env),
    );
    must(await attachParsed(ipvlanDriver, attachRequest({ network: `${prefix}-b`, config, netns: b.path }), rec.env));
    const ping = b.exec('ping', '-c', '1', '-W', '1', ra.ips[0]?.address.split('/')[0] ?? '');
    assert.equal(ping.status, 0, ping.out);
    await rec.undo();
  });

  it('reports the kernel error with context when ipvlan is missing, and undo cleans up', async (t) => {
    if (skipOptional(t, missing ? undefined : 'ipvlan is built into this kernel')) return;
    const pod = fx.create('nokernel');
    const rec = new RecordingEnv(bed.kernel, bed.ipam);
    const network = `${prefix}-c`;
    const e = failure(
      await attachParsed(
        ipvlanDriver,
        attachRequest({
          network,
          config: { type: 'ipvlan', master, ipam: { type: 'host-local', subnet: '10.253.2.0/24' } },
          netns: pod.path,
        }),
        rec.env,
      ),
    );
    assert.match(e.message, /creating ipvlan net1 \(mode l2\)/);
    await rec.undo();
    assert.deepEqual(await bed.ipam.leases(network), []);
  });

  it('rejects invalid config (code 7, field named), linkInContainer and a MAC request (code 2)', async () => {
    const bad = failure(ipvlanDriver.parse([plugin('n', { type: 'ipvlan', mode: 'l4' })]));
    assert.equal(bad.code, 7);
    assert.match(bad.message, /ipvlan config of network n: mode: /);
    assert.equal(failure(ipvlanDriver.parse([plugin('n', { type: 'ipvlan', linkInContainer: true })])).code, 2);
    const pod = fx.create('mac');
    const e = failure(
      await attachParsed(
        ipvlanDriver,
        attachRequest({ network: 'n', config: { type: 'ipvlan', master }, netns: pod.path, mac: '02:00:00:00:00:01' }),
        new RecordingEnv(bed.kernel, bed.ipam).env,
      ),
    );
    assert.equal(e.code, 2);
    assert.match(e.message, /share their master's MAC/);
  });
});
