/**
 * host-device with a veth the test creates on the host standing in for a NIC or SR-IOV VF: moving, renaming and
 * returning a netdev works the same for both. (Only on netns destruction do they differ: a physical device goes
 * back to the initial netns, a veth is destroyed.)
 */
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { selectorFor, parseHostDeviceConfig } from '../../src/drivers/host-device/config';
import {
  findHostDevice,
  createHostDeviceDriver,
  returnLinkKind,
  returnLinkStep,
  returnLinkToHost,
} from '../../src/drivers/host-device';
import type { LinkInfo } from '../../src/kernel/types';
import { hostLinksWithPrefix, ip, ipTry } from '../support/netns';
import { attachRequest, failure, must, plugin, RecordingEnv, driverTestbed, attachParsed } from './support';

const hostDeviceDriver = createHostDeviceDriver();

const bed = driverTestbed('phd');
const { prefix, fx } = bed;
let counter = 0;

/** A fresh "host device": a veth on the host, its peer in a test netns so nothing it sends leaves our namespaces. */
function hostDevice(): { name: string; mac: string } {
  const name = `${prefix}d${counter++}`;
  const far = fx.create(`far${counter}`);
  fx.trackHostLink(name);
  ip('link', 'add', name, 'type', 'veth', 'peer', 'name', 'far0', 'netns', far.name);
  const mac = /link\/ether ([0-9a-f:]{17})/.exec(ip('link', 'show', name))?.[1] ?? '';
  return { name, mac };
}
const onHost = (name: string): boolean => ipTry('link', 'show', name).status === 0;

describe('host-device driver', () => {
  it('moves the named host device into the pod netns under the pod interface name, with its IPs', async () => {
    const dev = hostDevice();
    const pod = fx.create('move');
    const rec = new RecordingEnv(bed.kernel, bed.ipam);
    const req = attachRequest({
      network: `${prefix}-a`,
      config: {
        type: 'host-device',
        device: dev.name,
        ipam: { type: 'static', addresses: [{ address: '10.241.0.5/24' }] },
      },
      netns: pod.path,
      ifname: 'sriov0',
    });
    const result = must(await attachParsed(hostDeviceDriver, req, rec.env));
    assert.deepEqual(result.interfaces, [{ name: 'sriov0', mac: dev.mac, mtu: 1500, sandbox: pod.path }]);
    assert.deepEqual(result.ips, [{ address: '10.241.0.5/24', interface: 0 }]);
    assert.equal(onHost(dev.name), false, 'the device left the host');
    assert.match(ip('-n', pod.name, 'addr', 'show', 'sriov0'), /10\.241\.0\.5\/24/);
    assert.match(ip('-n', pod.name, 'link', 'show', 'sriov0'), /state (UP|LOWERLAYERDOWN)|,UP/);
    await rec.undo();
  });

  it('undo returns the device to the host under its original name and releases the lease', async () => {
    const dev = hostDevice();
    const pod = fx.create('undo');
    const rec = new RecordingEnv(bed.kernel, bed.ipam);
    const network = `${prefix}-b`;
    must(
      await attachParsed(
        hostDeviceDriver,
        attachRequest({
          network,
          config: { type: 'host-device', device: dev.name, ipam: { type: 'host-local', subnet: '10.241.1.0/24' } },
          netns: pod.path,
        }),
        rec.env,
      ),
    );
    assert.deepEqual(
      rec.steps.map((s) => (s.kind === 'driver' ? `${s.driver}/${s.step}` : s.kind)),
      ['releaseIpam', 'host-device/returnLink'],
    );
    assert.deepEqual(rec.steps[1], returnLinkStep({ netns: pod.path, name: 'net1', hostName: dev.name, mac: dev.mac }));
    await rec.undo();
    assert.equal(onHost(dev.name), true, 'back on the host with its name');
    assert.match(ip('link', 'show', dev.name), new RegExp(dev.mac));
    assert.doesNotMatch(ip('addr', 'show', dev.name), /10\.241\./, 'the pod address did not come along');
    assert.equal(must(await bed.kernel.getLink(pod.path, 'net1')), null);
    assert.deepEqual(await bed.ipam.leases(network), []);
  });

  it('undo brings the device up again when it was up on the host, and leaves one that was down down', async () => {
    // A device plugin counts a host device healthy while it is up (docs/device-plugin.md): one that came back down
    // after its first pod would be lost to the pool.
    const flagsOf = (name: string): string => /<([^>]*)>/.exec(ip('link', 'show', name))?.[1] ?? '';
    for (const wasUp of [true, false]) {
      const dev = hostDevice();
      if (wasUp) ip('link', 'set', dev.name, 'up');
      const pod = fx.create(`state${wasUp ? 'up' : 'down'}`);
      const rec = new RecordingEnv(bed.kernel, bed.ipam);
      must(
        await attachParsed(
          hostDeviceDriver,
          attachRequest({ network: `${prefix}-s`, config: { type: 'host-device', device: dev.name }, netns: pod.path }),
          rec.env,
        ),
      );
      await rec.undo();
      assert.equal(onHost(dev.name), true);
      assert.equal(flagsOf(dev.name).split(',').includes('UP'), wasUp, `${dev.name} flags: ${flagsOf(dev.name)}`);
    }
  });

  it('finds the device by hwaddr', async () => {
    const dev = hostDevice();
    const pod = fx.create('mac');
    const rec = new RecordingEnv(bed.kernel, bed.ipam);
    const result = must(
      await attachParsed(
        hostDeviceDriver,
        attachRequest({
          network: `${prefix}-c`,
          config: { type: 'host-device', hwaddr: dev.mac.toUpperCase() },
          netns: pod.path,
        }),
        rec.env,
      ),
    );
    assert.equal(result.interfaces[0]?.mac, dev.mac);
    assert.equal(onHost(dev.name), false);
    await rec.undo();
    assert.equal(onHost(dev.name), true);
  });

  it('returning succeeds when the device is already back or the pod netns is gone', async () => {
    const dev = hostDevice();
    const pod = fx.create('gone');
    const rec = new RecordingEnv(bed.kernel, bed.ipam);
    must(
      await attachParsed(
        hostDeviceDriver,
        attachRequest({ network: `${prefix}-d`, config: { type: 'host-device', device: dev.name }, netns: pod.path }),
        rec.env,
      ),
    );
    const recorded = rec.steps[0];
    assert.ok(recorded?.kind === 'driver' && recorded.step === 'returnLink', 'a returnLink step of host-device');
    const step = must(returnLinkKind.read(recorded.data, recorded.v));
    must(await returnLinkToHost(step, bed.kernel));
    must(await returnLinkToHost(step, bed.kernel)); // again: nothing left in the pod
    assert.equal(onHost(dev.name), true);

    must(
      await attachParsed(
        hostDeviceDriver,
        attachRequest({ network: `${prefix}-d`, config: { type: 'host-device', device: dev.name }, netns: pod.path }),
        new RecordingEnv(bed.kernel, bed.ipam).env,
      ),
    );
    ip('netns', 'del', pod.name); // a veth dies with its netns (a VF would go back to the initial netns)
    must(await returnLinkToHost(step, bed.kernel));
  });

  it('fails with code 7 when the device is not on the host, without recording anything', async () => {
    const pod = fx.create('missing');
    const rec = new RecordingEnv(bed.kernel, bed.ipam);
    const e = failure(
      await attachParsed(
        hostDeviceDriver,
        attachRequest({
          network: `${prefix}-e`,
          config: { type: 'host-device', device: `${prefix}zz` },
          netns: pod.path,
        }),
        rec.env,
      ),
    );
    assert.equal(e.code, 7);
    assert.match(e.message, new RegExp(`device ${prefix}zz not found on the host`));
    assert.deepEqual(rec.steps, []);
  });

  it('refuses to take a device when the pod already has an interface of that name', async () => {
    const dev = hostDevice();
    const pod = fx.create('clash');
    pod.exec('ip', 'link', 'add', 'net1', 'type', 'veth', 'peer', 'name', 'other');
    const rec = new RecordingEnv(bed.kernel, bed.ipam);
    const e = failure(
      await attachParsed(
        hostDeviceDriver,
        attachRequest({ network: `${prefix}-f`, config: { type: 'host-device', device: dev.name }, netns: pod.path }),
        rec.env,
      ),
    );
    assert.match(e.message, /net1 already exists/);
    assert.deepEqual(rec.steps, []);
    assert.equal(onHost(dev.name), true);
  });

  it('resolves a PCI address (pciBusID or a device plugin deviceID) through sysfs, including virtio devices', async () => {
    const root = await mkdtemp(join(tmpdir(), 'plexus-sysfs-'));
    try {
      await mkdir(join(root, 'bus/pci/devices/0000:3b:00.1/net/ens1f0v1'), { recursive: true });
      await mkdir(join(root, 'bus/pci/devices/0000:00:04.0/virtio1/net/eth7'), { recursive: true });
      await mkdir(join(root, 'devices/pci0000:00/0000:00:1f.6/net/eno1'), { recursive: true });
      const links = [
        { name: 'ens1f0v1', index: 7 },
        { name: 'eth7', index: 8 },
        { name: 'eno1', index: 9 },
      ] as LinkInfo[];
      const conf = must(parseHostDeviceConfig(plugin('n', { type: 'host-device', device: 'ignored0' })));
      const fromDevicePlugin = must(selectorFor(plugin('n', {}), conf, '0000:3B:00.1'));
      assert.equal(must(await findHostDevice(fromDevicePlugin, links, root)).index, 7);
      assert.equal(
        must(await findHostDevice({ by: 'pciBusID', pciAddress: '0000:00:04.0' }, links, root)).name,
        'eth7',
      );
      assert.equal(
        must(await findHostDevice({ by: 'kernelpath', path: '/sys/devices/pci0000:00/0000:00:1f.6' }, links, root))
          .name,
        'eno1',
      );
      const e = failure(await findHostDevice({ by: 'pciBusID', pciAddress: '0000:99:00.0' }, links, root));
      assert.equal(e.code, 7);
      assert.match(e.message, /device of PCI function 0000:99:00.0 not found on the host/);
    } finally {
      await rm(root, { recursive: true, force: true });
    }
  });

  it('rejects invalid selectors with code 7 naming the field, and needs some way to find the device', async () => {
    const cases: [Record<string, unknown>, RegExp][] = [
      [
        { type: 'host-device', pciBusID: '3b:00.1' },
        /host-device config of network n: pciBusID: must be a PCI address/,
      ],
      [
        { type: 'host-device', kernelpath: '/etc/passwd' },
        /kernelpath: must be an absolute path under \/sys\/devices\//,
      ],
      [{ type: 'host-device', hwaddr: 'zz' }, /hwaddr: must be a MAC address/],
      [{ type: 'host-device', device: 'x'.repeat(16) }, /device "x+" is longer than 15 bytes/],
    ];
    for (const [config, message] of cases) {
      const e = failure(hostDeviceDriver.parse([plugin('n', config)]));
      assert.equal(e.code, 7);
      assert.match(e.message, message);
    }
    // Valid on its own (the device may come from a device plugin), but an attach without a deviceID cannot proceed.
    assert.equal(hostDeviceDriver.parse([plugin('n', { type: 'host-device' })]).ok, true);
    const pod = fx.create('nosel');
    const e = failure(
      await attachParsed(
        hostDeviceDriver,
        attachRequest({ network: 'n', config: { type: 'host-device' }, netns: pod.path }),
        new RecordingEnv(bed.kernel, bed.ipam).env,
      ),
    );
    assert.equal(e.code, 7);
    assert.match(e.message, /specify one of "device", "hwaddr", "kernelpath" or "pciBusID"/);
    assert.deepEqual(hostLinksWithPrefix(`${prefix}zz`), []);
  });
});
