/**
 * CHECK of the native macvlan, tap, ptp and host-device drivers against their reference plugins' 1.9.1
 * (test/drivers/differential.ts): the same config ADDed through each, the same change made to the pod by hand, then
 * both CHECKed (Plexus: the engine's CHECK of the pod's side, then the driver's own). Both pass, or both fail.
 */
import { describe, it } from 'node:test';
import { createHostDeviceDriver } from '../../src/drivers/host-device';
import { createMacvlanDriver } from '../../src/drivers/macvlan';
import { createPtpDriver } from '../../src/drivers/ptp';
import { createTapDriver } from '../../src/drivers/tap';
import { ip } from '../support/netns';
import { expectedPrerequisites } from '../support/prerequisites';
import { referencePluginsMissing } from '../support/plugin-dir';
import { type DifferentialCase, differentialBed, type Side, type Tampering } from './differential';

const macvlan = differentialBed({ tag: 'pmc', type: 'macvlan', driver: (node) => createMacvlanDriver({ node }) });
const ptp = differentialBed({ tag: 'ppc', type: 'ptp', driver: (node) => createPtpDriver({ node }) });
const tap = differentialBed({ tag: 'ptc', type: 'tap', driver: () => createTapDriver() });
const hostDevice = differentialBed({
  tag: 'phc',
  type: 'host-device',
  driver: (node) => createHostDeviceDriver({ node }),
});

function uplink({ node }: Side): void {
  ip('-n', node.name, 'link', 'add', 'up0', 'type', 'veth', 'peer', 'name', 'up1');
  ip('-n', node.name, 'link', 'set', 'up1', 'up');
  ip('-n', node.name, 'link', 'set', 'up0', 'up');
}
const onMaster: DifferentialCase = { config: { master: 'up0' }, ipam: ipv4(), prepare: uplink };
const routed: DifferentialCase = { config: {}, ipam: ipv4() };
const aTap: DifferentialCase = { config: {}, ipam: ipv4() };
const aDevice: DifferentialCase = {
  config: { device: 'hd0' },
  ipam: ipv4(),
  prepare: ({ node }) => {
    ip('-n', node.name, 'link', 'add', 'hd0', 'type', 'veth', 'peer', 'name', 'hd1');
    ip('-n', node.name, 'link', 'set', 'hd1', 'up');
  },
};

/** IPv4 only, so CHECK is not raced by DAD. */
function ipv4(): Record<string, unknown> {
  return { type: 'host-local', ranges: [[{ subnet: '10.79.0.0/24' }]], routes: [{ dst: '192.0.2.0/24' }] };
}

const untouched: Tampering = () => undefined;
const addressRemoved: Tampering = ({ pod }, result) =>
  ip('-n', pod.name, 'addr', 'del', result.ips[0]!.address, 'dev', 'eth0');
const linkDown: Tampering = ({ pod }) => ip('-n', pod.name, 'link', 'set', 'eth0', 'down');
const macChanged: Tampering = ({ pod }) => ip('-n', pod.name, 'link', 'set', 'eth0', 'address', '02:00:00:00:0c:01');

const masterRenamed: Tampering = ({ node }) => ip('-n', node.name, 'link', 'set', 'up0', 'name', 'up9');

describe(
  'CHECK against the reference plugins 1.9.1',
  { skip: expectedPrerequisites(referencePluginsMissing()) },
  () => {
    describe('macvlan', () => {
      it('nothing changed: both pass', () => macvlan.sameCheck(onMaster, untouched));
      it('pod address removed: both fail', () => macvlan.sameCheck(onMaster, addressRemoved, /address .* is missing/));
      it('pod interface down: both fail', () => macvlan.sameCheck(onMaster, linkDown, /route .* is missing/));
      it('pod interface MAC changed: both fail', () =>
        macvlan.sameCheck(onMaster, macChanged, /has MAC 02:00:00:00:0c:01, expected/));
      it('master renamed: both fail', () => macvlan.sameCheck(onMaster, masterRenamed, /master device up0 not found/));
    });
    describe('ptp', () => {
      it('nothing changed: both pass', () => ptp.sameCheck(routed, untouched));
      it('pod address removed: both fail', () => ptp.sameCheck(routed, addressRemoved, /address .* is missing/));
      it('pod interface down: both fail', () => ptp.sameCheck(routed, linkDown, /route .* is missing/));
      it('pod interface MAC changed: both fail', () =>
        ptp.sameCheck(routed, macChanged, /has MAC 02:00:00:00:0c:01, expected/));
    });
    describe('tap', () => {
      it('nothing changed: both pass', () => tap.sameCheck(aTap, untouched));
      it('pod address removed: both fail', () => tap.sameCheck(aTap, addressRemoved, /address .* is missing/));
      it('pod interface down: both fail', () => tap.sameCheck(aTap, linkDown, /route .* is missing/));
    });
    describe('host-device', () => {
      it('nothing changed: both pass', () => hostDevice.sameCheck(aDevice, untouched));
      it('pod address removed: both fail', () =>
        hostDevice.sameCheck(aDevice, addressRemoved, /address .* is missing/));
      it('pod interface down: both fail', () => hostDevice.sameCheck(aDevice, linkDown, /route .* is missing/));
      it('pod interface MAC changed: both fail', () =>
        hostDevice.sameCheck(aDevice, macChanged, /has MAC 02:00:00:00:0c:01, expected/));
    });
  },
);
