/**
 * The native tap driver against the reference tap plugin 1.9.1, option by option (test/drivers/differential.ts).
 */
import { describe, it } from 'node:test';
import { createTapDriver } from '../../src/drivers/tap';
import { ip } from '../support/netns';
import { expectedPrerequisites } from '../support/prerequisites';
import { referencePluginsMissing } from '../support/plugin-dir';
import { differentialBed, type Side } from './differential';

const bed = differentialBed({ tag: 'ptd', type: 'tap', driver: () => createTapDriver() });

/** A bridge `br0` inside the pod, up, as an earlier plugin of a chain would leave it. */
function podBridge({ pod }: Side): void {
  ip('-n', pod.name, 'link', 'add', 'br0', 'type', 'bridge');
  ip('-n', pod.name, 'link', 'set', 'br0', 'up');
}

describe(
  'tap driver against the reference tap plugin 1.9.1',
  { skip: expectedPrerequisites(referencePluginsMissing()) },
  () => {
    it('the defaults: a tap with the pod addresses and routes', () => bed.sameAsReference({ config: {} }));
    it('mtu', () => bed.sameAsReference({ config: { mtu: 1400 } }));
    it('mac in the config', () => bed.sameAsReference({ config: { mac: '02:42:ac:11:00:1a' } }));
    it('mac (the runtime asks for one)', () => bed.sameAsReference({ config: {}, mac: '02:42:ac:11:00:1b' }));
    it('multiQueue', () => bed.sameAsReference({ config: { multiQueue: true } }));
    it('owner', () => bed.sameAsReference({ config: { owner: 1000 } }));
    it('group', () => bed.sameAsReference({ config: { group: 1000 } }));
    it('owner and group', () => bed.sameAsReference({ config: { owner: 1000, group: 1000 } }));
    it('bridge (in the pod)', () => bed.sameAsReference({ config: { bridge: 'br0' }, ipam: null, prepare: podBridge }));
    it('no ipam: an L2 tap, up', () => bed.sameAsReference({ config: {}, ipam: null }));

    it('refuses natively what it does not run, saying how to delegate', () => {
      bed.refusedNatively({ selinuxContext: 'system_u:system_r:container_t:s0' }, 'selinuxContext');
    });
  },
);
