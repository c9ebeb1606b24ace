/** IPAMClaims' pure rules (src/ipam/cluster/claims.ts, withoutAddresses) and the refusals that need no API server. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { CniCode } from '../../../src/cni/errors';
import type { ClusterIpamConfig } from '../../../src/ipam/config';
import { poolLayout, withoutAddresses } from '../../../src/ipam/cluster/blocks';
import { claimedInPool, claimKey, missingClaim, parseClaimKey, statusIpsWith } from '../../../src/ipam/cluster/claims';
import { config, withIpam } from '../fixture';

const layout = (() => {
  const l = poolLayout(
    'net',
    config({
      type: 'plexus',
      ranges: [[{ subnet: '10.1.0.0/24' }], [{ subnet: 'fd00:1::/64' }]],
      exclude: ['10.1.0.200/29'],
    }) as ClusterIpamConfig,
  );
  assert.ok(l.ok);
  return l.value;
})();

test("a block's ranges less claimed addresses are cut around them, and a range left empty is dropped", () => {
  const range = { subnet: '10.1.0.0/24', rangeStart: '10.1.0.64', rangeEnd: '10.1.0.127', gateway: '10.1.0.1' };
  assert.deepEqual(withoutAddresses([range], []), [range]);
  assert.deepEqual(withoutAddresses([range], ['10.1.0.70', '10.1.0.64', '10.1.0.127', '10.1.0.3', 'fd00::1']), [
    { ...range, rangeStart: '10.1.0.65', rangeEnd: '10.1.0.69' },
    { ...range, rangeStart: '10.1.0.71', rangeEnd: '10.1.0.126' },
  ]);
  const first = { subnet: '10.1.0.0/28', rangeStart: '10.1.0.1', rangeEnd: '10.1.0.14', gateway: '10.1.0.1' };
  assert.deepEqual(
    withoutAddresses([first], ['10.1.0.2']),
    [{ ...first, rangeStart: '10.1.0.3' }],
    'a piece that is only the gateway is no range',
  );
  const one = { ...range, rangeStart: '10.1.0.9', rangeEnd: '10.1.0.9' };
  assert.deepEqual(withoutAddresses([one, range], ['10.1.0.9']), [range]);
  assert.deepEqual(withoutAddresses([range], ['10.1.0.80', '10.1.0.81']), [
    { ...range, rangeEnd: '10.1.0.79' },
    { ...range, rangeStart: '10.1.0.82' },
  ]);
});

test("a claim's status.ips are read per range set of the pool, with their block; other pools' addresses are not this pool's", () => {
  const claimed = claimedInPool(layout, ['10.9.0.5/24', '10.1.0.70/24', 'fd00:1::7/64', '10.1.0.71/24', 'garbage']);
  assert.deepEqual([...claimed.keys()].sort(), [0, 1]);
  assert.equal(claimed.get(0)?.address, '10.1.0.70');
  assert.equal(claimed.get(0)?.block.cidr, '10.1.0.64/26');
  assert.equal(claimed.get(1)?.address, 'fd00:1::7');
  assert.equal(claimedInPool(layout, ['10.1.0.201/24']).size, 0, "an excluded address is not the pool's");
});

test("new addresses join status.ips, keeping the other networks' and not repeating one", () => {
  assert.deepEqual(statusIpsWith(['10.9.0.5/24', '10.1.0.70/24'], ['10.1.0.70/24', 'fd00:1::7/64']), [
    '10.9.0.5/24',
    '10.1.0.70/24',
    'fd00:1::7/64',
  ]);
  assert.deepEqual(statusIpsWith([], ['10.1.0.70/24']), ['10.1.0.70/24']);
});

test('a claim is named namespace/name in block entries and leases', () => {
  assert.equal(claimKey({ namespace: 'vms', name: 'vm1.net1' }), 'vms/vm1.net1');
  assert.deepEqual(parseClaimKey('vms/vm1.net1'), { namespace: 'vms', name: 'vm1.net1' });
  assert.equal(parseClaimKey('vm1'), undefined);
  assert.equal(parseClaimKey('a/b/c'), undefined);
});

test('a missing claim is "try again later" (11), naming the claim and what to do', () => {
  const error = missingClaim({ namespace: 'vms', name: 'vm1.net1' }, 'storage');
  assert.equal(error.code, CniCode.TryAgainLater);
  assert.match(error.message, /IPAMClaim vms\/vm1\.net1 .*network storage.* does not exist/);
  assert.match(error.details ?? '', /create it/);
});

test('host-local and static refuse a claim (code 7): they cannot keep an address for it', async () => {
  await withIpam(async (ipam) => {
    for (const raw of [
      { type: 'host-local', subnet: '10.3.0.0/24' },
      { type: 'static', addresses: [{ address: '10.3.0.9/24' }] },
    ]) {
      const r = await ipam.allocate({
        network: 'n',
        containerId: 'c1',
        ifname: 'net1',
        config: config(raw),
        claim: 'vm1',
        pod: { namespace: 'default', name: 'p' },
      });
      assert.ok(!r.ok);
      assert.equal(r.error.code, CniCode.InvalidNetworkConfig);
      assert.match(r.error.message, /cannot honour an ipam-claim-reference/);
    }
    assert.deepEqual(await ipam.leases(), []);
  });
});
