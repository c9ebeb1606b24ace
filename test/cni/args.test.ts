import { test } from 'node:test';
import assert from 'node:assert/strict';
import { parseCniArgs, RuntimeConfig, type CniArgs } from '../../src/cni/args';
import { CniCode } from '../../src/cni/errors';
import { unwrap, errorOf } from '../support/result';

const rejected = (text: string, mentions: string): void => {
  const error = errorOf(parseCniArgs(text));
  assert.equal(error.code, CniCode.InvalidEnvironment, text);
  assert.ok(error.message.includes(mentions), `"${error.message}" should mention ${mentions}`);
};

const containerd =
  'IgnoreUnknown=1;K8S_POD_NAMESPACE=team-a;K8S_POD_NAME=web-0;K8S_POD_INFRA_CONTAINER_ID=0123abcd;K8S_POD_UID=6f1c2b9e-1111-2222-3333-444455556666';

test('containerd-style CNI_ARGS give the pod identity', () => {
  const args = unwrap(parseCniArgs(containerd));
  assert.deepEqual(
    {
      podNamespace: args.podNamespace,
      podName: args.podName,
      podInfraContainerId: args.podInfraContainerId,
      podUid: args.podUid,
      ips: args.ips,
      mac: args.mac,
      ignoreUnknown: args.ignoreUnknown,
    },
    {
      podNamespace: 'team-a',
      podName: 'web-0',
      podInfraContainerId: '0123abcd',
      podUid: '6f1c2b9e-1111-2222-3333-444455556666',
      ips: [],
      mac: undefined,
      ignoreUnknown: true,
    },
  );
});

test('the order of CNI_ARGS pairs does not matter', () => {
  const reversed = containerd.split(';').reverse().join(';');
  const a = unwrap(parseCniArgs(containerd));
  const b = unwrap(parseCniArgs(reversed));
  assert.deepEqual({ ...b, raw: [] }, { ...a, raw: [] });
});

test('raw keeps every pair in the order given', () => {
  assert.deepEqual(unwrap(parseCniArgs('K8S_POD_NAME=web-0;K8S_POD_NAMESPACE=team-a')).raw, [
    ['K8S_POD_NAME', 'web-0'],
    ['K8S_POD_NAMESPACE', 'team-a'],
  ]);
});

test('empty or unset CNI_ARGS parse to no arguments', () => {
  for (const text of [undefined, '', ';', ';;']) {
    assert.deepEqual(
      unwrap(parseCniArgs(text)),
      { ips: [], ignoreUnknown: false, raw: [] } satisfies CniArgs,
      String(text),
    );
  }
});

test('empty pod identity values count as absent', () => {
  const args = unwrap(parseCniArgs('K8S_POD_NAMESPACE=;K8S_POD_NAME='));
  assert.equal('podNamespace' in args, false);
  assert.equal('podName' in args, false);
});

test('a value may contain "="', () => {
  assert.equal(unwrap(parseCniArgs('IgnoreUnknown=1;TOKEN=a=b=c')).raw[1]?.[1], 'a=b=c');
});

test('IP= takes one address, with or without a prefix', () => {
  assert.deepEqual(unwrap(parseCniArgs('IP=10.1.0.7')).ips, ['10.1.0.7']);
  assert.deepEqual(unwrap(parseCniArgs('IP=10.1.0.7/24')).ips, ['10.1.0.7/24']);
});

test('IP= takes a comma-separated list, IPv4 and IPv6, spaces trimmed', () => {
  assert.deepEqual(unwrap(parseCniArgs('IP=10.1.0.7/24, fd00:1::7,fd00:2::7/64')).ips, [
    '10.1.0.7/24',
    'fd00:1::7',
    'fd00:2::7/64',
  ]);
});

test('an IP= entry that is not an address is an invalid environment (4) naming it', () => {
  rejected('IP=10.1.0.300', '10.1.0.300');
  rejected('IP=10.1.0.7,banana', 'banana');
  rejected('IP=fd00::g', 'fd00::g');
});

test('an IP= entry with an invalid prefix length is an invalid environment (4) naming it', () => {
  rejected('IP=10.1.0.7/99', '10.1.0.7/99');
  rejected('IP=10.1.0.7/abc', '10.1.0.7/abc');
  rejected('IP=fd00::7/129', 'fd00::7/129');
});

test('MAC= is normalized to lower case with colons', () => {
  assert.equal(unwrap(parseCniArgs('MAC=0A:58:0A:01:00:07')).mac, '0a:58:0a:01:00:07');
  assert.equal(unwrap(parseCniArgs('MAC=0A-58-0A-01-00-07')).mac, '0a:58:0a:01:00:07');
});

test('a MAC= that is not a MAC address is an invalid environment (4) naming it', () => {
  rejected('MAC=0a:58:0a:01:00', '0a:58:0a:01:00');
  rejected('MAC=0a:58:0a:01:00:zz', '0a:58:0a:01:00:zz');
  rejected('MAC=0a580a010007', '0a580a010007');
});

test('a pair without "=" or without a key is an invalid environment (4)', () => {
  rejected('K8S_POD_NAME=web-0;garbage', '"garbage"');
  rejected('=value', '"=value"');
});

test('an unknown key without IgnoreUnknown is an invalid environment (4) naming the key', () => {
  rejected('K8S_POD_NAME=web-0;FOO=bar', '"FOO"');
  rejected('IgnoreUnknown=0;FOO=bar', '"FOO"');
  rejected('IgnoreUnknown=false;FOO=bar', '"FOO"');
});

test('with IgnoreUnknown=1 or true an unknown key is accepted and kept in raw', () => {
  for (const flag of ['1', 'true', 'True', 'TRUE']) {
    const args = unwrap(parseCniArgs(`IgnoreUnknown=${flag};FOO=bar`));
    assert.equal(args.ignoreUnknown, true, flag);
    assert.deepEqual(args.raw, [
      ['IgnoreUnknown', flag],
      ['FOO', 'bar'],
    ]);
  }
});

test('IgnoreUnknown does not excuse an invalid IP or MAC', () => {
  rejected('IgnoreUnknown=1;IP=nope', 'nope');
  rejected('IgnoreUnknown=1;MAC=nope', 'nope');
});

test('RuntimeConfig lookups ignore the case of keys', () => {
  const rc = new RuntimeConfig({ PortMappings: [{ hostPort: 80 }], 'io.kubernetes.cri.pod-annotations': { a: 'b' } });
  assert.deepEqual(rc.get('portMappings'), [{ hostPort: 80 }]);
  assert.equal(rc.has('PORTMAPPINGS'), true);
  assert.deepEqual(rc.get('IO.Kubernetes.CRI.Pod-Annotations'), { a: 'b' });
  assert.equal(rc.has('io.kubernetes.cri.pod-annotations'), true);
});

test('RuntimeConfig reports absent keys as absent and keeps the raw object', () => {
  const raw = { ips: ['10.1.0.7/24'] };
  const rc = new RuntimeConfig(raw);
  assert.equal(rc.has('mac'), false);
  assert.equal(rc.get('mac'), undefined);
  assert.equal(rc.raw, raw);
});
