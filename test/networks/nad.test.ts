import { test } from 'node:test';
import assert from 'node:assert/strict';
import { CniCode } from '../../src/cni/errors';
import { parseNad, type NetworkDefinition } from '../../src/networks/nad';
import { unwrap, errorOf } from '../support/result';

const SOURCE = '/etc/plexus/networks.d/blue.yaml';

const nad = (
  config: unknown,
  metadata: Record<string, unknown> = { name: 'blue', namespace: 'team-a' },
  top: Record<string, unknown> = {},
): unknown => ({
  apiVersion: 'k8s.cni.cncf.io/v1',
  kind: 'NetworkAttachmentDefinition',
  metadata,
  spec: { config: typeof config === 'string' ? config : JSON.stringify(config) },
  ...top,
});

const bridge = {
  cniVersion: '1.0.0',
  name: 'blue-net',
  type: 'bridge',
  bridge: 'br-blue',
  ipam: { type: 'host-local', subnet: '10.1.0.0/24' },
};

const rejected = (obj: unknown, code: number, mentions: string): void => {
  const error = errorOf(parseNad(obj, SOURCE));
  assert.equal(error.code, code, error.message);
  assert.ok(error.message.includes(mentions), `"${error.message}" should mention ${mentions}`);
  assert.ok(error.message.startsWith(SOURCE), `"${error.message}" should start with the source`);
};

test('a NAD with a single plugin config becomes a one-plugin network definition', () => {
  assert.deepEqual(unwrap(parseNad(nad(bridge), SOURCE)), {
    namespace: 'team-a',
    name: 'blue',
    key: 'team-a/blue',
    annotations: {},
    source: SOURCE,
    cniVersion: '1.0.0',
    cniName: 'blue-net',
    plugins: [bridge],
  } satisfies NetworkDefinition);
});

test('a conf without a name takes the NAD name', () => {
  const { name: _, ...unnamed } = bridge;
  const def = unwrap(parseNad(nad(unnamed), SOURCE));
  assert.equal(def.cniName, 'blue');
  assert.equal(def.plugins[0]?.name, 'blue');
});

test('a conflist injects its name and cniVersion into every plugin, overriding their own, as libcni does', () => {
  const list = {
    cniVersion: '1.1.0',
    name: 'blue-list',
    plugins: [
      { type: 'bridge', name: 'mine', cniVersion: '0.3.1', bridge: 'br-blue' },
      { type: 'tuning', sysctl: { 'net.ipv4.conf.IFNAME.arp_notify': '1' } },
    ],
  };
  const def = unwrap(parseNad(nad(list), SOURCE));
  assert.equal(def.cniName, 'blue-list');
  assert.equal(def.cniVersion, '1.1.0');
  assert.deepEqual(def.plugins, [
    { type: 'bridge', name: 'blue-list', cniVersion: '1.1.0', bridge: 'br-blue' },
    { type: 'tuning', name: 'blue-list', cniVersion: '1.1.0', sysctl: { 'net.ipv4.conf.IFNAME.arp_notify': '1' } },
  ]);
});

test('a NAD without a namespace is in "default"', () => {
  const def = unwrap(parseNad(nad(bridge, { name: 'blue' }), SOURCE));
  assert.deepEqual([def.namespace, def.key], ['default', 'default/blue']);
});

test('annotations are kept', () => {
  const annotations = { 'k8s.v1.cni.cncf.io/resourceName': 'intel.com/sriov', owner: 'team-a' };
  assert.deepEqual(unwrap(parseNad(nad(bridge, { name: 'blue', annotations }), SOURCE)).annotations, annotations);
});

test('a dotted DNS-1123 subdomain is a valid name', () => {
  assert.equal(unwrap(parseNad(nad(bridge, { name: 'blue.v2-net' }), SOURCE)).key, 'default/blue.v2-net');
});

test('a wrong apiVersion is an invalid network config (7) naming apiVersion', () => {
  rejected(nad(bridge, undefined, { apiVersion: 'v1' }), CniCode.InvalidNetworkConfig, 'apiVersion');
});

test('a wrong kind is an invalid network config (7) naming kind', () => {
  rejected(nad(bridge, undefined, { kind: 'ConfigMap' }), CniCode.InvalidNetworkConfig, 'kind');
});

test('a name that is not a DNS-1123 subdomain is an invalid network config (7) naming metadata.name', () => {
  for (const name of ['Blue', 'blue_net', '-blue', 'blue-', '', 'a'.repeat(254)])
    rejected(nad(bridge, { name }), CniCode.InvalidNetworkConfig, 'metadata.name');
});

test('a namespace that is not a DNS-1123 label is an invalid network config (7) naming metadata.namespace', () => {
  for (const namespace of ['Team-a', 'team_a', 'team.a'])
    rejected(nad(bridge, { name: 'blue', namespace }), CniCode.InvalidNetworkConfig, 'metadata.namespace');
});

test('a NAD that is not an object is an invalid network config (7)', () => {
  for (const obj of [null, 'blue', [], 42])
    assert.equal(errorOf(parseNad(obj, SOURCE)).code, CniCode.InvalidNetworkConfig);
});

test('an empty or missing spec.config is an invalid network config (7)', () => {
  rejected(nad('  '), CniCode.InvalidNetworkConfig, 'spec.config of team-a/blue is empty');
  const { spec: _, ...noSpec } = nad(bridge) as Record<string, unknown>;
  rejected(noSpec, CniCode.InvalidNetworkConfig, 'spec.config of team-a/blue is empty');
});

test('spec.config that is not JSON is an invalid network config (7)', () => {
  rejected(nad('{"cniVersion": "1.0.0", "type": '), CniCode.InvalidNetworkConfig, 'not valid JSON');
  rejected(nad('cniVersion: 1.0.0'), CniCode.InvalidNetworkConfig, 'not valid JSON');
});

test('spec.config that is a JSON array is an invalid network config (7)', () => {
  rejected(nad([bridge]), CniCode.InvalidNetworkConfig, 'must be a JSON object');
});

test('a conflist with no plugins is an invalid network config (7)', () => {
  rejected(nad({ cniVersion: '1.0.0', name: 'blue', plugins: [] }), CniCode.InvalidNetworkConfig, 'no plugins');
});

test('a plugin without a type is an invalid network config (7) naming plugins[i]', () => {
  rejected(
    nad({ cniVersion: '1.0.0', name: 'blue', plugins: [{ type: 'bridge' }, { sysctl: {} }] }),
    CniCode.InvalidNetworkConfig,
    'plugins[1] has no "type"',
  );
  rejected(
    nad({ cniVersion: '1.0.0', name: 'blue', plugins: [{ type: '' }] }),
    CniCode.InvalidNetworkConfig,
    'plugins[0] has no "type"',
  );
  rejected(
    nad({ cniVersion: '1.0.0', name: 'blue', plugins: ['bridge'] }),
    CniCode.InvalidNetworkConfig,
    'plugins[0] is not an object',
  );
});

test('a single config without a type is an invalid network config (7)', () => {
  rejected(nad({ cniVersion: '1.0.0', name: 'blue' }), CniCode.InvalidNetworkConfig, 'the config has no "type"');
});

test('an unsupported cniVersion is incompatible (1); a missing one is invalid (7)', () => {
  rejected(nad({ ...bridge, cniVersion: '0.2.0' }), CniCode.IncompatibleVersion, '"0.2.0"');
  const { cniVersion: _, ...unversioned } = bridge;
  rejected(nad(unversioned), CniCode.InvalidNetworkConfig, 'cniVersion');
});
