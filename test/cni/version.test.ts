import { test } from 'node:test';
import assert from 'node:assert/strict';
import { CniCode } from '../../src/cni/errors';
import type { CniResult } from '../../src/cni/types';
import {
  compareVersions,
  convertResult,
  requireVersion,
  SUPPORTED_VERSIONS,
  type CniVersion,
} from '../../src/cni/version';
import { errorOf } from '../support/result';

/** A result that uses every field the 1.1.0 shape has. */
const rich: CniResult = {
  interfaces: [
    { name: 'cni0', mac: '0a:58:0a:01:00:01', mtu: 1450 },
    {
      name: 'eth0',
      mac: '0a:58:0a:01:00:07',
      mtu: 1450,
      sandbox: '/var/run/netns/pod1',
      socketPath: '/run/vhost/eth0.sock',
      pciID: '0000:3b:00.1',
    },
  ],
  ips: [
    { address: '10.1.0.7/24', gateway: '10.1.0.1', interface: 1 },
    { address: 'fd00:1::7/64', gateway: 'fd00:1::1', interface: 1 },
    { address: '10.2.0.7/24' },
  ],
  routes: [
    { dst: '0.0.0.0/0', gw: '10.1.0.1', mtu: 1400, advmss: 1360, priority: 100, table: 254, scope: 0 },
    { dst: '192.168.0.0/16' },
  ],
  dns: { nameservers: ['10.1.0.53'], domain: 'example.org', search: ['example.org'], options: ['ndots:2'] },
};

const dns = { nameservers: ['10.1.0.53'], domain: 'example.org', search: ['example.org'], options: ['ndots:2'] };

/** 0.3.0, 0.3.1 and 0.4.0: `version` on each IP, no 1.1 interface or route fields. */
const legacy = (cniVersion: string): unknown => ({
  cniVersion,
  interfaces: [
    { name: 'cni0', mac: '0a:58:0a:01:00:01' },
    { name: 'eth0', mac: '0a:58:0a:01:00:07', sandbox: '/var/run/netns/pod1' },
  ],
  ips: [
    { version: '4', address: '10.1.0.7/24', gateway: '10.1.0.1', interface: 1 },
    { version: '6', address: 'fd00:1::7/64', gateway: 'fd00:1::1', interface: 1 },
    { version: '4', address: '10.2.0.7/24' },
  ],
  routes: [{ dst: '0.0.0.0/0', gw: '10.1.0.1' }, { dst: '192.168.0.0/16' }],
  dns,
});

const expected: Record<CniVersion, unknown> = {
  '0.3.0': legacy('0.3.0'),
  '0.3.1': legacy('0.3.1'),
  '0.4.0': legacy('0.4.0'),
  '1.0.0': {
    cniVersion: '1.0.0',
    interfaces: [
      { name: 'cni0', mac: '0a:58:0a:01:00:01' },
      { name: 'eth0', mac: '0a:58:0a:01:00:07', sandbox: '/var/run/netns/pod1' },
    ],
    ips: [
      { address: '10.1.0.7/24', gateway: '10.1.0.1', interface: 1 },
      { address: 'fd00:1::7/64', gateway: 'fd00:1::1', interface: 1 },
      { address: '10.2.0.7/24' },
    ],
    routes: [{ dst: '0.0.0.0/0', gw: '10.1.0.1' }, { dst: '192.168.0.0/16' }],
    dns,
  },
  '1.1.0': {
    cniVersion: '1.1.0',
    interfaces: [
      { name: 'cni0', mac: '0a:58:0a:01:00:01', mtu: 1450 },
      {
        name: 'eth0',
        mac: '0a:58:0a:01:00:07',
        mtu: 1450,
        sandbox: '/var/run/netns/pod1',
        socketPath: '/run/vhost/eth0.sock',
        pciID: '0000:3b:00.1',
      },
    ],
    ips: [
      { address: '10.1.0.7/24', gateway: '10.1.0.1', interface: 1 },
      { address: 'fd00:1::7/64', gateway: 'fd00:1::1', interface: 1 },
      { address: '10.2.0.7/24' },
    ],
    routes: [
      { dst: '0.0.0.0/0', gw: '10.1.0.1', mtu: 1400, advmss: 1360, priority: 100, table: 254, scope: 0 },
      { dst: '192.168.0.0/16' },
    ],
    dns,
  },
};

for (const version of SUPPORTED_VERSIONS) {
  test(`convertResult to ${version} gives exactly the ${version} result JSON`, () => {
    // Through JSON, as the runtime sees it: no key may be present with an undefined value.
    assert.deepEqual(JSON.parse(JSON.stringify(convertResult(rich, version))), expected[version]);
    assert.deepEqual(convertResult(rich, version), expected[version]);
  });
}

test('convertResult to 0.x puts version first on each IP, as the 0.x spec examples do', () => {
  const ips = convertResult(rich, '0.4.0').ips as Record<string, unknown>[];
  assert.deepEqual(
    ips.map((ip) => Object.keys(ip)[0]),
    ['version', 'version', 'version'],
  );
});

test('convertResult omits routes and dns when there are none', () => {
  const bare: CniResult = {
    interfaces: [{ name: 'eth0', sandbox: '/var/run/netns/pod1' }],
    ips: [{ address: '10.1.0.7/24', interface: 0 }],
    routes: [],
  };
  for (const version of SUPPORTED_VERSIONS) {
    const out = convertResult(bare, version);
    assert.equal('routes' in out, false, version);
    assert.equal('dns' in out, false, version);
  }
});

test('convertResult omits an empty dns object', () => {
  assert.equal('dns' in convertResult({ interfaces: [], ips: [], routes: [], dns: {} }, '1.1.0'), false);
});

test('convertResult does not change the result it is given', () => {
  const before = JSON.stringify(rich);
  convertResult(rich, '0.3.0');
  assert.equal(JSON.stringify(rich), before);
});

test('requireVersion accepts every supported version', () => {
  for (const version of ['0.3.0', '0.3.1', '0.4.0', '1.0.0', '1.1.0'])
    assert.deepEqual(requireVersion(version), { ok: true, value: version });
});

test('requireVersion: a missing cniVersion is an invalid network config (7)', () => {
  for (const missing of [undefined, '']) {
    const error = errorOf(requireVersion(missing));
    assert.equal(error.code, CniCode.InvalidNetworkConfig);
    assert.match(error.message, /no cniVersion/);
  }
});

test('requireVersion: an unsupported cniVersion is incompatible (1) and lists the supported versions', () => {
  for (const version of ['0.2.0', '2.0.0', 'bogus', '1.1', 1]) {
    const error = errorOf(requireVersion(version));
    assert.equal(error.code, CniCode.IncompatibleVersion, String(version));
    assert.ok(error.message.includes(`"${String(version)}"`), error.message);
    assert.equal(error.details, 'supported versions: 0.3.0, 0.3.1, 0.4.0, 1.0.0, 1.1.0');
  }
});

test('compareVersions orders versions numerically, part by part', () => {
  assert.equal(compareVersions('1.1.0', '1.1.0'), 0);
  assert.ok(compareVersions('1.0.0', '0.4.0') > 0);
  assert.ok(compareVersions('0.3.0', '0.3.1') < 0);
  assert.ok(compareVersions('0.10.0', '0.9.0') > 0);
  assert.ok(compareVersions('1.1.0', '1.0.0') > 0);
});

test('compareVersions treats missing parts as 0', () => {
  assert.equal(compareVersions('1.0', '1.0.0'), 0);
  assert.ok(compareVersions('1', '0.9.9') > 0);
});
