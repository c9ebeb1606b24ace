/** The rule that decides which of two networks claiming one thing (a VXLAN VNI) keeps it, the same on every node. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { claimClashes, clashError, type Claimant } from '../../src/networks/exclusive-claims';

const vni = (n: number) => ({ resource: `VXLAN VNI ${n}`, why: 'one segment', fix: 'give it a "vni" of its own' });
const claimant = (key: string, createdAt: string | undefined, ...vnis: number[]): Claimant => ({
  key,
  createdAt,
  claims: vnis.map(vni),
});

describe('exclusive claims', () => {
  it('refuses the newer definition of two that claim one VNI, whatever their names and order', () => {
    const older = claimant('team-b/overlay', '2026-11-28T09:00:00Z', 42);
    const newer = claimant('team-a/overlay', '2026-11-28T09:00:05Z', 42);
    for (const order of [
      [older, newer],
      [newer, older],
    ]) {
      const clashes = claimClashes(order);
      assert.deepEqual([...clashes.keys()], ['team-a/overlay']);
      assert.equal(clashes.get('team-a/overlay')?.holder, 'team-b/overlay');
    }
  });

  it('decides a tie of creation times, or definitions without one, by namespace/name', () => {
    const at = '2026-11-28T09:00:00Z';
    assert.deepEqual([...claimClashes([claimant('b/x', at, 7), claimant('a/x', at, 7)]).keys()], ['b/x']);
    assert.deepEqual([...claimClashes([claimant('b/x', undefined, 7), claimant('a/x', undefined, 7)]).keys()], ['b/x']);
  });

  it('lets a refused network hold nothing, so a third one that shares only its other VNI is served', () => {
    const clashes = claimClashes([
      claimant('a/first', '2026-11-28T09:00:00Z', 1),
      claimant('a/second', '2026-11-28T09:00:01Z', 1, 2),
      claimant('a/third', '2026-11-28T09:00:02Z', 2),
    ]);
    assert.deepEqual([...clashes.keys()], ['a/second']);
  });

  it('serves the second once the first is gone', () => {
    const second = claimant('a/second', '2026-11-28T09:00:01Z', 1);
    assert.equal(claimClashes([claimant('a/first', '2026-11-28T09:00:00Z', 1), second]).size, 1);
    assert.equal(claimClashes([second]).size, 0);
  });

  it('refuses with code 7 naming the network that holds the VNI', () => {
    const e = clashError({ network: 'a/second', holder: 'a/first', claim: vni(42) });
    assert.equal(e.code, 7);
    assert.match(e.message, /^network a\/second is not served: it uses VXLAN VNI 42, which network a\/first/);
  });
});
