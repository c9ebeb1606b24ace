/**
 * Taken pod interface names (src/engine/taken-names.ts) on the in-memory kernel: left to the kernel's EEXIST for
 * drivers whose create is the check, checked first for the others, refused the same way (code 7) either way.
 */
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, it } from 'node:test';
import { cniCall, engineBed, type EngineBed } from '../support/engine-bed';

let bed: EngineBed;
beforeEach(async () => {
  bed = await engineBed();
});
afterEach(() => bed.remove());

const dumpsOf = (netns: string): number =>
  bed.kernel.log.filter((e) => e.netns === netns && e.op.op === 'linkList').length;
const hostVeths = (): string[] => bed.kernel.links().filter((l) => l.startsWith('veth'));

describe('taken pod interface names', () => {
  it('an ADD of bridge networks makes no link dump of the pod netns', async () => {
    const netns = bed.pod('a');
    const r = await bed.engine.add(cniCall('ADD', 'ca', netns));
    assert.ok(r.ok, !r.ok ? r.error.message : '');
    assert.equal(dumpsOf(netns), 0);
  });

  it('an eth0 the netns has is refused by the kernel with code 7, and no veth, lease or record is left', async () => {
    const netns = bed.pod('b');
    await bed.kernel.batch(netns, [{ op: 'linkAdd', link: { kind: 'bridge', name: 'eth0' } }]);
    const r = await bed.engine.add(cniCall('ADD', 'cb', netns));
    assert.ok(!r.ok);
    assert.equal(r.error.code, 7);
    assert.match(r.error.message, /^interface eth0 already exists in /);
    assert.deepEqual(bed.kernel.links(netns), ['eth0']);
    assert.deepEqual(hostVeths(), []);
    assert.deepEqual(await bed.leases(), []);
    assert.deepEqual(await bed.journal.list(), []);
  });

  it('a network run by a delegated plugin has its names checked before anything is recorded or made', async () => {
    writeFileSync(
      join(bed.dir, 'networks', 'dlg.json'),
      JSON.stringify({
        apiVersion: 'k8s.cni.cncf.io/v1',
        kind: 'NetworkAttachmentDefinition',
        metadata: { name: 'dlg', annotations: { 'plexus.io/delegate': 'true' } },
        spec: {
          config: JSON.stringify({
            cniVersion: '1.0.0',
            name: 'dlg',
            type: 'ptp',
            ipam: { type: 'host-local', ranges: [[{ subnet: '10.9.9.0/24' }]] },
          }),
        },
      }),
    );
    const netns = bed.pod('c');
    await bed.kernel.batch(netns, [{ op: 'linkAdd', link: { kind: 'bridge', name: 'net1' } }]);
    const ops = bed.kernel.log.length;
    const r = await bed.engine.add(cniCall('ADD', 'cc', netns, 'dlg'));
    assert.ok(!r.ok);
    assert.equal(r.error.code, 7, r.error.message);
    assert.match(r.error.message, /^interface net1 already exists in /);
    assert.deepEqual(
      bed.kernel.log.slice(ops).map((e) => e.op.op),
      ['linkList'],
      'the dump, and nothing else',
    );
    assert.deepEqual(await bed.leases(), []);
    assert.deepEqual(await bed.journal.list(), []);
  });
});
