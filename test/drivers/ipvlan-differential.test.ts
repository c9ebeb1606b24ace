/**
 * The native ipvlan driver against the reference ipvlan plugin 1.9.1, option by option (test/drivers/differential.ts),
 * where the kernel has ipvlan: each side's node has an uplink of its own (a veth pair, up) for the master.
 */
import { before, describe, it, type TestContext } from 'node:test';
import { createIpvlanDriver } from '../../src/drivers/ipvlan';
import { ip } from '../support/netns';
import { expectedPrerequisites, skipOptional } from '../support/prerequisites';
import { referencePluginsMissing } from '../support/plugin-dir';
import { type DifferentialCase, differentialBed, type Side } from './differential';

const bed = differentialBed({ tag: 'pid', type: 'ipvlan', driver: (node) => createIpvlanDriver({ node }) });
/** Why ipvlan cannot be compared here, or undefined when the kernel has it. */
let missing: string | undefined;

before(() => {
  // Probed in a scratch netns, on a master of its own, so the probe touches nothing on the host.
  const scratch = bed.fx.create('probe');
  scratch.exec('ip', 'link', 'add', 'p0', 'type', 'veth', 'peer', 'name', 'p1');
  const probe = scratch.exec('ip', 'link', 'add', 'iv0', 'link', 'p0', 'type', 'ipvlan', 'mode', 'l2');
  if (probe.status !== 0) missing = `ipvlan not built into this kernel: ${probe.out.trim()}`;
});

function uplink({ node }: Side): void {
  ip('-n', node.name, 'link', 'add', 'up0', 'type', 'veth', 'peer', 'name', 'up1');
  ip('-n', node.name, 'link', 'set', 'up1', 'up');
  ip('-n', node.name, 'link', 'set', 'up0', 'up');
  ip('-n', node.name, 'addr', 'add', '198.51.100.2/24', 'dev', 'up0');
  ip('-n', node.name, 'route', 'add', 'default', 'via', '198.51.100.1');
}

const on = (config: Record<string, unknown>): DifferentialCase => ({
  config: { master: 'up0', ...config },
  prepare: uplink,
});
const same = (c: DifferentialCase) => (t: TestContext) =>
  skipOptional(t, missing) ? undefined : bed.sameAsReference(c);

describe(
  'ipvlan driver against the reference ipvlan plugin 1.9.1',
  { skip: expectedPrerequisites(referencePluginsMissing()) },
  () => {
    it('the defaults: l2 mode, the pod addresses and routes', same(on({})));
    it('no master: the interface of the default route', same({ config: {}, prepare: uplink }));
    it('mode l3', same(on({ mode: 'l3' })));
    it('mode l3s', same(on({ mode: 'l3s' })));
    it('mtu', same(on({ mtu: 1400 })));
    it('no ipam', same({ ...on({}), ipam: null }));

    it('refuses natively what it does not run, saying how to delegate', () => {
      bed.refusedNatively({ linkInContainer: true }, 'linkInContainer');
    });
  },
);
