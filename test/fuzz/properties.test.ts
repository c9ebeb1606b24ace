/**
 * Property-based fuzzing of every parser at Plexus's edge (fast-check, from fixed seeds so a failure reproduces):
 * whatever a runtime, a tenant's annotation or a NAD sends, the answer is never a throw. It is either a valid value
 * (a plan whose interface names the kernel takes, unique in the pod) or a CNI error with the right code and a message.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { interfaceNameProblem } from '../../src/cni/ifname';
import { CniCode, CniError, err, ok, type Result } from '../../src/cni/errors';
import { parseCniRequest } from '../../src/cni/request';
import { parseIpamConfig } from '../../src/ipam';
import { parseNad, type NetworkDefinition } from '../../src/networks/nad';
import { planAttachments } from '../../src/networks/planner';
import { parsePodAnnotations, parseSelection } from '../../src/networks/selection';
import { loadDaemonConfig } from '../../src/node/config';

const RUNS = 3000;
const run = (seed: number) => ({ numRuns: RUNS, seed });

/** A CNI error as the spec wants it: a known code, a message a person can read. */
function assertCniError(e: unknown, codes: readonly number[]): void {
  assert.ok(e instanceof CniError, `a CniError, not ${String(e)}`);
  assert.ok(codes.includes(e.code), `code ${e.code} is one of ${codes.join(', ')}: ${e.message}`);
  assert.ok(e.message.length > 0 && e.message.length < 20_000, 'a message, of a size a log can take');
}

// Text a tenant may type, biased towards the annotation's own syntax and the characters that break parsers.
const hostileChar = fc.constantFrom(
  '/',
  '@',
  ',',
  ' ',
  '"',
  '[',
  ']',
  '{',
  '}',
  ':',
  '\\',
  '\n',
  '\u0000',
  '\ud800',
  '\udc00',
  '\u{1F600}',
  'ä',
  '.',
  '-',
  '_',
);
const token = fc.oneof(fc.stringMatching(/^[a-z0-9][a-z0-9.-]{0,20}$/), fc.string({ maxLength: 20 }), hostileChar);
const shortForm = fc
  .tuple(
    fc.array(
      fc
        .tuple(fc.option(token), token, fc.option(token))
        .map(([ns, name, ifname]) => `${ns === null ? '' : `${ns}/`}${name}${ifname === null ? '' : `@${ifname}`}`),
      { maxLength: 12 },
    ),
    fc.constantFrom(',', ', ', ' ,'),
  )
  .map(([xs, separator]) => xs.join(separator));
const jsonElement = fc.record(
  {
    name: fc.oneof(token, fc.jsonValue()),
    namespace: fc.oneof(token, fc.jsonValue()),
    interface: fc.oneof(token, fc.jsonValue()),
    ips: fc.oneof(fc.array(fc.oneof(fc.ipV4(), fc.ipV6(), token)), fc.jsonValue()),
    mac: fc.oneof(fc.constantFrom('02:00:00:00:00:01', 'zz'), token, fc.jsonValue()),
    'default-route': fc.oneof(fc.array(fc.ipV4()), fc.jsonValue()),
    'cni-args': fc.oneof(fc.dictionary(token, fc.jsonValue()), fc.jsonValue()),
    portMappings: fc.jsonValue(),
  },
  { requiredKeys: [] },
);
const annotation = fc.oneof(
  shortForm,
  fc.array(fc.oneof(jsonElement, fc.jsonValue()), { maxLength: 8 }).map((xs) => JSON.stringify(xs)),
  fc.string(),
  fc.json(),
);

test('the selection annotation: never a throw; a list of selections, or error 7 naming the annotation', () => {
  fc.assert(
    fc.property(annotation, token, (text, ns) => {
      const r = parseSelection(text, ns);
      if (!r.ok) {
        assertCniError(r.error, [CniCode.InvalidNetworkConfig]);
        assert.match(r.error.message, /^k8s\.v1\.cni\.cncf\.io\/networks/);
        return;
      }
      for (const s of r.value)
        if (s.interface !== undefined)
          assert.equal(
            interfaceNameProblem(s.interface),
            undefined,
            `accepted interface ${JSON.stringify(s.interface)}`,
          );
    }),
    run(20261123),
  );
});

const known = (ns: string, name: string, annotations: Record<string, string> = {}): NetworkDefinition => ({
  namespace: ns,
  name,
  key: `${ns}/${name}`,
  annotations,
  cniVersion: '1.0.0',
  cniName: name,
  plugins: [{ type: 'bridge', name, cniVersion: '1.0.0' }],
  source: 'fuzz',
});
const NETWORKS = new Map(
  [
    known('default', 'a'),
    known('default', 'b', { 'plexus.io/interface-prefix': 'data' }),
    known('x', 'c'),
    known('default', 'd', { 'plexus.io/delegate': 'true' }),
  ].map((n) => [n.key, n]),
);
const resolve = (ns: string, name: string): Result<NetworkDefinition> => {
  const n = NETWORKS.get(`${ns}/${name}`);
  return n ? ok(n) : err(new CniError(CniCode.InvalidNetworkConfig, `network ${ns}/${name} is not defined`));
};
const plannable = fc
  .array(
    fc.tuple(
      fc.constantFrom('a', 'b', 'x/c', 'd', 'nope', 'x/a'),
      fc.option(fc.oneof(fc.constantFrom('net1', 'eth0', 'data1', 'net2'), token)),
    ),
    { maxLength: 10 },
  )
  .map((xs) => xs.map(([n, i]) => `${n}${i === null ? '' : `@${i}`}`).join(','));

test('the plan: never a throw; interfaces the kernel takes, each once in the pod, the default first; or error 7', () => {
  fc.assert(
    fc.property(
      fc.oneof(plannable, annotation),
      fc.constantFrom('multus', 'eth'),
      fc.constantFrom('eth0', 'pod0'),
      (text, naming, defaultIfname) => {
        const selections = parseSelection(text, 'default');
        if (!selections.ok) return;
        const plan = planAttachments({
          defaultNetwork: known('kube-system', 'pods'),
          selections: selections.value,
          resolve,
          declaredCapabilities: () => new Set(['ips', 'mac']),
          options: { naming: naming, defaultIfname, sources: { selectionAnnotation: true, defaultNetworks: [] } },
        });
        if (!plan.ok) return assertCniError(plan.error, [CniCode.InvalidNetworkConfig]);
        const names = plan.value.map((a) => a.ifname);
        assert.equal(new Set(names).size, names.length, `unique: ${names.join(',')}`);
        for (const n of names) assert.equal(interfaceNameProblem(n), undefined, n);
        assert.equal(plan.value[0]?.isDefault, true);
        assert.equal(plan.value[0]?.ifname, defaultIfname);
      },
    ),
    run(7),
  );
});

test('pod annotations from the runtime: never a throw; a map of strings, or error 7', () => {
  fc.assert(
    fc.property(fc.oneof(fc.jsonValue(), fc.dictionary(fc.string(), fc.string())), (value) => {
      const r = parsePodAnnotations(value);
      if (!r.ok) return assertCniError(r.error, [CniCode.InvalidNetworkConfig]);
      for (const v of Object.values(r.value)) assert.equal(typeof v, 'string');
    }),
    run(11),
  );
});

const nadObject = fc.oneof(
  fc.jsonValue(),
  fc.record(
    {
      apiVersion: fc.oneof(fc.constant('k8s.cni.cncf.io/v1'), fc.jsonValue()),
      kind: fc.oneof(fc.constant('NetworkAttachmentDefinition'), fc.jsonValue()),
      metadata: fc.oneof(
        fc.record(
          {
            name: fc.oneof(token, fc.jsonValue()),
            namespace: fc.oneof(token, fc.jsonValue()),
            annotations: fc.oneof(fc.dictionary(token, fc.string()), fc.jsonValue()),
          },
          { requiredKeys: [] },
        ),
        fc.jsonValue(),
      ),
      spec: fc.oneof(
        fc.record(
          {
            config: fc.oneof(
              fc.json(),
              fc.string(),
              fc.jsonValue().map((v) => JSON.stringify({ cniVersion: '1.0.0', name: 'n', type: 'bridge', ipam: v })),
            ),
          },
          { requiredKeys: [] },
        ),
        fc.jsonValue(),
      ),
    },
    { requiredKeys: [] },
  ),
);

test('a NetworkAttachmentDefinition: never a throw; a definition with a key and plugins, or error 7 (1 for a bad cniVersion)', () => {
  fc.assert(
    fc.property(nadObject, (obj) => {
      const r = parseNad(obj, 'fuzz.yaml');
      if (!r.ok) return assertCniError(r.error, [CniCode.InvalidNetworkConfig, CniCode.IncompatibleVersion]);
      assert.equal(r.value.key, `${r.value.namespace}/${r.value.name}`);
      assert.ok(r.value.plugins.length > 0);
    }),
    run(13),
  );
});

test('an ipam config: never a throw; a config, or error 7', () => {
  fc.assert(
    fc.property(
      fc.oneof(
        fc.jsonValue(),
        fc.record(
          {
            type: fc.constantFrom('host-local', 'static', 'dhcp'),
            ranges: fc.jsonValue(),
            subnet: fc.oneof(fc.constantFrom('10.1.0.0/24', 'fd00::/64', '10.1.0.0/33'), token),
            addresses: fc.jsonValue(),
            routes: fc.jsonValue(),
          },
          { requiredKeys: ['type'] },
        ),
      ),
      (raw) => {
        const r = parseIpamConfig(raw);
        if (!r.ok) assertCniError(r.error, [CniCode.InvalidNetworkConfig]);
      },
    ),
    run(17),
  );
});

const cniEnv = fc.record(
  {
    CNI_COMMAND: fc.oneof(fc.constantFrom('ADD', 'DEL', 'CHECK', 'GC', 'STATUS', 'VERSION'), fc.string()),
    CNI_CONTAINERID: fc.oneof(fc.stringMatching(/^[a-f0-9]{1,64}$/), fc.string()),
    CNI_NETNS: fc.oneof(fc.constantFrom('/var/run/netns/x', '/proc/self/ns/net', ''), fc.string()),
    CNI_IFNAME: fc.oneof(fc.constantFrom('eth0', 'net1'), token, fc.string()),
    CNI_ARGS: fc.oneof(
      fc.constantFrom('IgnoreUnknown=1;K8S_POD_NAMESPACE=a;K8S_POD_NAME=b', 'IP=10.1.0.9;MAC=02:00:00:00:00:01'),
      fc.string(),
    ),
    CNI_PATH: fc.constantFrom('/opt/cni/bin', ''),
  },
  { requiredKeys: [] },
);
const cniStdin = fc.oneof(
  fc.string(),
  fc.json(),
  fc
    .record(
      {
        cniVersion: fc.oneof(fc.constantFrom('0.3.1', '0.4.0', '1.0.0', '1.1.0', '2.0.0'), fc.jsonValue()),
        name: fc.oneof(token, fc.jsonValue()),
        type: fc.constant('plexus-cni'),
        runtimeConfig: fc.jsonValue(),
        defaultNetwork: fc.jsonValue(),
        'cni.dev/valid-attachments': fc.jsonValue(),
      },
      { requiredKeys: [] },
    )
    .map((o) => JSON.stringify(o)),
);

test('a CNI request from plexus-cni: never a throw; a request, or error 1, 4, 6 or 7', () => {
  fc.assert(
    fc.property(cniEnv, cniStdin, (env, stdin) => {
      const r = parseCniRequest({ env: env, stdin });
      if (!r.ok)
        return assertCniError(r.error, [
          CniCode.IncompatibleVersion,
          CniCode.InvalidEnvironment,
          CniCode.DecodeFailure,
          CniCode.InvalidNetworkConfig,
        ]);
      if (r.value.command === 'ADD' || r.value.command === 'DEL' || r.value.command === 'CHECK')
        assert.equal(interfaceNameProblem(r.value.ifname), undefined);
    }),
    run(19),
  );
});

test("plexusd's flags: never a throw; a config, help, or an error message naming what is wrong", () => {
  const flag = fc.oneof(
    fc.constantFrom(
      '--socket',
      '--state-dir',
      '--max-concurrent',
      '--naming',
      '--max-interfaces-per-pod',
      '--drain-seconds',
      '--config',
      '--help',
      '-h',
      '--',
    ),
    fc.string(),
  );
  fc.assert(
    fc.property(
      fc.array(
        fc.oneof(
          flag,
          fc.string(),
          flag.chain((f) => fc.string().map((v) => `${f}=${v}`)),
        ),
        { maxLength: 8 },
      ),
      (argv) => {
        const outcome = loadDaemonConfig(argv.filter((a) => a !== '--config' && !a.startsWith('--config=')));
        if (outcome.kind === 'error') assert.ok(outcome.message.length > 0);
      },
    ),
    run(23),
  );
});
