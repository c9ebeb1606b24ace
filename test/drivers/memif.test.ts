/** The memif driver's pure parts: its config, port names and DPDK device arguments, and what network-status says. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { memifDevargs, memifPortName } from '../../src/drivers/memif';
import { parseMemifConfig } from '../../src/drivers/memif/config';
import { networkStatus } from '../../src/networks/status';
import { redactSecret } from '../../src/ovs/ports';
import { plugin } from './support';

const parse = (config: Record<string, unknown>) => parseMemifConfig(plugin('fast', { type: 'memif', ...config }));

describe('memif config', () => {
  it('takes a bridge and fills in one receive queue, Ethernet mode and the default socket directory', () => {
    const r = parse({ bridge: 'br-user' });
    assert.ok(r.ok);
    assert.deepEqual(r.value, { bridge: 'br-user', rxQueues: 1, mode: 'ethernet', socketDir: '/run/plexus/memif-cni' });
  });

  for (const [what, config, message] of [
    ['no bridge', {}, /bridge/],
    ['a bridge name with a space', { bridge: 'br user' }, /OVS bridge name/],
    ['zero receive queues', { bridge: 'b', rxQueues: 0 }, /rxQueues/],
    ['17 receive queues', { bridge: 'b', rxQueues: 17 }, /rxQueues/],
    ['IP mode (OVS-DPDK carries Ethernet only)', { bridge: 'b', mode: 'ip' }, /mode/],
    ['a relative socket directory', { bridge: 'b', socketDir: 'run/memif' }, /absolute/],
    ['a comma in the socket directory', { bridge: 'b', socketDir: '/run/a,b' }, /comma/],
    ['a socket directory too long for a socket address', { bridge: 'b', socketDir: `/${'x'.repeat(70)}` }, /107 bytes/],
    ['a relative database socket', { bridge: 'b', ovsdbSocket: 'db.sock' }, /absolute/],
  ] as const) {
    it(`refuses ${what} with code 7, naming the network`, () => {
      const r = parse(config);
      assert.ok(!r.ok);
      assert.equal(r.error.code, 7);
      assert.match(r.error.message, /memif config of network fast/);
      assert.match(r.error.message, message);
    });
  }
});

describe('memif ports', () => {
  it('names a port after its container and interface: short, stable, distinct', () => {
    const a = memifPortName('c0ffee', 'eth0', 'memif0');
    assert.match(a, /^pxm[0-9a-f]{12}$/);
    assert.equal(memifPortName('c0ffee', 'eth0', 'memif0'), a);
    assert.notEqual(memifPortName('c0ffee', 'eth0', 'memif1'), a);
    assert.notEqual(memifPortName('c0ffef', 'eth0', 'memif0'), a);
    assert.notEqual(memifPortName('c0ffee', 'eth1', 'memif0'), a, 'the same container under another CNI_IFNAME');
  });

  it('serves the socket as memif server, on a path (not an abstract socket, which would not cross netns), with the secret', () => {
    const d = memifDevargs('pxm1', '/run/x/memif.sock', 'S3cret');
    assert.equal(d, 'net_memif_pxm1,role=server,id=0,socket=/run/x/memif.sock,socket-abstract=no,secret=S3cret');
    assert.equal(
      redactSecret(d),
      'net_memif_pxm1,role=server,id=0,socket=/run/x/memif.sock,socket-abstract=no,secret=***',
    );
  });

  it('network-status carries memif device-info for the interface that is a socket', () => {
    const [entry] = networkStatus([
      {
        network: 'default/fast',
        ifname: 'memif0',
        isDefault: false,
        result: { interfaces: [{ name: 'memif0', socketPath: '/run/memif/memif3/memif.sock' }], ips: [], routes: [] },
      },
    ]);
    assert.deepEqual(entry?.['device-info'], {
      type: 'memif',
      version: '1.1.0',
      memif: { role: 'slave', mode: 'ethernet', path: '/run/memif/memif3/memif.sock' },
    });
    assert.equal(entry?.ips, undefined, 'no ips field for an interface without addresses, as Multus writes it');
  });
});
