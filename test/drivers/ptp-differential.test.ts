/**
 * The native ptp driver against the reference ptp plugin 1.9.1, option by option (test/drivers/differential.ts):
 * the host ends live in each side's node netns.
 */
import { describe, it } from 'node:test';
import { createPtpDriver } from '../../src/drivers/ptp';
import { expectedPrerequisites } from '../support/prerequisites';
import { referencePluginsMissing } from '../support/plugin-dir';
import { differentialBed } from './differential';

const bed = differentialBed({ tag: 'ppd', type: 'ptp', driver: (node) => createPtpDriver({ node }) });

describe(
  'ptp driver against the reference ptp plugin 1.9.1',
  { skip: expectedPrerequisites(referencePluginsMissing()) },
  () => {
    it('the defaults: a routed veth, the pod addresses and routes on both sides', () =>
      bed.sameAsReference({ config: {} }));
    it('mtu', () => bed.sameAsReference({ config: { mtu: 1400 } }));
    it('dns', () => bed.sameAsReference({ config: { dns: { nameservers: ['192.0.2.53'], search: ['pod.local'] } } }));
    it('no ipam: refused by both', () => bed.bothRefuse({ config: {}, ipam: null }, /ipam/));

    it('refuses natively what it does not run, saying how to delegate', () => {
      bed.refusedNatively({ ipMasq: true }, 'ipMasq');
    });
  },
);
