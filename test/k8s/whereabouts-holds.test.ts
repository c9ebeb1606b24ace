/**
 * Addresses Whereabouts holds are never handed out by Plexus (issue 34, item 1): on a real kube-apiserver and etcd with
 * Whereabouts' CRDs (test/fixtures/whereabouts), an IPPool and an OverlappingRangeIPReservation written as Whereabouts
 * writes them hold addresses of a range; plexusd's pods on a NAD with the same Whereabouts range never get them, a
 * request for one is refused naming the pod that holds it, and an address Whereabouts releases becomes available.
 * A plexusd whose RBAC does not grant Whereabouts' objects refuses the range's ADDs with 11 naming the permission, and
 * keeps Multus's config with the reason on /readyz.
 */
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { parseAllDocuments } from 'yaml';
import { DaemonFixture, httpGet, ROOT, podMaker, type ShimOutput, type TestPod } from '../support/daemon';
import { k8sMissing, KubeApiFixture } from '../support/k8s';
import { NetnsFixture, uniquePrefix } from '../support/netns';
import { macvlanSegment } from '../support/macvlan-segment';
import { expectedPrerequisites } from '../support/prerequisites';
import { until } from '../support/until';
import { DEBIAN_PLUGINS } from '../support/plugin-dir';

const skip = expectedPrerequisites(k8sMissing());
const prefix = uniquePrefix('wh');
const o = 100 + Math.floor(Math.random() * 100);
const segment = macvlanSegment(prefix);
const RANGE = `10.${o}.5.0/28`;
const at = (n: number): string => `10.${o}.5.${n}`;
const WB = '/apis/whereabouts.cni.cncf.io/v1alpha1/namespaces/kube-system';
const POOL_NAME = `10.${o}.5.0-28`;
const NO_WB_USER = 'plexus-no-whereabouts';
const portOf = (): number => 20000 + Math.floor(Math.random() * 20000);

const BASE = segment.nad('base', { type: 'host-local', ranges: [[{ subnet: `10.${o}.200.0/24` }]] });
const WB_NAD = segment.nad('wb', { type: 'whereabouts', range: RANGE });

/** What Whereabouts writes for a pod's address: offset from the range's first address -> {id, podref, ifname}. */
const allocation = (pod: string): Record<string, string> => ({
  id: `${pod}-cid`,
  podref: `default/${pod}`,
  ifname: 'net1',
});

type Pod = TestPod;

/** plexusd on its own node, with Multus's config in its conf dir and takeOverMultus set. */
function nodeDaemon(api: KubeApiFixture, user: string, node: string, port: number): DaemonFixture {
  const daemon = new DaemonFixture('base', {
    kubeconfig: api.userKubeconfig(user),
    nodeName: node,
    cniBinDir: DEBIAN_PLUGINS,
    orphanSweepSeconds: 0,
    metricsAddress: `127.0.0.1:${port}`,
  });
  const confDir = join(daemon.dir, 'net.d');
  mkdirSync(confDir, { recursive: true });
  writeFileSync(
    join(confDir, '00-multus.conf'),
    JSON.stringify({ cniVersion: '1.0.0', name: 'multus', type: 'multus' }),
  );
  daemon.addSettings({ installCniConfig: join(confDir, '00-plexus.conflist'), takeOverMultus: true });
  return daemon;
}

async function takeoverCheck(port: number): Promise<{ status: number; takeover: string }> {
  const got = await httpGet({ host: '127.0.0.1', port, path: '/readyz' });
  const checks = (JSON.parse(got.body) as { checks?: Record<string, string> }).checks ?? {};
  return { status: got.status, takeover: checks.multusTakeover ?? 'ok' };
}

/** plexusd's ClusterRole of deploy/10-rbac.yaml less its rules on whereabouts.cni.cncf.io, bound to `user`. */
async function grantAllButWhereabouts(api: KubeApiFixture, user: string): Promise<void> {
  const docs = parseAllDocuments(readFileSync(join(ROOT, 'deploy/10-rbac.yaml'), 'utf8')).map(
    (d) => d.toJSON() as { kind: string; rules?: { apiGroups: string[] }[] },
  );
  const role = docs.find((d) => d.kind === 'ClusterRole');
  assert.ok(role?.rules);
  const rules = role.rules.filter((r) => !r.apiGroups.includes('whereabouts.cni.cncf.io'));
  const rbac = '/apis/rbac.authorization.k8s.io/v1';
  const ref = (kind: string) => ({ apiGroup: 'rbac.authorization.k8s.io', kind, name: user });
  const subjects = [{ apiGroup: 'rbac.authorization.k8s.io', kind: 'User', name: user }];
  for (const [path, body] of [
    [
      `${rbac}/clusterroles`,
      { apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'ClusterRole', metadata: { name: user }, rules },
    ],
    [
      `${rbac}/clusterrolebindings`,
      {
        apiVersion: 'rbac.authorization.k8s.io/v1',
        kind: 'ClusterRoleBinding',
        metadata: { name: user },
        roleRef: ref('ClusterRole'),
        subjects,
      },
    ],
    [
      `${rbac}/namespaces/kube-system/rolebindings`,
      {
        apiVersion: 'rbac.authorization.k8s.io/v1',
        kind: 'RoleBinding',
        metadata: { name: user },
        roleRef: { ...ref('Role'), name: 'plexus' },
        subjects,
      },
    ],
  ] as const) {
    const r = await api.request('POST', path, body);
    assert.equal(r.status, 201, JSON.stringify(r.body));
  }
}

describe('addresses Whereabouts holds', { skip }, () => {
  const fx = new NetnsFixture(prefix);
  const port = portOf();
  let api: KubeApiFixture;
  let node: DaemonFixture;

  before(async () => {
    segment.create(fx);
    api = await KubeApiFixture.startForPlexus();
    await api.installCrds('test/fixtures/whereabouts/crds.yaml');
    await api.ensureNamespace('kube-system');
    const pool = {
      apiVersion: 'whereabouts.cni.cncf.io/v1alpha1',
      kind: 'IPPool',
      metadata: { name: POOL_NAME, namespace: 'kube-system' },
      spec: { range: RANGE, allocations: { '2': allocation('wb-a'), '3': allocation('wb-b') } },
    };
    assert.equal((await api.request('POST', `${WB}/ippools`, pool)).status, 201);
    const reservation = {
      apiVersion: 'whereabouts.cni.cncf.io/v1alpha1',
      kind: 'OverlappingRangeIPReservation',
      metadata: { name: at(4), namespace: 'kube-system' },
      spec: { containerid: 'wb-c-cid', podref: 'default/wb-c', ifname: 'net1' },
    };
    assert.equal((await api.request('POST', `${WB}/overlappingrangeipreservations`, reservation)).status, 201);
    for (const [name, config] of Object.entries({ base: BASE, wb: WB_NAD }))
      assert.equal((await api.createNad('default', name, config)).status, 201);
    await api.createNode(`${prefix}-x`);
    node = nodeDaemon(api, 'plexus', `${prefix}-x`, port);
    await node.start(60000);
  });
  after(async () => {
    await node?.stop();
    await api?.stop();
    fx.cleanup();
  });

  const newPod = podMaker(fx, prefix, []);
  const call = (daemon: DaemonFixture, command: 'ADD' | 'DEL', pod: Pod, networks: string): Promise<ShimOutput> =>
    daemon.cni({
      command,
      containerId: pod.cid,
      netns: pod.netns,
      ifname: 'eth0',
      args: `IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_INFRA_CONTAINER_ID=${pod.cid}`,
      config: daemon.runtimeConfig(
        { runtimeConfig: { 'io.kubernetes.cri.pod-annotations': { 'k8s.v1.cni.cncf.io/networks': networks } } },
        '1.0.0',
      ),
    });
  const wbAddressOf = (out: ShimOutput): string | undefined =>
    ((out.json?.ips as { address: string }[] | undefined) ?? [])
      .map((x) => x.address.split('/')[0]!)
      .find((a) => a.startsWith(`10.${o}.5.`));
  const asking = (address: string): string => JSON.stringify([{ name: 'wb', ips: [`${address}/28`] }]);

  it('takes the node over from Multus once it has read what Whereabouts holds', async () => {
    const multusConf = join(node.dir, 'net.d', '00-multus.conf');
    await until('the takeover', () => !existsSync(multusConf) || undefined, 20000);
    assert.deepEqual(await takeoverCheck(port), { status: 200, takeover: 'ok' });
  });

  it('gives no pod an address an IPPool allocation or an overlapping-range reservation holds', async () => {
    const given: string[] = [];
    for (let i = 0; i < 5; i++) {
      const pod = newPod();
      const out = await call(node, 'ADD', pod, 'wb');
      assert.equal(out.code, 0, out.stdout);
      given.push(wbAddressOf(out)!);
    }
    for (const held of [at(2), at(3), at(4)])
      assert.ok(!given.includes(held), `${held} given to a pod: ${given.join(', ')}`);
    assert.equal(new Set(given).size, given.length, `one address on two pods: ${given.join(', ')}`);
  });

  it('refuses a request for an address an IPPool holds with 101, naming the pod that holds it', async () => {
    const pod = newPod();
    const out = await call(node, 'ADD', pod, asking(at(2)));
    assert.equal(out.json?.code, 101, out.stdout);
    assert.match(String(out.json?.msg), /default\/wb-a/);
    assert.equal((await call(node, 'DEL', pod, asking(at(2)))).code, 0);
  });

  it('gives an address once Whereabouts has released it (its allocation removed)', async () => {
    const got = await api.request('GET', `${WB}/ippools/${POOL_NAME}`);
    const pool = got.body as { spec: { allocations: Record<string, unknown> } };
    delete pool.spec.allocations['2'];
    assert.equal((await api.request('PUT', `${WB}/ippools/${POOL_NAME}`, pool)).status, 200);
    const out = await until(
      'the released address to be given',
      async () => {
        const pod = newPod();
        const r = await call(node, 'ADD', pod, asking(at(2)));
        if (r.code === 0) return r;
        assert.equal((await call(node, 'DEL', pod, asking(at(2)))).code, 0);
        return undefined;
      },
      10000,
    );
    assert.equal(wbAddressOf(out), at(2));
  });

  it('without RBAC for Whereabouts objects: ADD is 11 naming the permission, and Multus keeps the node', async () => {
    const other = `${prefix}-y`;
    const otherPort = portOf();
    await grantAllButWhereabouts(api, NO_WB_USER);
    await api.createNode(other);
    const refused = nodeDaemon(api, NO_WB_USER, other, otherPort);
    try {
      await refused.start(60000);
      const pod = newPod();
      const out = await call(refused, 'ADD', pod, 'wb');
      assert.equal(out.json?.code, 11, out.stdout);
      assert.match(String(out.json?.msg), /ippools/);
      assert.match(String(out.json?.msg) + String(out.json?.details), /whereabouts\.cni\.cncf\.io/);
      assert.equal((await call(refused, 'DEL', pod, 'wb')).code, 0);
      const check = await until('the takeover to say why it waits', async () => {
        const r = await takeoverCheck(otherPort);
        return r.takeover !== 'ok' ? r : undefined;
      });
      assert.equal(check.status, 503);
      assert.match(check.takeover, /Whereabouts/);
      assert.match(check.takeover, /ippools/);
      assert.ok(existsSync(join(refused.dir, 'net.d', '00-multus.conf')), 'the node keeps running Multus');
      assert.match(refused.stderr, /Multus's config stays/);
    } finally {
      await refused.stop();
    }
  });
});
