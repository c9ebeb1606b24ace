import { test } from 'node:test';
import assert from 'node:assert/strict';
import { CniCode, type Result } from '../../src/cni/errors';
import {
  describeSelection,
  parsePodAnnotations,
  parseSelection,
  type NetworkSelection,
} from '../../src/networks/selection';

function unwrap<T>(result: Result<T>): T {
  if (!result.ok) assert.fail(`expected ok, got error ${result.error.code}: ${result.error.message}`);
  return result.value;
}

/** The selection must be rejected with code 7 and exactly this message. */
function rejected(annotation: string, message: string): void {
  const result = parseSelection(annotation, 'pods');
  if (result.ok) assert.fail(`expected an error for ${annotation}, got ${JSON.stringify(result.value)}`);
  assert.equal(result.error.code, CniCode.InvalidNetworkConfig, result.error.message);
  assert.equal(result.error.message, message);
}

const parse = (annotation: string | undefined): NetworkSelection[] => unwrap(parseSelection(annotation, 'pods'));
const A = 'k8s.v1.cni.cncf.io/networks';

// The short form

test('a bare name selects the network in the pod namespace', () => {
  assert.deepEqual(parse('blue'), [{ namespace: 'pods', name: 'blue', index: 0 }]);
});

test('namespace/name selects the network in that namespace', () => {
  assert.deepEqual(parse('team-a/blue'), [{ namespace: 'team-a', name: 'blue', index: 0 }]);
});

test('name@ifname asks for an interface name', () => {
  assert.deepEqual(parse('blue@data0'), [{ namespace: 'pods', name: 'blue', interface: 'data0', index: 0 }]);
});

test('namespace/name@ifname gives all three', () => {
  assert.deepEqual(parse('team-a/blue@data0'), [{ namespace: 'team-a', name: 'blue', interface: 'data0', index: 0 }]);
});

test('comma-separated references are kept in order, each with its index', () => {
  assert.deepEqual(parse('blue,team-a/green@g0,blue'), [
    { namespace: 'pods', name: 'blue', index: 0 },
    { namespace: 'team-a', name: 'green', interface: 'g0', index: 1 },
    { namespace: 'pods', name: 'blue', index: 2 },
  ]);
});

test('whitespace around references and around "/" and "@" is trimmed', () => {
  assert.deepEqual(parse('  blue ,\n team-a / green @ g0 \t'), [
    { namespace: 'pods', name: 'blue', index: 0 },
    { namespace: 'team-a', name: 'green', interface: 'g0', index: 1 },
  ]);
});

test('a dotted DNS-1123 subdomain is a valid network name', () => {
  assert.deepEqual(parse('team-a/blue.v2'), [{ namespace: 'team-a', name: 'blue.v2', index: 0 }]);
});

test('a missing, empty or whitespace-only annotation selects nothing', () => {
  assert.deepEqual([parse(undefined), parse(''), parse(' \n\t ')], [[], [], []]);
});

test('an empty entry in the short form is rejected, naming its position', () => {
  rejected('blue,,green', `${A}: element 2 (""): is empty (remove the extra ",")`);
  rejected('blue,', `${A}: element 2 (""): is empty (remove the extra ",")`);
});

test('an empty namespace, name or interface in the short form is rejected', () => {
  rejected('/blue', `${A}: element 1 ("/blue"): the namespace before "/" is empty`);
  rejected('team-a/', `${A}: element 1 ("team-a/"): the network name is empty`);
  rejected('blue@', `${A}: element 1 ("blue@"): the interface after "@" is empty`);
});

test('more than one "/" or "@" is rejected', () => {
  rejected('a/b/c', `${A}: element 1 ("a/b/c"): has more than one "/" (expected [namespace/]name[@interface])`);
  rejected('blue@a@b', `${A}: element 1 ("blue@a@b"): has more than one "@" (expected [namespace/]name[@interface])`);
});

test('a network name that is not a DNS-1123 subdomain is rejected, naming the element', () => {
  rejected(
    'blue,Green',
    `${A}: element 2 ("Green"): network name "Green" is not a DNS-1123 subdomain (lower case letters, digits, "-" and "."; at most 253 characters)`,
  );
  rejected(
    'blue_net',
    `${A}: element 1 ("blue_net"): network name "blue_net" is not a DNS-1123 subdomain (lower case letters, digits, "-" and "."; at most 253 characters)`,
  );
});

test('a network name longer than 253 characters is rejected', () => {
  const long = `${'a'.repeat(63)}.${'b'.repeat(63)}.${'c'.repeat(63)}.${'d'.repeat(63)}`; // 255 characters
  const result = parseSelection(long, 'pods');
  assert.equal(result.ok, false);
  assert.ok(
    !result.ok && result.error.message.includes('is not a DNS-1123 subdomain'),
    !result.ok ? result.error.message : '',
  );
});

test('a namespace that is not a DNS-1123 label (dots, capitals, over 63) is rejected', () => {
  rejected(
    'team.a/blue',
    `${A}: element 1 ("team.a/blue"): namespace "team.a" is not a DNS-1123 label (lower case letters, digits and "-"; at most 63 characters)`,
  );
  rejected(
    'Team/blue',
    `${A}: element 1 ("Team/blue"): namespace "Team" is not a DNS-1123 label (lower case letters, digits and "-"; at most 63 characters)`,
  );
  const long = 'n'.repeat(64);
  rejected(
    `${long}/blue`,
    `${A}: element 1 ("${long}/blue"): namespace "${long}" is not a DNS-1123 label (lower case letters, digits and "-"; at most 63 characters)`,
  );
});

test('an interface name with whitespace inside is rejected, naming the element', () => {
  rejected('blue, ns/foo@eth 0', `${A}: element 2 ("ns/foo@eth 0"): interface "eth 0" may not contain whitespace`);
});

test('an interface name longer than 15 bytes is rejected (bytes, not characters)', () => {
  rejected(
    'blue@abcdefghijklmnop',
    `${A}: element 1 ("blue@abcdefghijklmnop"): interface "abcdefghijklmnop" is longer than 15 bytes`,
  );
  rejected('blue@ééééééééé', `${A}: element 1 ("blue@ééééééééé"): interface "ééééééééé" is longer than 15 bytes`);
  assert.equal(parse('blue@abcdefghijklmno')[0]?.interface, 'abcdefghijklmno');
});

test('"." and ".." and names with ":" are not interface names', () => {
  rejected('blue@.', `${A}: element 1 ("blue@."): interface "." may not be "." or ".."`);
  rejected('blue@..', `${A}: element 1 ("blue@.."): interface ".." may not be "." or ".."`);
  rejected('blue@eth0:1', `${A}: element 1 ("blue@eth0:1"): interface "eth0:1" may not contain ":"`);
});

test('an interface name with "/" is rejected (JSON form, where "/" cannot split it)', () => {
  rejected(
    '[{"name":"blue","interface":"a/b"}]',
    `${A}: element 1 ("{\\"name\\":\\"blue\\",\\"interface\\":\\"a/b\\"}"): interface "a/b" may not contain "/"`,
  );
});

test('the same explicit interface twice is rejected, naming both elements', () => {
  rejected(
    'blue@data0,green,red@data0',
    `${A}: element 3 (pods/red@data0): interface "data0" is already requested by element 1 (pods/blue@data0)`,
  );
});

// The JSON form

test('the JSON form reads every field', () => {
  const annotation = JSON.stringify([
    {
      name: 'blue',
      namespace: 'team-a',
      interface: 'data0',
      ips: ['10.1.0.7/24', '2001:db8::7'],
      mac: '02:AA:bb:cc:dd:ee',
      'default-route': ['10.1.0.1'],
      portMappings: [{ hostPort: 8080, containerPort: 80, protocol: 'tcp' }],
      bandwidth: { ingressRate: 1000, ingressBurst: 100 },
      'cni-args': { foo: 'bar', n: 1 },
      'infiniband-guid': 'C2:11:22:33:44:55:66:77',
    },
    { name: 'green', 'ipam-claim-reference': 'green-claim' },
  ]);
  assert.deepEqual(parse(annotation), [
    {
      namespace: 'team-a',
      name: 'blue',
      interface: 'data0',
      ips: ['10.1.0.7/24', '2001:db8::7'],
      mac: '02:aa:bb:cc:dd:ee',
      defaultRoute: ['10.1.0.1'],
      portMappings: [{ hostPort: 8080, containerPort: 80, protocol: 'tcp' }],
      bandwidth: { ingressRate: 1000, ingressBurst: 100 },
      cniArgs: { foo: 'bar', n: 1 },
      infinibandGUID: 'c2:11:22:33:44:55:66:77',
      index: 0,
    },
    { namespace: 'pods', name: 'green', ipamClaimReference: 'green-claim', index: 1 },
  ]);
});

test('in the JSON form a missing or empty namespace is the pod namespace', () => {
  assert.deepEqual(
    parse('[{"name":"blue"},{"name":"green","namespace":""}]').map((s) => s.namespace),
    ['pods', 'pods'],
  );
});

test('in the JSON form an empty interface means none was asked for', () => {
  assert.deepEqual(parse('[{"name":"blue","interface":""}]'), [{ namespace: 'pods', name: 'blue', index: 0 }]);
});

test('the JSON form may be surrounded by whitespace and span lines', () => {
  assert.deepEqual(parse('\n  [\n    {"name": "blue"}\n  ]\n'), [{ namespace: 'pods', name: 'blue', index: 0 }]);
});

test('unknown JSON keys are ignored', () => {
  assert.deepEqual(parse('[{"name":"blue","org.example/colour":"blue","future":[1]}]'), [
    { namespace: 'pods', name: 'blue', index: 0 },
  ]);
});

test('a 20-byte IP-over-InfiniBand hardware address is a valid mac; dashes become colons', () => {
  const ib = '80:00:11:22:33:44:55:66:77:88:99:aa:bb:cc:dd:ee:ff:00:11:22';
  assert.equal(parse(JSON.stringify([{ name: 'ib', mac: ib }]))[0]?.mac, ib);
  assert.equal(parse('[{"name":"blue","mac":"02-00-00-00-00-01"}]')[0]?.mac, '02:00:00:00:00:01');
});

test('malformed JSON is rejected', () => {
  const result = parseSelection('[{"name":"blue"', 'pods');
  assert.ok(!result.ok);
  assert.equal(result.error.code, CniCode.InvalidNetworkConfig);
  assert.equal(result.error.message, `${A}: not valid JSON`);
  assert.notEqual(result.error.details, '');
});

test('JSON that is not a list is rejected, even without a leading "[" (Multus reads any "{" or quote as JSON)', () => {
  rejected(
    '{"name":"blue"}',
    `${A}: the JSON form must be a list of objects (or use the short form: [namespace/]name[@interface], comma separated)`,
  );
  rejected(
    '"blue"',
    `${A}: the JSON form must be a list of objects (or use the short form: [namespace/]name[@interface], comma separated)`,
  );
});

test('a list element that is not an object is rejected', () => {
  rejected('[{"name":"blue"},"green"]', `${A}: element 2 ("\\"green\\""): must be a JSON object`);
});

test('a missing name is rejected', () => {
  rejected('[{"namespace":"team-a"}]', `${A}: element 1 ("{\\"namespace\\":\\"team-a\\"}"): "name" is required`);
});

test('wrong JSON types are rejected, naming the field', () => {
  rejected('[{"name":1}]', `${A}: element 1 ("{\\"name\\":1}"): "name" must be a string`);
  rejected(
    '[{"name":"blue","ips":"10.1.0.7"}]',
    `${A}: element 1 ("{\\"name\\":\\"blue\\",\\"ips\\":\\"10.1.0.7\\"}"): "ips" must be a list`,
  );
  rejected(
    '[{"name":"blue","ips":[7]}]',
    `${A}: element 1 ("{\\"name\\":\\"blue\\",\\"ips\\":[7]}"): "ips[0]" must be a string`,
  );
  rejected(
    '[{"name":"blue","bandwidth":[1]}]',
    `${A}: element 1 ("{\\"name\\":\\"blue\\",\\"bandwidth\\":[1]}"): "bandwidth" must be a JSON object`,
  );
  rejected(
    '[{"name":"blue","portMappings":[1]}]',
    `${A}: element 1 ("{\\"name\\":\\"blue\\",\\"portMappings\\":[1]}"): "portMappings[0]" must be a JSON object`,
  );
  rejected(
    '[{"name":"blue","cni-args":"x"}]',
    `${A}: element 1 ("{\\"name\\":\\"blue\\",\\"cni-args\\":\\"x\\"}"): "cni-args" must be a JSON object`,
  );
  rejected(
    '[{"name":"blue","default-route":"10.0.0.1"}]',
    `${A}: element 1 ("{\\"name\\":\\"blue\\",\\"default-route\\":\\"10.0.0.1\\"}"): "default-route" must be a list`,
  );
  rejected(
    '[{"name":"blue","mac":null}]',
    `${A}: element 1 ("{\\"name\\":\\"blue\\",\\"mac\\":null}"): "mac" must be a string`,
  );
});

test('a bad JSON name or namespace is rejected like in the short form', () => {
  rejected(
    '[{"name":"Blue"}]',
    `${A}: element 1 ("{\\"name\\":\\"Blue\\"}"): network name "Blue" is not a DNS-1123 subdomain (lower case letters, digits, "-" and "."; at most 253 characters)`,
  );
  rejected(
    '[{"name":"blue","namespace":"a.b"}]',
    `${A}: element 1 ("{\\"name\\":\\"blue\\",\\"namespace\\":\\"a.b\\"}"): namespace "a.b" is not a DNS-1123 label (lower case letters, digits and "-"; at most 63 characters)`,
  );
});

test('an ips entry that is neither an IP nor a CIDR is rejected', () => {
  rejected(
    '[{"name":"blue","ips":["10.1.0.7","10.1.0.300"]}]',
    `${A}: element 1 ("{\\"name\\":\\"blue\\",\\"ips\\":[\\"10.1.0.7\\",\\"10.1.0.300\\"]}"): ips[1] "10.1.0.300" is not an IP address or CIDR`,
  );
  rejected(
    '[{"name":"blue","ips":["10.1.0.7/33"]}]',
    `${A}: element 1 ("{\\"name\\":\\"blue\\",\\"ips\\":[\\"10.1.0.7/33\\"]}"): ips[0] "10.1.0.7/33" is not an IP address or CIDR`,
  );
});

test('an empty ips list is rejected (the spec requires at least one)', () => {
  rejected(
    '[{"name":"blue","ips":[]}]',
    `${A}: element 1 ("{\\"name\\":\\"blue\\",\\"ips\\":[]}"): "ips" is an empty list`,
  );
});

test('a bad mac is rejected', () => {
  rejected(
    '[{"name":"blue","mac":"02:00:00:00:00"}]',
    `${A}: element 1 ("{\\"name\\":\\"blue\\",\\"mac\\":\\"02:00:00:00:00\\"}"): mac "02:00:00:00:00" is not a MAC address (6 hex pairs, or 20 for IP over InfiniBand, separated by ":")`,
  );
  rejected(
    '[{"name":"blue","mac":"zz:00:00:00:00:01"}]',
    `${A}: element 1 ("{\\"name\\":\\"blue\\",\\"mac\\":\\"zz:00:00:00:00:01\\"}"): mac "zz:00:00:00:00:01" is not a MAC address (6 hex pairs, or 20 for IP over InfiniBand, separated by ":")`,
  );
});

test('a bad infiniband-guid is rejected', () => {
  rejected(
    '[{"name":"ib","infiniband-guid":"02:00:00:00:00:01"}]',
    `${A}: element 1 ("{\\"name\\":\\"ib\\",\\"infiniband-guid\\":\\"02:00:00:00:00:01\\"}"): infiniband-guid "02:00:00:00:00:01" is not a GUID (8 hex pairs separated by ":")`,
  );
});

test('a default-route gateway that is not an IP is rejected', () => {
  rejected(
    '[{"name":"blue","default-route":["10.1.0.0/24"]}]',
    `${A}: element 1 ("{\\"name\\":\\"blue\\",\\"default-route\\":[\\"10.1.0.0/24\\"]}"): default-route[0] "10.1.0.0/24" is not an IP address`,
  );
});

test('two elements with default-route are rejected, naming both', () => {
  rejected(
    '[{"name":"blue","default-route":["10.1.0.1"]},{"name":"green"},{"name":"red","default-route":["10.2.0.1"]}]',
    `${A}: element 3 (pods/red): "default-route" is already set by element 1 (pods/blue); only one element may carry the default route`,
  );
});

test('the same explicit interface twice in the JSON form is rejected, naming both elements', () => {
  rejected(
    '[{"name":"blue","interface":"net5"},{"name":"green","interface":"net5"}]',
    `${A}: element 2 (pods/green@net5): interface "net5" is already requested by element 1 (pods/blue@net5)`,
  );
});

test('ipam-claim-reference together with ips is rejected', () => {
  rejected(
    '[{"name":"blue","ips":["10.1.0.7"],"ipam-claim-reference":"claim"}]',
    `${A}: element 1 ("{\\"name\\":\\"blue\\",\\"ips\\":[\\"10.1.0.7\\"],\\"ipam-claim-reference\\":\\"claim\\"}"): "ipam-claim-reference" and "ips" may not be used together: the claim decides the addresses`,
  );
});

test('a long offending element is shortened in the message', () => {
  const result = parseSelection(JSON.stringify([{ name: 'Blue', padding: 'x'.repeat(200) }]), 'pods');
  assert.ok(!result.ok);
  assert.ok(result.error.message.length < 300, result.error.message);
  assert.ok(result.error.message.includes('..."): network name "Blue"'), result.error.message);
});

test('describeSelection counts elements from 1 and shows namespace, name and interface', () => {
  assert.equal(describeSelection({ namespace: 'a', name: 'b', interface: 'c0', index: 1 }), 'element 2 (a/b@c0)');
  assert.equal(describeSelection({ namespace: 'a', name: 'b', index: 0 }), 'element 1 (a/b)');
});

// Pod annotations from the runtime

test('pod annotations from the runtime capability are a string map', () => {
  const annotations = { 'k8s.v1.cni.cncf.io/networks': 'blue', other: 'x' };
  assert.deepEqual(unwrap(parsePodAnnotations(annotations)), annotations);
});

test('absent pod annotations are an empty map', () => {
  assert.deepEqual(unwrap(parsePodAnnotations(undefined)), {});
});

test('pod annotations that are not a string map are invalid (7)', () => {
  for (const value of [null, 'blue', ['a'], 42, { a: 1 }, { a: null }]) {
    const result = parsePodAnnotations(value);
    assert.ok(!result.ok, JSON.stringify(value));
    assert.equal(result.error.code, CniCode.InvalidNetworkConfig);
    assert.ok(
      result.error.message.startsWith('runtimeConfig "io.kubernetes.cri.pod-annotations"'),
      result.error.message,
    );
  }
});
