import { test } from 'node:test';
import assert from 'node:assert/strict';
import { CniCode, CniError, err, ok, type Result } from '../../src/cni/errors';
import type { NetworkDefinition } from '../../src/networks/nad';
import { planAttachments, type PlanInput, type PlanOptions, type PlannedAttachment } from '../../src/networks/planner';
import { parseSelection, type NetworkSelection } from '../../src/networks/selection';
import { unwrap, errorOf } from '../support/result';

const network = (
  namespace: string,
  name: string,
  annotations: Record<string, string> = {},
  type = 'bridge',
): NetworkDefinition => ({
  namespace,
  name,
  key: `${namespace}/${name}`,
  annotations,
  cniVersion: '1.0.0',
  cniName: name,
  plugins: [{ type, name, cniVersion: '1.0.0' }],
  source: 'test',
});

const POD_NETWORK = network('kube-system', 'pod-network');
const KNOWN = new Map<string, NetworkDefinition>(
  [
    network('pods', 'blue'),
    network('pods', 'green'),
    network('pods', 'red'),
    network('team-a', 'blue'),
    network('default', 'sidecar'),
    network('pods', 'sriov', { 'plexus.io/interface-prefix': 'vf' }),
    network('pods', 'fabric', { 'plexus.io/interface-prefix': 'fab' }),
    network('pods', 'net-prefixed', { 'plexus.io/interface-prefix': 'net' }),
    network('pods', 'long-prefix', { 'plexus.io/interface-prefix': 'abcdefghijklmno' }),
    network('pods', 'delegated', { 'plexus.io/delegate': 'true' }),
    network('pods', 'odd-delegate', { 'plexus.io/delegate': 'yes' }),
    network('pods', 'capable', {}, 'macvlan'),
  ].map((n) => [n.key, n]),
);

const resolve = (namespace: string, name: string): Result<NetworkDefinition> => {
  const found = KNOWN.get(`${namespace}/${name}`);
  return found
    ? ok(found)
    : err(
        new CniError(
          CniCode.InvalidNetworkConfig,
          `network ${namespace}/${name} is not defined in /etc/plexus/networks.d`,
        ),
      );
};

const OPTIONS: PlanOptions = {
  naming: 'multus',
  defaultIfname: 'eth0',
  sources: { selectionAnnotation: true, defaultNetworks: [] },
};

const selections = (annotation: string): NetworkSelection[] => unwrap(parseSelection(annotation, 'pods'));

function plan(
  annotation: string,
  options: Partial<PlanOptions> = {},
  capabilities: readonly string[] = [],
): Result<PlannedAttachment[]> {
  const input: PlanInput = {
    defaultNetwork: POD_NETWORK,
    selections: selections(annotation),
    resolve,
    declaredCapabilities: (n) => new Set(n.plugins[0]?.type === 'macvlan' ? capabilities : []),
    options: { ...OPTIONS, ...options },
  };
  return planAttachments(input);
}

const names = (annotation: string, options: Partial<PlanOptions> = {}): string[] =>
  unwrap(plan(annotation, options)).map((a) => `${a.ifname}=${a.network.key}`);

test('without selections the plan is the default network alone, as eth0', () => {
  const [only, ...rest] = unwrap(plan(''));
  assert.deepEqual(rest, []);
  assert.deepEqual(only, {
    ifname: 'eth0',
    explicitName: true,
    network: POD_NETWORK,
    isDefault: true,
    forceDelegate: false,
    defaultRoute: true,
  });
});

test('the default network comes first and is named after CNI_IFNAME', () => {
  assert.deepEqual(names('blue', { defaultIfname: 'pod0' }), ['pod0=kube-system/pod-network', 'net1=pods/blue']);
});

test('selected networks follow in annotation order, named net1, net2, ... by default', () => {
  assert.deepEqual(names('blue,team-a/blue,green'), [
    'eth0=kube-system/pod-network',
    'net1=pods/blue',
    'net2=team-a/blue',
    'net3=pods/green',
  ]);
});

test('the "eth" scheme names them eth1, eth2, ...', () => {
  assert.deepEqual(names('blue,green', { naming: 'eth' }), [
    'eth0=kube-system/pod-network',
    'eth1=pods/blue',
    'eth2=pods/green',
  ]);
});

test('the same network selected twice is attached twice under two names', () => {
  assert.deepEqual(names('blue,blue'), ['eth0=kube-system/pod-network', 'net1=pods/blue', 'net2=pods/blue']);
});

test('each planned selection carries its selection and is not the default', () => {
  const [, blue] = unwrap(plan('blue@data0'));
  assert.deepEqual(blue, {
    ifname: 'data0',
    explicitName: true,
    network: KNOWN.get('pods/blue'),
    selection: { namespace: 'pods', name: 'blue', interface: 'data0', index: 0 },
    isDefault: false,
    forceDelegate: false,
    defaultRoute: false,
  });
});

test('an explicit name later in the list is reserved before names are generated', () => {
  assert.deepEqual(names('blue,green@net1,red'), [
    'eth0=kube-system/pod-network',
    'net2=pods/blue',
    'net1=pods/green',
    'net3=pods/red',
  ]);
});

test('a generated name is numbered by its position in the plan, as Multus numbers it: a@data0, b gives data0, net2', () => {
  assert.deepEqual(names('blue@data0,green'), ['eth0=kube-system/pod-network', 'data0=pods/blue', 'net2=pods/green']);
});

test('positions count defaultNetworks before the selection, as Multus counts its delegates', () => {
  assert.deepEqual(
    names('blue,green', { sources: { selectionAnnotation: true, defaultNetworks: ['sidecar@side0'] } }),
    ['eth0=kube-system/pod-network', 'side0=default/sidecar', 'net2=pods/blue', 'net3=pods/green'],
  );
});

test('a position whose name an explicit request holds takes the next free number (Multus fails such a pod)', () => {
  assert.deepEqual(names('blue,green@net1'), ['eth0=kube-system/pod-network', 'net2=pods/blue', 'net1=pods/green']);
});

test('an explicit eth name under the eth scheme is skipped by the generator', () => {
  assert.deepEqual(names('blue,green,red@eth2', { naming: 'eth' }), [
    'eth0=kube-system/pod-network',
    'eth1=pods/blue',
    'eth3=pods/green',
    'eth2=pods/red',
  ]);
});

test('the NAD prefix annotation names its attachments prefix1, prefix2, ... with a counter per prefix; others keep their position', () => {
  assert.deepEqual(names('sriov,blue,sriov,fabric'), [
    'eth0=kube-system/pod-network',
    'vf1=pods/sriov',
    'net2=pods/blue',
    'vf2=pods/sriov',
    'fab1=pods/fabric',
  ]);
});

test('a prefix equal to the scheme prefix shares its counter, so names never repeat', () => {
  assert.deepEqual(names('blue,net-prefixed,green@net3,red'), [
    'eth0=kube-system/pod-network',
    'net1=pods/blue',
    'net2=pods/net-prefixed',
    'net3=pods/green',
    'net4=pods/red',
  ]);
});

test('an explicit interface wins over the prefix annotation', () => {
  assert.deepEqual(names('sriov@data0'), ['eth0=kube-system/pod-network', 'data0=pods/sriov']);
});

test('a prefix that makes the generated name longer than 15 bytes fails, naming the element and the annotation', () => {
  const result = plan('long-prefix');
  const error = errorOf(result);
  assert.equal(error.code, CniCode.InvalidNetworkConfig);
  assert.equal(
    error.message,
    'k8s.v1.cni.cncf.io/networks: element 1 (pods/long-prefix): the generated interface name "abcdefghijklmno1" is longer than 15 bytes',
  );
  assert.ok(!result.ok && result.error.details.includes('plexus.io/interface-prefix: "abcdefghijklmno"'));
});

test('an explicit name equal to the default interface fails, naming both', () => {
  const error = errorOf(plan('blue,green@eth0'));
  assert.equal(error.code, CniCode.InvalidNetworkConfig);
  assert.equal(
    error.message,
    'k8s.v1.cni.cncf.io/networks: element 2 (pods/green@eth0): interface "eth0" is already taken by the default network (kube-system/pod-network)',
  );
});

test('`lo` is a name no network may be attached as: code 7 at planning, before anything is made', () => {
  const error = errorOf(plan('blue@lo'));
  assert.equal(error.code, CniCode.InvalidNetworkConfig);
  assert.equal(
    error.message,
    'k8s.v1.cni.cncf.io/networks: element 1 (pods/blue@lo): interface "lo" is the pod\'s loopback, which no network may be attached as',
  );
});

test('a duplicate explicit name across defaultNetworks and the annotation fails, naming both', () => {
  const error = errorOf(
    plan('blue@side0', { sources: { selectionAnnotation: true, defaultNetworks: ['sidecar@side0'] } }),
  );
  assert.equal(error.code, CniCode.InvalidNetworkConfig);
  assert.equal(
    error.message,
    'k8s.v1.cni.cncf.io/networks: element 1 (pods/blue@side0): interface "side0" is already taken by defaultNetworks[0] (default/sidecar)',
  );
});

test('duplicate explicit names in hand-made selections fail too', () => {
  const sels: NetworkSelection[] = [
    { namespace: 'pods', name: 'blue', interface: 'x0', index: 0 },
    { namespace: 'pods', name: 'green', interface: 'x0', index: 1 },
  ];
  const error = errorOf(
    planAttachments({
      defaultNetwork: POD_NETWORK,
      selections: sels,
      resolve,
      declaredCapabilities: () => new Set(),
      options: OPTIONS,
    }),
  );
  assert.equal(
    error.message,
    'k8s.v1.cni.cncf.io/networks: element 2 (pods/green@x0): interface "x0" is already taken by element 1 (pods/blue@x0)',
  );
});

test('"ips" and "mac" are planned on a network that declares neither capability, as Multus passes them', () => {
  const planned = unwrap(plan('[{"name":"capable","ips":["10.1.0.7/24"],"mac":"02:00:00:00:00:01"}]', {}, ['dns']));
  assert.deepEqual(
    planned.map((a) => [a.ifname, a.selection?.ips, a.selection?.mac]),
    [
      ['eth0', undefined, undefined],
      ['net1', ['10.1.0.7/24'], '02:00:00:00:00:01'],
    ],
  );
});

for (const [field, capability, annotation] of [
  ['bandwidth', 'bandwidth', '[{"name":"capable","bandwidth":{"ingressRate":1000}}]'],
  ['portMappings', 'portMappings', '[{"name":"capable","portMappings":[{"hostPort":80,"containerPort":80}]}]'],
  ['infiniband-guid', 'infinibandGUID', '[{"name":"capable","infiniband-guid":"c2:11:22:33:44:55:66:77"}]'],
] as const) {
  test(`"${field}" fails when the network does not declare the "${capability}" capability`, () => {
    const result = plan(annotation, {}, ['dns']);
    const error = errorOf(result);
    assert.equal(error.code, CniCode.InvalidNetworkConfig);
    assert.equal(
      error.message,
      `k8s.v1.cni.cncf.io/networks: element 1 (pods/capable): "${field}" needs a plugin with the "${capability}" capability, and network pods/capable (macvlan) does not declare it`,
    );
    assert.ok(
      !result.ok && result.error.details === 'declared capabilities: dns',
      !result.ok ? result.error.details : '',
    );
  });

  test(`"${field}" passes when the network declares the "${capability}" capability`, () => {
    const planned = unwrap(plan(annotation, {}, [capability]));
    assert.deepEqual(
      planned.map((a) => a.ifname),
      ['eth0', 'net1'],
    );
  });
}

test('defaultNetworks are attached after the default network and before the annotation', () => {
  assert.deepEqual(
    names('blue', { sources: { selectionAnnotation: true, defaultNetworks: ['sidecar', 'pods/green'] } }),
    ['eth0=kube-system/pod-network', 'net1=default/sidecar', 'net2=pods/green', 'net3=pods/blue'],
  );
});

test('a defaultNetworks entry has no selection and is not the default network', () => {
  const [, sidecar] = unwrap(plan('', { sources: { selectionAnnotation: true, defaultNetworks: ['sidecar@side0'] } }));
  assert.deepEqual(sidecar, {
    ifname: 'side0',
    explicitName: true,
    network: KNOWN.get('default/sidecar'),
    isDefault: false,
    forceDelegate: false,
    defaultRoute: false,
  });
});

test('an invalid defaultNetworks reference fails, naming it', () => {
  const error = errorOf(plan('', { sources: { selectionAnnotation: true, defaultNetworks: ['Side_car'] } }));
  assert.equal(error.code, CniCode.InvalidNetworkConfig);
  assert.equal(
    error.message,
    'defaultNetworks[0] ("Side_car"): network name "Side_car" is not a DNS-1123 subdomain (lower case letters, digits, "-" and "."; at most 253 characters)',
  );
});

test('an unknown defaultNetworks network fails, naming the entry', () => {
  const error = errorOf(plan('', { sources: { selectionAnnotation: true, defaultNetworks: ['kube-system/absent'] } }));
  assert.equal(
    error.message,
    'defaultNetworks[0] (kube-system/absent): network kube-system/absent is not defined in /etc/plexus/networks.d',
  );
});

test('with the annotation source disabled, selections are ignored', () => {
  assert.deepEqual(names('blue,green', { sources: { selectionAnnotation: false, defaultNetworks: ['sidecar'] } }), [
    'eth0=kube-system/pod-network',
    'net1=default/sidecar',
  ]);
});

test('with the annotation source disabled, its errors (unknown networks) do not matter', () => {
  assert.deepEqual(names('absent', { sources: { selectionAnnotation: false, defaultNetworks: [] } }), [
    'eth0=kube-system/pod-network',
  ]);
});

test('the element with default-route carries the default route, and the default network does not', () => {
  const planned = unwrap(plan('[{"name":"blue"},{"name":"green","default-route":["10.2.0.1"]}]'));
  assert.deepEqual(
    planned.map((a) => [a.ifname, a.defaultRoute, a.selection?.defaultRoute]),
    [
      ['eth0', false, undefined],
      ['net1', false, undefined],
      ['net2', true, ['10.2.0.1']],
    ],
  );
});

test('without default-route the default network carries the default route', () => {
  assert.deepEqual(
    unwrap(plan('blue,green')).map((a) => a.defaultRoute),
    [true, false, false],
  );
});

test('plexus.io/delegate: "true" forces delegation for that network only', () => {
  assert.deepEqual(
    unwrap(plan('blue,delegated')).map((a) => [a.ifname, a.forceDelegate]),
    [
      ['eth0', false],
      ['net1', false],
      ['net2', true],
    ],
  );
});

test('plexus.io/delegate on the default network forces delegation for it', () => {
  const defaultNetwork = network('kube-system', 'pod-network', { 'plexus.io/delegate': 'true' });
  const [eth0] = unwrap(
    planAttachments({
      defaultNetwork,
      selections: [],
      resolve,
      declaredCapabilities: () => new Set(),
      options: OPTIONS,
    }),
  );
  assert.equal(eth0?.forceDelegate, true);
});

test('a plexus.io/delegate value other than "true" or "false" fails, naming the network', () => {
  const error = errorOf(plan('odd-delegate'));
  assert.equal(error.code, CniCode.InvalidNetworkConfig);
  assert.equal(
    error.message,
    'k8s.v1.cni.cncf.io/networks: element 1 (pods/odd-delegate): network pods/odd-delegate has plexus.io/delegate: "yes"; use "true" or "false"',
  );
});

test('an unknown network fails the plan with the lookup error, prefixed by the element', () => {
  const error = errorOf(plan('blue,team-b/absent@x0'));
  assert.equal(error.code, CniCode.InvalidNetworkConfig);
  assert.equal(
    error.message,
    'k8s.v1.cni.cncf.io/networks: element 2 (team-b/absent@x0): network team-b/absent is not defined in /etc/plexus/networks.d',
  );
});

test('a lookup failure keeps its code', () => {
  const error = errorOf(
    planAttachments({
      defaultNetwork: POD_NETWORK,
      selections: selections('blue'),
      resolve: () => err(new CniError(CniCode.TryAgainLater, 'the NAD informer has not synced')),
      declaredCapabilities: () => new Set(),
      options: OPTIONS,
    }),
  );
  assert.deepEqual(
    { code: error.code, message: error.message },
    {
      code: CniCode.TryAgainLater,
      message: 'k8s.v1.cni.cncf.io/networks: element 1 (pods/blue): the NAD informer has not synced',
    },
  );
});
