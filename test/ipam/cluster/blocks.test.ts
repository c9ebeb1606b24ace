/** The pool/block model and the cluster IPAM config types (plexus, whereabouts), without an API server. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { CniCode } from '../../../src/cni/errors';
import { parseIpamConfig } from '../../../src/ipam';
import type { ClusterIpamConfig } from '../../../src/ipam/config';
import { blockByCidr, blockOf, blocksOf, objectName, poolLayout, poolsOverlap } from '../../../src/ipam/cluster/blocks';
import { parseIp } from '../../../src/common/ip';
import { config, errorOf } from '../fixture';

const cluster = (raw: unknown): ClusterIpamConfig => {
  const parsed = config(raw);
  assert.equal(parsed.type, 'cluster');
  return parsed;
};
const layoutOf = (raw: unknown, network = 'net') => {
  const layout = poolLayout(network, cluster(raw));
  assert.ok(layout.ok);
  return layout.value;
};

test('a plexus config is host-local ranges plus exclusions, a pool name and block sizes (default /26 and /122)', () => {
  assert.deepEqual(
    cluster({
      type: 'plexus',
      ranges: [[{ subnet: '10.1.0.0/24' }], [{ subnet: 'fd00:1::/64' }]],
      exclude: ['10.1.0.128/25'],
    }),
    {
      type: 'cluster',
      flavour: 'plexus',
      exclude: ['10.1.0.128/25'],
      blockPrefix: { v4: 26, v6: 122 },
      routes: [],
      ranges: [
        [{ subnet: '10.1.0.0/24', rangeStart: '10.1.0.1', rangeEnd: '10.1.0.254', gateway: '10.1.0.1' }],
        [
          {
            subnet: 'fd00:1::/64',
            rangeStart: 'fd00:1::1',
            rangeEnd: 'fd00:1::ffff:ffff:ffff:ffff',
            gateway: 'fd00:1::1',
          },
        ],
      ],
    },
  );
});

test('a Whereabouts config is taken unchanged: range with host bits, range_end, exclude, gateway, network_name', () => {
  const parsed = cluster({
    type: 'whereabouts',
    range: '10.2.0.64/24',
    range_end: '10.2.0.200',
    exclude: ['10.2.0.100/30'],
    gateway: '10.2.0.254',
    network_name: 'blue',
  });
  assert.equal(parsed.pool, 'blue');
  assert.deepEqual(parsed.ranges, [
    [{ subnet: '10.2.0.0/24', rangeStart: '10.2.0.64', rangeEnd: '10.2.0.200', gateway: '10.2.0.254' }],
  ]);
  assert.deepEqual(parsed.exclude, ['10.2.0.100/30']);
});

test('Whereabouts ipRanges give one range set each (dual stack), and the pool is named by the ranges', () => {
  const parsed = cluster({
    type: 'whereabouts',
    ipRanges: [{ range: '10.3.0.0/24' }, { range: 'fd00:3::/120', exclude: ['fd00:3::10/124'] }],
  });
  assert.equal(parsed.ranges.length, 2);
  assert.equal(parsed.pool, '10.3.0.0-24.fd00-3---120');
  assert.deepEqual(parsed.exclude, ['fd00:3::10/124']);
  assert.equal(objectName(parsed.pool), '10.3.0.0-24.fd00-3---120');
});

test('Whereabouts "first-last/prefix" ranges are read', () => {
  assert.deepEqual(cluster({ type: 'whereabouts', range: '10.4.0.10-10.4.0.20/24' }).ranges, [
    [{ subnet: '10.4.0.0/24', rangeStart: '10.4.0.10', rangeEnd: '10.4.0.20', gateway: '10.4.0.1' }],
  ]);
});

test('invalid cluster configs are refused naming the field', () => {
  assert.equal(errorOf(parseIpamConfig({ type: 'whereabouts' })).message, 'ipam.range: is required (or ipam.ipRanges)');
  assert.equal(
    errorOf(parseIpamConfig({ type: 'whereabouts', range: '10.0.0.0/33' })).message,
    'ipam.range: "10.0.0.0/33" is not a valid CIDR',
  );
  assert.equal(
    errorOf(parseIpamConfig({ type: 'plexus', ranges: [[{ subnet: '10.1.0.0/24' }]], exclude: ['x'] })).message,
    'ipam.exclude[0]: "x" is not a valid CIDR',
  );
  assert.equal(
    errorOf(parseIpamConfig({ type: 'plexus', ranges: [[{ subnet: '10.1.0.0/24' }]], blockSize: { v4: 40 } })).code,
    CniCode.InvalidNetworkConfig,
  );
});

test('a /24 in /26 blocks: four blocks, the gateway, network and broadcast addresses not counted, named by CIDR', () => {
  const layout = layoutOf({ type: 'plexus', ranges: [[{ subnet: '10.1.0.0/24' }]] }, 'Net_A');
  const blocks = [...blocksOf(layout, 0)];
  assert.deepEqual(
    blocks.map((b) => [b.name, b.size]),
    [
      [`${layout.name}.10.1.0.0-26`, 62n],
      [`${layout.name}.10.1.0.64-26`, 64n],
      [`${layout.name}.10.1.0.128-26`, 64n],
      [`${layout.name}.10.1.0.192-26`, 63n],
    ],
  );
  assert.match(layout.name, /^net-a-[0-9a-f]{8}$/);
});

test('exclusions cut blocks into ranges, and a block with nothing left is skipped', () => {
  const layout = layoutOf({
    type: 'plexus',
    ranges: [[{ subnet: '10.1.0.0/24' }]],
    exclude: ['10.1.0.64/26', '10.1.0.130/31'],
  });
  const blocks = [...blocksOf(layout, 0)];
  assert.deepEqual(
    blocks.map((b) => b.cidr),
    ['10.1.0.0/26', '10.1.0.128/26', '10.1.0.192/26'],
  );
  assert.deepEqual(
    blocks[1]!.ranges.map((r) => `${r.rangeStart}-${r.rangeEnd}`),
    ['10.1.0.128-10.1.0.129', '10.1.0.132-10.1.0.191'],
  );
  assert.equal(blocks[1]!.size, 62n);
});

test('blocks are enumerated lazily from a rotated start: an IPv6 /64 has 2^58 blocks', () => {
  const layout = layoutOf({ type: 'plexus', ranges: [[{ subnet: 'fd00:9::/64' }]] });
  const it = blocksOf(layout, 0, 5n);
  assert.equal((it.next().value as { cidr: string } | undefined)?.cidr, 'fd00:9::140/122');
  assert.equal(blockByCidr(layout, 'fd00:9::140/122')?.size, 64n);
});

test('the block of a static address, and the addresses a pool never gives', () => {
  const layout = layoutOf({ type: 'plexus', ranges: [[{ subnet: '10.1.0.0/24' }]], exclude: ['10.1.0.9/32'] });
  const found = blockOf(layout, parseIp('10.1.0.70')!);
  assert.ok(found.ok && found.value.cidr === '10.1.0.64/26');
  assert.match(errorOf(blockOf(layout, parseIp('10.1.0.1')!)).message, /gateway/);
  assert.match(errorOf(blockOf(layout, parseIp('10.1.0.9')!)).message, /excluded/);
  assert.match(errorOf(blockOf(layout, parseIp('10.9.0.9')!)).message, /not in pool/);
});

test('pools overlap when any of their ranges share an address', () => {
  const a = [[{ subnet: '10.1.0.0/24', rangeStart: '10.1.0.1', rangeEnd: '10.1.0.100', gateway: '10.1.0.1' }]];
  assert.equal(
    poolsOverlap(a, [
      [{ subnet: '10.1.0.0/24', rangeStart: '10.1.0.101', rangeEnd: '10.1.0.200', gateway: '10.1.0.1' }],
    ]),
    undefined,
  );
  assert.equal(
    poolsOverlap(a, [[{ subnet: '10.1.0.0/16', rangeStart: '10.1.0.50', rangeEnd: '10.1.9.0', gateway: '10.1.0.1' }]])
      ?.subnet,
    '10.1.0.0/16',
  );
});
