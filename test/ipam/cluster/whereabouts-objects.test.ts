/** Whereabouts' IPPools and OverlappingRangeIPReservations read as the addresses they hold, without an API server. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  holdKey,
  holdsOfPool,
  holdsOfReservation,
  servedCollections,
} from '../../../src/ipam/cluster/whereabouts-objects';

const meta = (name: string) => ({ name, namespace: 'kube-system' });
const allocation = (pod: string) => ({ id: `${pod}-cid`, podref: `default/${pod}`, ifname: 'net1' });

test('an IPPool holds the address at each allocation offset from its range, naming the pod', () => {
  const holds = holdsOfPool({
    metadata: meta('10.1.0.0-24'),
    spec: { range: '10.1.0.0/24', allocations: { '2': allocation('a'), '255': allocation('b') } },
  });
  assert.deepEqual(holds.map(holdKey).sort(), ['10.1.0.2', '10.1.0.255']);
  assert.equal(
    holds.find((h) => holdKey(h) === '10.1.0.2')?.holder,
    "pod default/a (net1), in Whereabouts' IPPool kube-system/10.1.0.0-24",
  );
});

test('an IPv6 IPPool counts offsets in 128 bits', () => {
  const holds = holdsOfPool({
    metadata: meta('fd00-1--0-64'),
    spec: { range: 'fd00:1::/64', allocations: { '65536': allocation('a') } },
  });
  assert.deepEqual(holds.map(holdKey), ['fd00:1::1:0']);
});

test('an IPPool allocation Whereabouts would not read (offset not a decimal integer, past the family) holds nothing', () => {
  const holds = holdsOfPool({
    metadata: meta('p'),
    spec: {
      range: '255.255.255.0/24',
      allocations: { x: allocation('a'), '-1': allocation('b'), '256': allocation('c') },
    },
  });
  assert.deepEqual(holds, []);
  assert.deepEqual(
    holdsOfPool({ metadata: meta('q'), spec: { range: 'not a cidr', allocations: { '1': allocation('a') } } }),
    [],
  );
  assert.deepEqual(holdsOfPool({ metadata: meta('r'), spec: 'garbage' }), []);
});

test('an overlapping-range reservation holds the address its name spells, with or without a network name', () => {
  const of = (name: string) => holdsOfReservation({ metadata: meta(name), spec: { podref: 'default/a' } }).map(holdKey);
  assert.deepEqual(of('10.1.0.5'), ['10.1.0.5']);
  assert.deepEqual(of('storage-10.1.0.5'), ['10.1.0.5']);
  assert.deepEqual(of('fd00--5'), ['fd00::5']);
  assert.deepEqual(of('fd00--0'), ['fd00::']);
  assert.deepEqual(of('my-net-fd00--5'), ['fd00::5']);
  assert.deepEqual(of('not-an-address'), []);
});

test('a reservation whose network name reads as part of an address holds every address a suffix spells', () => {
  const held = holdsOfReservation({ metadata: meta('beef-cafe-fd00--5'), spec: { podref: 'default/a' } }).map(holdKey);
  assert.deepEqual(held.sort(), ['beef:cafe:fd00::5', 'cafe:fd00::5', 'fd00::5']);
});

test("an API discovery answer names which of Whereabouts' collections are served; another shape names none", () => {
  const served = servedCollections({
    kind: 'APIResourceList',
    resources: [{ name: 'ippools' }, { name: 'nodeslicepools' }, { name: 'overlappingrangeipreservations' }],
  });
  assert.deepEqual(served, ['ippools', 'overlappingrangeipreservations']);
  assert.deepEqual(servedCollections({ resources: [{ name: 'ippools' }] }), ['ippools']);
  assert.deepEqual(servedCollections({ resources: 'garbage' }), []);
  assert.deepEqual(servedCollections(null), []);
});
