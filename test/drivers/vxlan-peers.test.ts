/** The pure rules of cluster-mode vxlan: whom a VTEP floods to and what changes (which network holds a VNI: test/networks/exclusive-claims). */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { floodChanges, floodTargets } from '../../src/drivers/vxlan/peers';

const peer = (node: string, vteps: Record<number, string>) => ({
  node,
  vteps: new Map(Object.entries(vteps).map(([vni, a]) => [Number(vni), a])),
});

describe('vxlan peer set', () => {
  it('floods only to the peers that serve the VNI, never to itself, in one IP family, each once', () => {
    const peers = [
      peer('b', { 42: '10.0.0.2', 7: '10.0.0.2' }),
      peer('c', { 7: '10.0.0.3' }),
      peer('d', { 42: '10.0.0.4' }),
      peer('e', { 42: 'fd00::5' }),
      peer('f', { 42: '10.0.0.1' }),
      peer('g', { 42: '10.0.0.4' }),
    ];
    assert.deepEqual(floodTargets({ vni: 42, self: '10.0.0.1' }, peers), ['10.0.0.2', '10.0.0.4']);
    assert.deepEqual(floodTargets({ vni: 42, self: 'fd00::1' }, peers), ['fd00::5']);
    assert.deepEqual(floodTargets({ vni: 99, self: '10.0.0.1' }, peers), []);
  });

  it('appends the targets that are missing and deletes those no longer wanted, nothing else', () => {
    assert.deepEqual(floodChanges(['10.0.0.2', '10.0.0.3'], ['10.0.0.3', '10.0.0.4']), {
      add: ['10.0.0.4'],
      remove: ['10.0.0.2'],
    });
    assert.deepEqual(floodChanges(['10.0.0.2'], ['10.0.0.2']), { add: [], remove: [] });
  });
});
