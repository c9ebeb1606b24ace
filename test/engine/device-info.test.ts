/**
 * network-status device-info from the device plugins' files: the engine reads the file of each attachment's kubelet
 * device at ADD, keeps it with the attachment, and a file it cannot use is left out without failing the pod.
 */
import assert from 'node:assert/strict';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, it } from 'node:test';
import { ok } from '../../src/cni/errors';
import { deviceInfoFile } from '../../src/deviceplugin/device-info';
import { RESOURCE_NAME_ANNOTATION } from '../../src/engine/kubelet-devices';
import { cniCall, engineBed, type EngineBed } from '../support/engine-bed';

const RESOURCE = 'example.com/vf';
let bed: EngineBed;
beforeEach(async () => {
  bed = await engineBed();
  // blue and red take their interface's device from the kubelet; their bridge driver does not mind.
  ['blue', 'red'].forEach((name, i) => {
    writeFileSync(
      join(bed.dir, 'networks', `${name}.json`),
      JSON.stringify({
        apiVersion: 'k8s.cni.cncf.io/v1',
        kind: 'NetworkAttachmentDefinition',
        metadata: { name, annotations: { [RESOURCE_NAME_ANNOTATION]: RESOURCE } },
        spec: {
          config: JSON.stringify({
            cniVersion: '1.0.0',
            name,
            type: 'bridge',
            bridge: `br-${name}`,
            ipam: { type: 'host-local', ranges: [[{ subnet: `10.9.${i + 1}.0/24` }]] },
          }),
        },
      }),
    );
  });
});
afterEach(() => bed.remove());

/** A file as any device plugin writes it (SR-IOV's has more than Plexus's DeviceInfo type says). */
const writeDeviceInfo = (dir: string, resource: string, id: string, info: Record<string, unknown>): void => {
  mkdirSync(join(dir, 'dp'), { recursive: true });
  writeFileSync(deviceInfoFile(dir, resource, id), JSON.stringify(info));
};
const devices = { devicesOf: () => Promise.resolve(ok(new Map([[RESOURCE, ['0000:03:00.1', '0000:03:00.2']]]))) };

describe('device-info in network-status', () => {
  it("is the device plugin's file for the attachment's device; a malformed file is left out and the pod attaches", async () => {
    const dir = join(bed.dir, 'devinfo');
    const file = { type: 'pci', version: '1.1.0', pci: { 'pci-address': '0000:03:00.1', 'rdma-device': 'mlx5_3' } };
    writeDeviceInfo(dir, RESOURCE, '0000:03:00.1', file);
    writeFileSync(deviceInfoFile(dir, RESOURCE, '0000:03:00.2'), '{"type": "pci"');
    const engine = bed.engineWith({ ports: { devices }, settings: { deviceInfoDir: dir } });
    const netns = bed.pod('a');
    const r = await engine.add(cniCall('ADD', 'ca', netns));
    assert.ok(r.ok, !r.ok ? r.error.message : '');
    const status = (await bed.journal.load('ca', 'eth0'))!.details!.networkStatus;
    assert.deepEqual(
      status.map((s) => [s.name, s['device-info']]),
      [
        ['default/podnet', undefined],
        ['default/blue', file],
        ['default/red', undefined],
      ],
    );
  });

  it("is kept with the attachment: the pod's status, computed again when a network is detached, still has it", async () => {
    const dir = join(bed.dir, 'devinfo');
    const file = { type: 'pci', version: '1.1.0', pci: { 'pci-address': '0000:03:00.1' } };
    writeDeviceInfo(dir, RESOURCE, '0000:03:00.1', file);
    const engine = bed.engineWith({ ports: { devices }, settings: { deviceInfoDir: dir } });
    const netns = bed.pod('b');
    assert.ok((await engine.add(cniCall('ADD', 'cb', netns))).ok);
    rmSync(join(dir, 'dp'), { recursive: true });
    assert.ok((await engine.detachAttachment('cb', 'eth0', { network: 'default/red', ifname: 'net2' })).ok);
    const status = (await bed.journal.load('cb', 'eth0'))!.details!.networkStatus;
    assert.deepEqual(
      status.map((s) => [s.name, s['device-info']]),
      [
        ['default/podnet', undefined],
        ['default/blue', file],
      ],
    );
  });

  it('is not read without a device-info dir', async () => {
    const dir = join(bed.dir, 'devinfo');
    writeDeviceInfo(dir, RESOURCE, '0000:03:00.1', {
      type: 'pci',
      version: '1.1.0',
      pci: { 'pci-address': '0000:03:00.1' },
    });
    const engine = bed.engineWith({ ports: { devices } });
    assert.ok((await engine.add(cniCall('ADD', 'cc', bed.pod('c')))).ok);
    const status = (await bed.journal.load('cc', 'eth0'))!.details!.networkStatus;
    assert.deepEqual(
      status.map((s) => s['device-info']),
      [undefined, undefined, undefined],
    );
  });
});
