/**
 * The native host-device driver against the reference host-device plugin 1.9.1 (test/drivers/differential.ts): each
 * side's node has a device of its own to give (one end of a veth pair, up, the other end staying on the node).
 * `kernelpath`, `pciBusID` and a PCI `deviceID` need a PCI network device, which this machine does not have.
 */
import { describe, it } from 'node:test';
import { createHostDeviceDriver } from '../../src/drivers/host-device';
import { ip } from '../support/netns';
import { expectedPrerequisites } from '../support/prerequisites';
import { referencePluginsMissing } from '../support/plugin-dir';
import { differentialBed, type Side } from './differential';

const bed = differentialBed({
  tag: 'phd',
  type: 'host-device',
  driver: (node) => createHostDeviceDriver({ node }),
});
const DEVICE_MAC = '02:42:ac:11:00:3a';
/** The reference keeps the device's name in its alias; Plexus keeps it in the journal (docs/drivers.md). */
const alias = { knownDifferences: ['- pod.link[eth0].ifalias = "hd0"'] };

/** The node's device `hd0` (its peer hd1 stays on the node), up, with a MAC the config can name. */
function device({ node }: Side): void {
  ip('-n', node.name, 'link', 'add', 'hd0', 'address', DEVICE_MAC, 'type', 'veth', 'peer', 'name', 'hd1');
  ip('-n', node.name, 'link', 'set', 'hd1', 'up');
  ip('-n', node.name, 'link', 'set', 'hd0', 'up');
}

describe(
  'host-device driver against the reference host-device plugin 1.9.1',
  { skip: expectedPrerequisites(referencePluginsMissing()) },
  () => {
    it('device: the pod addresses and routes', () =>
      bed.sameAsReference({ config: { device: 'hd0' }, prepare: device, ...alias }));
    it('hwaddr', () =>
      bed.sameAsReference({ config: { hwaddr: DEVICE_MAC.toUpperCase() }, prepare: device, ...alias }));
    it('no ipam', () => bed.sameAsReference({ config: { device: 'hd0' }, ipam: null, prepare: device, ...alias }));
  },
);
