import { test } from 'node:test';
import assert from 'node:assert/strict';
import { CniCode } from '../../src/cni/errors';
import { parseIpamConfig } from '../../src/ipam';
import { config, errorOf } from './fixture';

const rejects = (raw: unknown, message: string): void => {
  const error = errorOf(parseIpamConfig(raw));
  assert.equal(error.code, CniCode.InvalidNetworkConfig);
  assert.equal(error.message, message);
};

test('host-local ranges are accepted with defaults: gateway .1, rangeStart .1, rangeEnd broadcast-1', () => {
  assert.deepEqual(config({ type: 'host-local', ranges: [[{ subnet: '10.1.0.0/24' }]] }), {
    type: 'host-local',
    ranges: [[{ subnet: '10.1.0.0/24', rangeStart: '10.1.0.1', rangeEnd: '10.1.0.254', gateway: '10.1.0.1' }]],
    routes: [],
  });
});

test('a subnet with host bits is canonicalized to its network address', () => {
  const parsed = config({ type: 'host-local', ranges: [[{ subnet: '10.1.0.5/24' }]] });
  assert.equal(parsed.type === 'host-local' && parsed.ranges[0]?.[0]?.subnet, '10.1.0.0/24');
});

test('explicit rangeStart, rangeEnd and gateway are kept', () => {
  const parsed = config({
    type: 'host-local',
    ranges: [[{ subnet: '10.1.0.0/24', rangeStart: '10.1.0.100', rangeEnd: '10.1.0.200', gateway: '10.1.0.254' }]],
  });
  assert.deepEqual(parsed.type === 'host-local' && parsed.ranges, [
    [{ subnet: '10.1.0.0/24', rangeStart: '10.1.0.100', rangeEnd: '10.1.0.200', gateway: '10.1.0.254' }],
  ]);
});

test('an IPv6 range defaults to the last address of the subnet as rangeEnd', () => {
  const parsed = config({ type: 'host-local', ranges: [[{ subnet: 'FD00:0:0:1::/64' }]] });
  assert.deepEqual(parsed.type === 'host-local' && parsed.ranges, [
    [
      {
        subnet: 'fd00:0:0:1::/64',
        rangeStart: 'fd00:0:0:1::1',
        rangeEnd: 'fd00::1:ffff:ffff:ffff:ffff',
        gateway: 'fd00:0:0:1::1',
      },
    ],
  ]);
});

test('the legacy single-range form becomes the first range set', () => {
  const parsed = config({
    type: 'host-local',
    subnet: '10.2.0.0/16',
    rangeStart: '10.2.1.0',
    gateway: '10.2.0.254',
    ranges: [[{ subnet: 'fd00::/64' }]],
  });
  assert.deepEqual(parsed.type === 'host-local' && parsed.ranges.map((set) => set.map((range) => range.subnet)), [
    ['10.2.0.0/16'],
    ['fd00::/64'],
  ]);
  assert.deepEqual(parsed.type === 'host-local' && parsed.ranges[0]?.[0], {
    subnet: '10.2.0.0/16',
    rangeStart: '10.2.1.0',
    rangeEnd: '10.2.255.254',
    gateway: '10.2.0.254',
  });
});

test('dataDir, resolvConf and unknown keys are accepted', () => {
  const parsed = config({
    type: 'host-local',
    dataDir: '/var/lib/cni/networks',
    resolvConf: '/etc/resolv.conf',
    somethingElse: { a: 1 },
    ranges: [[{ subnet: '10.1.0.0/24', extra: true }]],
  });
  assert.equal(parsed.type, 'host-local');
});

test('routes are validated and their destinations canonicalized; dns is kept', () => {
  const parsed = config({
    type: 'host-local',
    ranges: [[{ subnet: '10.1.0.0/24' }]],
    routes: [{ dst: '0.0.0.0/0' }, { dst: '192.168.7.9/16', gw: '10.1.0.254' }],
    dns: { nameservers: ['10.1.0.53'], search: ['example.org'] },
  });
  assert.deepEqual(parsed.routes, [{ dst: '0.0.0.0/0' }, { dst: '192.168.0.0/16', gw: '10.1.0.254' }]);
  assert.deepEqual(parsed.dns, { nameservers: ['10.1.0.53'], search: ['example.org'] });
});

test('an invalid CIDR is rejected naming its exact field path', () => {
  rejects(
    { type: 'host-local', ranges: [[{ subnet: '10.0.0.0/24' }, { subnet: '10.1.0.0/33' }]] },
    'ipam.ranges[0][1].subnet: "10.1.0.0/33" is not a valid CIDR',
  );
});

test('a field of the wrong type is rejected naming its path', () => {
  const error = errorOf(parseIpamConfig({ type: 'host-local', ranges: [[{ subnet: 24 }]] }));
  assert.match(error.message, /^ipam\.ranges\[0\]\[0\]\.subnet: /);
});

test('an unsupported IPAM type is rejected', () => {
  rejects(
    { type: 'dhcp' },
    'ipam.type: "dhcp" is not supported by the built-in IPAM (expected "host-local", "static", "plexus" or "whereabouts")',
  );
});

test('rangeStart outside the subnet is rejected', () => {
  rejects(
    { type: 'host-local', ranges: [[{ subnet: '10.1.0.0/24', rangeStart: '10.2.0.1' }]] },
    'ipam.ranges[0][0].rangeStart: 10.2.0.1 is not in subnet 10.1.0.0/24',
  );
});

test('a gateway outside the subnet is rejected', () => {
  rejects(
    { type: 'host-local', subnet: '10.1.0.0/24', gateway: '10.1.1.1' },
    'ipam.gateway: 10.1.1.1 is not in subnet 10.1.0.0/24',
  );
});

test('an invalid rangeEnd address is rejected', () => {
  rejects(
    { type: 'host-local', ranges: [[{ subnet: '10.1.0.0/24', rangeEnd: '10.1.0.300' }]] },
    'ipam.ranges[0][0].rangeEnd: "10.1.0.300" is not a valid IP address',
  );
});

test('rangeStart after rangeEnd is rejected', () => {
  rejects(
    { type: 'host-local', ranges: [[{ subnet: '10.1.0.0/24', rangeStart: '10.1.0.200', rangeEnd: '10.1.0.100' }]] },
    'ipam.ranges[0][0].rangeStart: 10.1.0.200 is after rangeEnd 10.1.0.100',
  );
});

test('mixed IP families within one range set are rejected', () => {
  rejects(
    { type: 'host-local', ranges: [[{ subnet: '10.1.0.0/24' }, { subnet: 'fd00::/64' }]] },
    'ipam.ranges[0][1].subnet: IPv6 subnet in a range set of IPv4 ranges (all ranges of a set must be one IP family)',
  );
});

test('overlapping ranges within a set are rejected', () => {
  rejects(
    { type: 'host-local', ranges: [[{ subnet: '10.1.0.0/24' }, { subnet: '10.1.0.0/24', rangeStart: '10.1.0.100' }]] },
    'ipam.ranges[0][1]: range 10.1.0.0/24 10.1.0.100-10.1.0.254 overlaps ipam.ranges[0][0] (10.1.0.0/24 10.1.0.1-10.1.0.254)',
  );
});

test('overlapping ranges across sets are rejected', () => {
  const error = errorOf(
    parseIpamConfig({ type: 'host-local', ranges: [[{ subnet: '10.1.0.0/16' }], [{ subnet: '10.1.5.0/24' }]] }),
  );
  assert.match(error.message, /^ipam\.ranges\[1\]\[0\]: range 10\.1\.5\.0\/24 .* overlaps ipam\.ranges\[0\]\[0\]/);
});

test('non-overlapping ranges of one subnet in one set are accepted', () => {
  const parsed = config({
    type: 'host-local',
    ranges: [
      [
        { subnet: '10.1.0.0/24', rangeEnd: '10.1.0.99' },
        { subnet: '10.1.0.0/24', rangeStart: '10.1.0.100' },
      ],
    ],
  });
  assert.equal(parsed.type === 'host-local' && parsed.ranges[0]?.length, 2);
});

test('a config without any range is rejected', () => {
  rejects({ type: 'host-local' }, 'ipam.ranges: at least one range is required (ipam.ranges or ipam.subnet)');
});

test('an empty range set is rejected', () => {
  rejects(
    { type: 'host-local', ranges: [[{ subnet: '10.1.0.0/24' }], []] },
    'ipam.ranges[1]: a range set must contain at least one range',
  );
});

test('IPv4 /31 and /32 subnets are rejected as having no allocatable address', () => {
  rejects(
    { type: 'host-local', subnet: '10.1.0.0/31' },
    'ipam.subnet: "10.1.0.0/31" has no allocatable addresses (the longest IPv4 prefix is /30)',
  );
  rejects(
    { type: 'host-local', subnet: '10.1.0.0/32' },
    'ipam.subnet: "10.1.0.0/32" has no allocatable addresses (the longest IPv4 prefix is /30)',
  );
});

test('IPv6 /127 subnets are rejected as having no allocatable address', () => {
  rejects(
    { type: 'host-local', subnet: 'fd00::/127' },
    'ipam.subnet: "fd00::/127" has no allocatable addresses (the longest IPv6 prefix is /126)',
  );
});

test('a range whose only address is the gateway is rejected', () => {
  rejects(
    { type: 'host-local', ranges: [[{ subnet: '10.1.0.0/24', rangeStart: '10.1.0.1', rangeEnd: '10.1.0.1' }]] },
    'ipam.ranges[0][0]: range 10.1.0.0/24 10.1.0.1-10.1.0.1 has no allocatable address (the gateway, network and broadcast addresses are never allocated)',
  );
});

test('a route with an invalid gateway is rejected naming its path', () => {
  rejects(
    { type: 'host-local', subnet: '10.1.0.0/24', routes: [{ dst: '0.0.0.0/0' }, { dst: '10.9.0.0/16', gw: 'nope' }] },
    'ipam.routes[1].gw: "nope" is not a valid IP address',
  );
});

test('static addresses keep their host bits', () => {
  assert.deepEqual(
    config({
      type: 'static',
      addresses: [{ address: '10.10.0.1/24', gateway: '10.10.0.254' }, { address: 'fd00::5/64' }],
    }),
    {
      type: 'static',
      addresses: [{ address: '10.10.0.1/24', gateway: '10.10.0.254' }, { address: 'fd00::5/64' }],
      routes: [],
    },
  );
});

test('a static address without a prefix is rejected naming its path', () => {
  rejects(
    { type: 'static', addresses: [{ address: '10.10.0.1' }] },
    'ipam.addresses[0].address: "10.10.0.1" is not a valid CIDR',
  );
});

test('a static gateway of the other IP family is rejected', () => {
  rejects(
    { type: 'static', addresses: [{ address: '10.10.0.1/24', gateway: 'fd00::1' }] },
    'ipam.addresses[0].gateway: fd00::1 is IPv6 but address 10.10.0.1/24 is IPv4',
  );
});
