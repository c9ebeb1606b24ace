/**
 * The native macvlan driver against the reference macvlan plugin 1.9.1, option by option (test/drivers/differential.ts):
 * each side's node has an uplink of its own (a veth pair, up) for the master.
 */
import { describe, it } from 'node:test';
import { createMacvlanDriver } from '../../src/drivers/macvlan';
import { ip } from '../support/netns';
import { expectedPrerequisites } from '../support/prerequisites';
import { referencePluginsMissing } from '../support/plugin-dir';
import { differentialBed, type Side } from './differential';

const bed = differentialBed({ tag: 'pmd', type: 'macvlan', driver: (node) => createMacvlanDriver({ node }) });

/** The node's uplink `up0` (its peer up1 beside it), up, with a default route through it. */
function uplink({ node }: Side): void {
  ip('-n', node.name, 'link', 'add', 'up0', 'type', 'veth', 'peer', 'name', 'up1');
  ip('-n', node.name, 'link', 'set', 'up1', 'up');
  ip('-n', node.name, 'link', 'set', 'up0', 'up');
  ip('-n', node.name, 'addr', 'add', '198.51.100.2/24', 'dev', 'up0');
  ip('-n', node.name, 'route', 'add', 'default', 'via', '198.51.100.1');
}

const on = (config: Record<string, unknown>) => ({ config: { master: 'up0', ...config }, prepare: uplink });

describe(
  'macvlan driver against the reference macvlan plugin 1.9.1',
  { skip: expectedPrerequisites(referencePluginsMissing()) },
  () => {
    it('the defaults: bridge mode, the pod addresses and routes', () => bed.sameAsReference(on({})));
    it('no master: the interface of the default route', () => bed.sameAsReference({ config: {}, prepare: uplink }));
    it('mode private', () => bed.sameAsReference(on({ mode: 'private' })));
    it('mode vepa', () => bed.sameAsReference(on({ mode: 'vepa' })));
    it('mtu', () => bed.sameAsReference(on({ mtu: 1400 })));
    it('mac in the config', () => bed.sameAsReference({ ...on({ mac: '02:42:ac:11:00:0a' }), mac: undefined }));
    it('mac (the runtime asks for one, runtimeConfig)', () =>
      bed.sameAsReference({ ...on({}), mac: '02:42:ac:11:00:0b' }));
    it('mac (the runtime asks for one, CNI_ARGS MAC=)', () =>
      bed.sameAsReference({ ...on({}), macArg: '02:42:ac:11:00:0c' }));
    it('no ipam: an L2 interface, up', () => bed.sameAsReference({ ...on({}), ipam: null }));
    it('mode source: refused by both', () => bed.bothRefuse(on({ mode: 'source' }), /mode/));
    it("mtu above the master's: refused by both", () => bed.bothRefuse(on({ mtu: 9000 }), /mtu/i));

    it('refuses natively what it does not run, saying how to delegate', () => {
      bed.refusedNatively({ linkInContainer: true }, 'linkInContainer');
      bed.refusedNatively({ bcqueuelen: 100 }, 'bcqueuelen');
    });
  },
);
