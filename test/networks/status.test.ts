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

describe('network-status entries as Multus writes them', () => {
  const routed: CniResult = {
    interfaces: [{ name: 'net1', mac: '02:00:00:00:00:01', sandbox: '/var/run/netns/p' }],
    ips: [{ address: '10.1.1.21/24', gateway: '10.1.1.254', interface: 0 }],
    routes: [
      { dst: '0.0.0.0/0', gw: '10.1.1.254' },
      { dst: '10.9.0.0/16', gw: '10.1.1.1' },
    ],
  };

  it("carries the gateways of the attachment's default routes as `gateway`", () => {
    const [entry] = networkStatus([{ ...outcome, result: routed }]);
    assert.deepEqual(entry!.gateway, ['10.1.1.254']);
  });

  it('has no `gateway` when the attachment has no default route', () => {
    const [entry] = networkStatus([{ ...outcome, result: vf() }]);
    assert.equal('gateway' in entry!, false);
  });

  it('writes `default` only on the default network, as Multus leaves out a false one', () => {
    const [pod, secondary] = networkStatus([
      { network: 'kube-system/podnet', ifname: 'eth0', isDefault: true, result: vf() },
      { ...outcome, result: vf() },
    ]);
    assert.equal(pod!.default, true);
    assert.equal('default' in secondary!, false);
  });

  it('leaves out `ips` for an interface without addresses, as Multus does', () => {
    const [entry] = networkStatus([{ ...outcome, result: { ...vf(), ips: [] } }]);
    assert.deepEqual(entry, {
      name: 'default/fast',
      interface: 'net1',
      mac: '02:00:00:00:00:01',
      dns: {},
    });
  });
});
