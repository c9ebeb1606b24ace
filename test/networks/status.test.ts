/** network-status entries: where their device-info comes from. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { CniResult } from '../../src/cni/types';
import { networkStatus } from '../../src/networks/status';

const vf = (pciID?: string): CniResult => ({
  interfaces: [{ name: 'net1', mac: '02:00:00:00:00:01', sandbox: '/var/run/netns/p', ...(pciID ? { pciID } : {}) }],
  ips: [{ address: '10.7.0.5/24', interface: 0 }],
  routes: [],
});
const outcome = { network: 'default/fast', ifname: 'net1', isDefault: false };

describe('network-status device-info', () => {
  it("comes from the result's pciID when the device plugin wrote no file", () => {
    const [entry] = networkStatus([{ ...outcome, result: vf('0000:03:00.1') }]);
    assert.deepEqual(entry!['device-info'], { type: 'pci', version: '1.1.0', pci: { 'pci-address': '0000:03:00.1' } });
  });

  it("is the device plugin's file as written, over what the result implies", () => {
    const file = {
      type: 'pci',
      version: '1.1.0',
      pci: { 'pci-address': '0000:03:00.2', 'rdma-device': 'mlx5_3', 'representor-device': 'pf0vf1' },
    };
    const [entry] = networkStatus([{ ...outcome, result: vf('0000:03:00.1'), deviceInfo: file }]);
    assert.deepEqual(entry!['device-info'], file);
  });

  it('is given for an interface whose result names no device at all', () => {
    const file = {
      type: 'vdpa',
      version: '1.1.0',
      vdpa: { 'parent-device': 'vdpa:0000:65:00.3', driver: 'vhost', path: '/dev/vhost-vdpa-1' },
    };
    const [entry] = networkStatus([{ ...outcome, result: vf(), deviceInfo: file }]);
    assert.deepEqual(entry!['device-info'], file);
  });

  it('is left out when neither the result nor a file says anything', () => {
    const [entry] = networkStatus([{ ...outcome, result: vf() }]);
    assert.equal('device-info' in entry!, false);
  });
});
