import { test } from 'node:test';
import assert from 'node:assert/strict';
import { CniCode } from '../../src/cni/errors';
import { bestEffortVersion, parseCniRequest, validateIfname, type CniRequest } from '../../src/cni/request';
import { unwrap, errorOf } from '../support/result';

const NETNS = '/var/run/netns/cni-1234';
const CONTAINER = '3f2a9c0d1e';

const config = (extra: Record<string, unknown> = {}): string =>
  JSON.stringify({ cniVersion: '1.1.0', name: 'plexus', type: 'plexus-cni', ...extra });

/** A forwarded call with a full, valid environment; `undefined` in `overrides` unsets a variable. */
function call(
  command: string | undefined,
  overrides: Record<string, string | undefined> = {},
  stdin = config(),
): { env: Record<string, string>; stdin: string } {
  const all: Record<string, string | undefined> = {
    CNI_COMMAND: command,
    CNI_CONTAINERID: CONTAINER,
    CNI_NETNS: NETNS,
    CNI_IFNAME: 'eth0',
    CNI_ARGS: 'IgnoreUnknown=1;K8S_POD_NAMESPACE=team-a;K8S_POD_NAME=web-0',
    CNI_PATH: '/opt/cni/bin',
    ...overrides,
  };
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(all)) if (v !== undefined) env[k] = v;
  return { env, stdin };
}

const parse = (...a: Parameters<typeof call>): CniRequest => unwrap(parseCniRequest(call(...a)));
const fails = (code: number, mentions: string, ...a: Parameters<typeof call>): void => {
  const error = errorOf(parseCniRequest(call(...a)));
  assert.equal(error.code, code, error.message);
  assert.ok(error.message.includes(mentions), `"${error.message}" should mention ${mentions}`);
};

test('ADD with a valid environment becomes a typed request', () => {
  const req = parse('ADD');
  assert.equal(req.command, 'ADD');
  if (req.command !== 'ADD') return;
  assert.deepEqual(
    {
      version: req.version,
      networkName: req.networkName,
      containerId: req.containerId,
      netns: req.netns,
      ifname: req.ifname,
      pod: [req.args.podNamespace, req.args.podName],
      rawConfig: req.rawConfig,
    },
    {
      version: '1.1.0',
      networkName: 'plexus',
      containerId: CONTAINER,
      netns: NETNS,
      ifname: 'eth0',
      pod: ['team-a', 'web-0'],
      rawConfig: config(),
    },
  );
});

test('CHECK and DEL with a valid environment become typed requests', () => {
  for (const command of ['CHECK', 'DEL'] as const) {
    const req = parse(command);
    assert.equal(req.command, command);
    if (req.command !== command) return;
    assert.deepEqual([req.containerId, req.netns, req.ifname], [CONTAINER, NETNS, 'eth0']);
  }
});

test('STATUS, GC and VERSION with a valid environment become typed requests', () => {
  for (const command of ['STATUS', 'GC', 'VERSION'] as const) {
    const req = parse(command);
    assert.equal(req.command, command);
    assert.equal(req.version, '1.1.0');
  }
});

test('the config keeps unknown keys and runtimeConfig is looked up case-insensitively', () => {
  const req = parse('ADD', {}, config({ defaultNetwork: 'team-a/blue', runtimeConfig: { IPs: ['10.1.0.7/24'] } }));
  assert.equal(req.config.defaultNetwork, 'team-a/blue');
  assert.deepEqual(req.runtimeConfig.get('ips'), ['10.1.0.7/24']);
});

test('a missing CNI_COMMAND is an invalid environment (4)', () => {
  fails(CniCode.InvalidEnvironment, 'CNI_COMMAND', undefined);
  fails(CniCode.InvalidEnvironment, 'CNI_COMMAND', '');
});

test('an unknown CNI_COMMAND is an invalid environment (4) naming it', () => {
  fails(CniCode.InvalidEnvironment, '"FROB"', 'FROB');
  fails(CniCode.InvalidEnvironment, '"add"', 'add');
});

test('stdin that is not JSON is a decode failure (6)', () => {
  fails(CniCode.DecodeFailure, 'not valid JSON', 'ADD', {}, '{"cniVersion": "1.1.0",');
  fails(CniCode.DecodeFailure, 'not valid JSON', 'ADD', {}, '');
});

test('stdin JSON that is not an object is an invalid network config (7)', () => {
  for (const stdin of ['[]', '42', '"plexus"', 'null'])
    fails(CniCode.InvalidNetworkConfig, 'network configuration', 'ADD', {}, stdin);
});

test('a config field of the wrong type is an invalid network config (7) naming it', () => {
  fails(CniCode.InvalidNetworkConfig, 'runtimeConfig', 'ADD', {}, config({ runtimeConfig: 'ips' }));
  fails(CniCode.InvalidNetworkConfig, 'name', 'ADD', {}, config({ name: 7 }));
});

test('a missing cniVersion is an invalid network config (7)', () => {
  fails(CniCode.InvalidNetworkConfig, 'cniVersion', 'ADD', {}, JSON.stringify({ name: 'plexus', type: 'plexus-cni' }));
});

test('an unsupported cniVersion is incompatible (1)', () => {
  fails(CniCode.IncompatibleVersion, '"0.2.0"', 'ADD', {}, config({ cniVersion: '0.2.0' }));
  fails(CniCode.IncompatibleVersion, '"2.0.0"', 'DEL', {}, config({ cniVersion: '2.0.0' }));
});

test('a missing name or type is an invalid network config (7) naming it', () => {
  fails(CniCode.InvalidNetworkConfig, '"name"', 'ADD', {}, JSON.stringify({ cniVersion: '1.1.0', type: 'plexus-cni' }));
  fails(CniCode.InvalidNetworkConfig, '"type"', 'ADD', {}, JSON.stringify({ cniVersion: '1.1.0', name: 'plexus' }));
});

for (const variable of ['CNI_CONTAINERID', 'CNI_IFNAME', 'CNI_NETNS']) {
  test(`ADD without ${variable} is an invalid environment (4) naming it`, () => {
    fails(CniCode.InvalidEnvironment, variable, 'ADD', { [variable]: undefined });
    fails(CniCode.InvalidEnvironment, variable, 'ADD', { [variable]: '' });
  });
}

test('a relative CNI_NETNS is an invalid environment (4)', () => {
  fails(CniCode.InvalidEnvironment, 'not an absolute path', 'ADD', { CNI_NETNS: 'var/run/netns/pod1' });
  fails(CniCode.InvalidEnvironment, 'not an absolute path', 'CHECK', { CNI_NETNS: 'pod1' });
});

test('a container ID with characters outside [A-Za-z0-9_.-] is an invalid environment (4)', () => {
  for (const id of ['abc/def', '../etc', '-abc', 'abc def', 'abc\n', 'été'])
    fails(CniCode.InvalidEnvironment, 'CNI_CONTAINERID', 'ADD', { CNI_CONTAINERID: id });
});

test('an interface name longer than 15 bytes is an invalid environment (4)', () => {
  fails(CniCode.InvalidEnvironment, 'longer than 15 bytes', 'ADD', { CNI_IFNAME: 'eth0123456789ab' + 'c' });
  fails(CniCode.InvalidEnvironment, 'longer than 15 bytes', 'ADD', { CNI_IFNAME: 'éééééééé' }); // 8 characters, 16 bytes
  assert.equal(parse('ADD', { CNI_IFNAME: 'eth0123456789ab' }).command, 'ADD'); // exactly 15
});

test('an interface name with "/", ":" or whitespace, or "." or "..", is an invalid environment (4)', () => {
  for (const name of ['eth/0', 'eth:0', 'eth 0', 'eth\t0', '.', '..'])
    fails(CniCode.InvalidEnvironment, 'CNI_IFNAME', 'ADD', { CNI_IFNAME: name });
});

test('validateIfname names what it validates', () => {
  assert.deepEqual(validateIfname('br-blue', 'bridge'), { ok: true, value: 'br-blue' });
  assert.equal(errorOf(validateIfname('', 'bridge')).message, 'bridge is empty');
});

test('DEL accepts an unset or empty CNI_NETNS (the netns may be gone)', () => {
  for (const netns of [undefined, '']) {
    const req = parse('DEL', { CNI_NETNS: netns });
    assert.equal(req.command === 'DEL' && req.netns, '');
  }
});

test('DEL still needs CNI_CONTAINERID and CNI_IFNAME', () => {
  fails(CniCode.InvalidEnvironment, 'CNI_CONTAINERID', 'DEL', { CNI_CONTAINERID: undefined });
  fails(CniCode.InvalidEnvironment, 'CNI_IFNAME', 'DEL', { CNI_IFNAME: undefined });
});

test('invalid CNI_ARGS make ADD an invalid environment (4)', () => {
  fails(CniCode.InvalidEnvironment, '"FOO"', 'ADD', { CNI_ARGS: 'FOO=bar' });
});

test('CHECK with cniVersion before 0.4.0 is incompatible (1)', () => {
  fails(CniCode.IncompatibleVersion, 'CHECK needs CNI version 0.4.0', 'CHECK', {}, config({ cniVersion: '0.3.1' }));
  assert.equal(parse('CHECK', {}, config({ cniVersion: '0.4.0' })).command, 'CHECK');
});

test('GC and STATUS with cniVersion before 1.1.0 are incompatible (1)', () => {
  fails(CniCode.IncompatibleVersion, 'GC needs CNI version 1.1.0', 'GC', {}, config({ cniVersion: '1.0.0' }));
  fails(CniCode.IncompatibleVersion, 'STATUS needs CNI version 1.1.0', 'STATUS', {}, config({ cniVersion: '1.0.0' }));
});

test('GC and STATUS need no container environment', () => {
  const bare = { CNI_CONTAINERID: undefined, CNI_NETNS: undefined, CNI_IFNAME: undefined, CNI_ARGS: 'FOO=bar' };
  assert.equal(parse('GC', bare).command, 'GC');
  assert.equal(parse('STATUS', bare).command, 'STATUS');
});

test('GC reads cni.dev/valid-attachments into attachment keys', () => {
  const req = parse(
    'GC',
    {},
    config({
      'cni.dev/valid-attachments': [
        { containerID: 'c1', ifname: 'eth0' },
        { containerID: 'c2', ifname: 'net1', extra: 1 },
      ],
    }),
  );
  assert.deepEqual(req.command === 'GC' && req.validAttachments, [
    { containerId: 'c1', ifname: 'eth0' },
    { containerId: 'c2', ifname: 'net1' },
  ]);
});

test('GC reads the older cni.dev/attachments key too', () => {
  const req = parse('GC', {}, config({ 'cni.dev/attachments': [{ containerID: 'c1', ifname: 'eth0' }] }));
  assert.deepEqual(req.command === 'GC' && req.validAttachments, [{ containerId: 'c1', ifname: 'eth0' }]);
});

test('GC without an attachment list keeps nothing', () => {
  const req = parse('GC');
  assert.deepEqual(req.command === 'GC' && req.validAttachments, []);
});

test('GC with a malformed attachment list is an invalid network config (7)', () => {
  for (const list of [
    { containerID: 'c1', ifname: 'eth0' },
    [{ containerId: 'c1', ifname: 'eth0' }],
    [{ containerID: 'c1' }],
    'c1/eth0',
  ]) {
    fails(CniCode.InvalidNetworkConfig, 'valid-attachments', 'GC', {}, config({ 'cni.dev/valid-attachments': list }));
  }
});

test('VERSION with empty stdin answers for 1.1.0', () => {
  for (const stdin of ['', '  \n']) {
    const req = parse('VERSION', { CNI_CONTAINERID: undefined, CNI_NETNS: undefined, CNI_IFNAME: undefined }, stdin);
    assert.deepEqual([req.command, req.version], ['VERSION', '1.1.0']);
  }
});

test('VERSION answers in the config version when it is supported, else in 1.1.0', () => {
  assert.equal(parse('VERSION', {}, JSON.stringify({ cniVersion: '0.4.0' })).version, '0.4.0');
  assert.equal(parse('VERSION', {}, JSON.stringify({ cniVersion: '9.9.9' })).version, '1.1.0');
});

test('bestEffortVersion takes a supported cniVersion from stdin, else 1.1.0: an unsupported one is never echoed', () => {
  assert.equal(bestEffortVersion(config({ cniVersion: '0.3.1' })), '0.3.1');
  assert.equal(bestEffortVersion('{"cniVersion":"9.9.9"}'), '1.1.0');
  assert.equal(bestEffortVersion('{"cniVersion":"0.2.0"}'), '1.1.0');
  for (const stdin of ['', 'not json', '[]', 'null', '42', '{"cniVersion":4}', '{"cniVersion":""}'])
    assert.equal(bestEffortVersion(stdin), '1.1.0', stdin);
});

test('a container ID of 128 characters is accepted, one of 129 is code 4: it names files, which have at most 255 bytes', () => {
  assert.equal((parse('ADD', { CNI_CONTAINERID: 'a'.repeat(128) }) as { containerId: string }).containerId.length, 128);
  for (const command of ['ADD', 'DEL', 'CHECK'])
    fails(CniCode.InvalidEnvironment, 'CNI_CONTAINERID is 129 characters long; at most 128', command, {
      CNI_CONTAINERID: 'a'.repeat(129),
    });
});

test('an unsupported cniVersion is quoted cut short in the error', () => {
  const r = parseCniRequest(call('ADD', {}, config({ cniVersion: 'x'.repeat(5000) })));
  assert.ok(!r.ok);
  assert.equal(r.error.code, CniCode.IncompatibleVersion);
  assert.ok(r.error.message.length < 100, r.error.message);
  assert.match(r.error.message, /\(5000 characters\)$/);
});
