/**
 * plexusd on a real API server, as the documented RBAC lets it run (deploy/10-rbac.yaml, its own client identity),
 * through the real shim on real namespaces: pods and their annotations from the API (checked by UID), NADs from the
 * API with and without namespace isolation, the per-pod default-network override, network-status checked against the
 * pod's netns, events, a NAD created after a pod was rejected, a pod deleted while its ADD runs.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { existsSync, rmSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { DaemonFixture, getJson, type ShimOutput, type TestPod, podMaker } from '../support/daemon';
import { restoreForwardingAfterwards } from '../support/forwarding';
import {
  type ApiEvent,
  type ApiPod,
  apiPodCall,
  ApiPods,
  pluginDirWithSlowBridge,
  type StatusEntry,
} from '../support/api-pods';
import { k8sMissing, KubeApiFixture } from '../support/k8s';
import { ip, NetnsFixture, podLinks, uniquePrefix } from '../support/netns';
import { expectedPrerequisites } from '../support/prerequisites';
import { delegatedLeaseStore, testBridges } from '../support/test-bridges';
import { until } from '../support/until';

const skip = expectedPrerequisites(k8sMissing());
const prefix = uniquePrefix('pa');
const NODE = `${prefix}-node`;
const nsA = `${prefix}-a`;
const nsB = `${prefix}-b`;
const nsG = `${prefix}-g`;
const bridges = testBridges(prefix, 200);

describe('plexusd on the Kubernetes API', { skip }, () => {
  const fx = new NetnsFixture(prefix);
  let api: KubeApiFixture;
  let open: DaemonFixture;
  let isolated: DaemonFixture;
  let binDir: string;
  const newPod = podMaker(fx, prefix, ['eth0', 'net1', 'net2', 'blue0']);
  restoreForwardingAfterwards();

  // The "slow" network is delegated to the reference bridge: its host-local's default store goes afterwards.
  const removeSlowStore = delegatedLeaseStore('slow');

  before(async () => {
    for (let i = 0; i < 8; i++) fx.trackHostLink(`${prefix}b${i}`);
    binDir = pluginDirWithSlowBridge();

    api = await KubeApiFixture.startForPlexus();
    for (const ns of [nsA, nsB, nsG]) await api.ensureNamespace(ns);
    const nads: [string, string, string][] = [
      ['default', 'podnet', bridges.config('podnet', 0)],
      ['default', 'sec', bridges.config('sec', 1)],
      ['default', 'alt', bridges.config('alt', 3)],
      [nsB, 'blue', bridges.config('blue', 4)],
      [nsG, 'green', bridges.config('green', 5)],
      ['default', 'slow', bridges.config('slow', 6, { type: 'slow' })],
    ];
    for (const [ns, name, config] of nads)
      assert.equal((await api.createNad(ns, name, config)).status, 201, `${ns}/${name}`);
    const kubeconfig = api.userKubeconfig('plexus');
    const settings = { kubeconfig, nodeName: NODE, cniBinDir: binDir };
    open = new DaemonFixture('podnet', settings);
    isolated = new DaemonFixture('podnet', { ...settings, namespaceIsolation: true, globalNamespaces: nsG });
    await Promise.all([open.start(30000), isolated.start(30000)]);
  });
  after(async () => {
    await open?.stop();
    await isolated?.stop();
    await api?.stop();
    fx.cleanup();
    if (binDir) rmSync(binDir, { recursive: true, force: true });
    removeSlowStore();
  });

  const pods = (): ApiPods => new ApiPods(api, NODE, newPod);
  const apiPod = (name: string, annotations: Record<string, string>, namespace = 'default'): Promise<ApiPod> =>
    pods().create(name, annotations, namespace);
  /** The runtime's call; its own pod annotations (`runtimeAnnotations`) are what a standalone node would read. */
  const call = (
    daemon: DaemonFixture,
    command: 'ADD' | 'DEL' | 'CHECK',
    p: { pod: TestPod; args: string },
    runtimeAnnotations?: Record<string, string>,
  ): Promise<ShimOutput> =>
    apiPodCall(
      daemon,
      command,
      p,
      daemon.runtimeConfig(
        runtimeAnnotations ? { runtimeConfig: { 'io.kubernetes.cri.pod-annotations': runtimeAnnotations } } : {},
        '1.0.0',
      ),
    );
  const annotationsOf = (ns: string, name: string): Promise<Record<string, string>> => pods().annotations(ns, name);
  const statusOf = (ns: string, name: string): Promise<StatusEntry[]> => pods().status(ns, name);
  const eventsOf = (ns: string, name: string, until: (events: ApiEvent[]) => boolean): Promise<ApiEvent[]> =>
    pods().events(ns, name, until);
  const leases = (daemon: DaemonFixture): string[] =>
    ['podnet', 'sec', 'alt', 'blue', 'green', 'slow'].flatMap((n) => daemon.leases(n));

  it("takes the selection from the pod in the API, not from the runtime's copy, and DEL removes it all", async () => {
    const p = await apiPod('short', { 'k8s.v1.cni.cncf.io/networks': 'sec' });
    const out = await call(open, 'ADD', p, { 'k8s.v1.cni.cncf.io/networks': 'no-such-network' });
    assert.equal(out.code, 0, out.stdout);
    assert.match(ip('-n', p.pod.ns, '-o', '-4', 'addr', 'show', 'eth0'), bridges.subnetOf(0));
    assert.match(ip('-n', p.pod.ns, '-o', '-4', 'addr', 'show', 'net1'), bridges.subnetOf(1));
    assert.equal((await call(open, 'CHECK', p)).code, 0);
    assert.equal((await call(open, 'DEL', p)).code, 0);
    assert.deepEqual(leases(open), []);
  });

  it('reads the JSON form, with a namespace and an interface name', async () => {
    const p = await apiPod('json', {
      'k8s.v1.cni.cncf.io/networks': JSON.stringify([{ name: 'sec', namespace: 'default', interface: 'blue0' }]),
    });
    const out = await call(open, 'ADD', p);
    assert.equal(out.code, 0, out.stdout);
    assert.match(ip('-n', p.pod.ns, '-o', '-4', 'addr', 'show', 'blue0'), bridges.subnetOf(1));
    assert.equal((await call(open, 'DEL', p)).code, 0);
  });

  it('writes network-status as the netns has it, and one AddedInterface event per interface', async () => {
    const p = await apiPod('web', { 'k8s.v1.cni.cncf.io/networks': 'sec', 'team.example/owner': 'me' });
    const out = await call(open, 'ADD', p);
    assert.equal(out.code, 0, out.stdout);
    const inNetns = (ifname: string): { ip: string; cidr: string; mac: string } => ({
      ip: /inet (\S+)\//.exec(ip('-n', p.pod.ns, '-o', '-4', 'addr', 'show', ifname))![1]!,
      cidr: /inet (\S+)/.exec(ip('-n', p.pod.ns, '-o', '-4', 'addr', 'show', ifname))![1]!,
      mac: /link\/ether (\S+)/.exec(ip('-n', p.pod.ns, '-o', 'link', 'show', ifname))![1]!,
    });
    const status = await statusOf('default', 'web');
    assert.deepEqual(
      status.map((s) => [s.name, s.interface, s.default === true]),
      [
        ['default/podnet', 'eth0', true],
        ['default/sec', 'net1', false],
      ],
    );
    for (const s of status) {
      const actual = inNetns(s.interface);
      assert.deepEqual(s.ips, [actual.ip], `${s.interface}'s IPs`);
      assert.equal(s.mac, actual.mac, `${s.interface}'s MAC`);
    }
    assert.equal(
      (await annotationsOf('default', 'web'))['team.example/owner'],
      'me',
      'the pod keeps its other annotations',
    );
    const events = await eventsOf('default', 'web', (e) => e.filter((x) => x.reason === 'AddedInterface').length >= 2);
    assert.deepEqual(
      events
        .filter((e) => e.reason === 'AddedInterface')
        .map((e) => [e.type, e.message, e.involvedObject.uid])
        .sort(),
      [
        ['Normal', `Add eth0 [${inNetns('eth0').cidr}] from default/podnet`, p.uid],
        ['Normal', `Add net1 [${inNetns('net1').cidr}] from default/sec`, p.uid],
      ],
    );
    assert.equal((await call(open, 'DEL', p)).code, 0);
  });

  it('rejects a pod whose NAD does not exist yet with a Warning event, counted per retry, and attaches it once the NAD exists', async () => {
    const p = await apiPod('late', { 'k8s.v1.cni.cncf.io/networks': 'late' });
    for (let i = 0; i < 2; i++) {
      const rejected = await call(open, 'ADD', p);
      assert.equal(rejected.json?.code, 7, rejected.stdout);
      assert.match(
        String(rejected.json?.msg),
        /network default\/late is not defined: there is no such NetworkAttachmentDefinition in the API/,
      );
      assert.equal((await call(open, 'DEL', p)).code, 0, 'the runtime cleans up the failed sandbox');
    }
    const warnings = await eventsOf('default', 'late', (e) =>
      e.some((x) => x.reason === 'FailedAttachNetwork' && x.count === 2),
    );
    const warning = warnings.find((x) => x.reason === 'FailedAttachNetwork');
    assert.equal(warning?.type, 'Warning', JSON.stringify(warnings));
    assert.equal(warning?.count, 2, 'the retry counts on the same event');
    assert.match(
      warning.message,
      /^plexus: k8s\.v1\.cni\.cncf\.io\/networks: element 1 \(default\/late\): network default\/late is not defined.*\(CNI error 7\)$/,
    );

    assert.equal((await api.createNad('default', 'late', bridges.config('late', 2))).status, 201);
    let retried = await call(open, 'ADD', p);
    for (let i = 0; retried.code !== 0 && i < 50; i++) {
      await sleep(100); // the informer hears of the new NAD within a moment; the runtime retries
      retried = await call(open, 'ADD', p);
    }
    assert.equal(retried.code, 0, retried.stdout);
    assert.match(ip('-n', p.pod.ns, '-o', '-4', 'addr', 'show', 'net1'), bridges.subnetOf(2));
    assert.equal((await call(open, 'DEL', p)).code, 0);
    assert.deepEqual(open.leases('late'), []);
  });

  it('removes a pod whose NAD was deleted after it attached: DEL and CHECK work from the journal', async () => {
    assert.equal((await api.createNad('default', 'fleeting', bridges.config('fleeting', 7))).status, 201);
    const p = await apiPod('orphaned', { 'k8s.v1.cni.cncf.io/networks': 'fleeting' });
    for (let i = 0; i < 50 && !(await call(open, 'ADD', p)).json?.interfaces; i++)
      await new Promise((r) => setTimeout(r, 100));
    assert.match(ip('-n', p.pod.ns, '-o', '-4', 'addr', 'show', 'net1'), bridges.subnetOf(7));
    assert.equal(
      (
        await api.request(
          'DELETE',
          '/apis/k8s.cni.cncf.io/v1/namespaces/default/network-attachment-definitions/fleeting',
        )
      ).status,
      200,
    );
    await new Promise((r) => setTimeout(r, 500)); // the informer has dropped it
    assert.equal((await call(open, 'CHECK', p)).code, 0);
    assert.equal((await call(open, 'DEL', p)).code, 0);
    assert.deepEqual(podLinks(p.pod.ns), []);
    assert.deepEqual(open.leases('fleeting'), []);
  });

  it('lets a pod use another namespace\'s NAD, unless namespace isolation is on; "default" and the global namespaces stay open', async () => {
    const cross = await apiPod('cross', { 'k8s.v1.cni.cncf.io/networks': `${nsB}/blue` }, nsA);
    const allowed = await call(open, 'ADD', cross);
    assert.equal(allowed.code, 0, allowed.stdout);
    assert.match(ip('-n', cross.pod.ns, '-o', '-4', 'addr', 'show', 'net1'), bridges.subnetOf(4));
    assert.equal((await call(open, 'DEL', cross)).code, 0);

    const refused = await call(isolated, 'ADD', cross);
    assert.equal(refused.json?.code, 7, refused.stdout);
    assert.match(
      String(refused.json?.msg),
      new RegExp(
        `element 1 \\(${nsB}/blue\\): network ${nsB}/blue is in namespace ${nsB}, and namespace isolation is on \\(--namespace-isolation\\): pods of ${nsA} may use only networks of ${nsA} and of the global namespaces \\(default, ${nsG}\\)`,
      ),
    );
    assert.deepEqual(podLinks(cross.pod.ns), [], 'nothing was attached');
    assert.equal((await call(isolated, 'DEL', cross)).code, 0);

    const shared = await apiPod('shared', { 'k8s.v1.cni.cncf.io/networks': `default/sec,${nsG}/green` }, nsA);
    const ok = await call(isolated, 'ADD', shared);
    assert.equal(ok.code, 0, ok.stdout);
    assert.match(ip('-n', shared.pod.ns, '-o', '-4', 'addr', 'show', 'net2'), bridges.subnetOf(5));
    assert.equal((await call(isolated, 'DEL', shared)).code, 0);
    assert.deepEqual(leases(isolated), []);
  });

  it('gives a pod the default network its v1.multus-cni.io/default-network annotation names, marked default in its status', async () => {
    const p = await apiPod('override', {
      'v1.multus-cni.io/default-network': 'alt',
      'k8s.v1.cni.cncf.io/networks': 'sec',
    });
    const out = await call(open, 'ADD', p);
    assert.equal(out.code, 0, out.stdout);
    assert.match(ip('-n', p.pod.ns, '-o', '-4', 'addr', 'show', 'eth0'), bridges.subnetOf(3));
    const status = await statusOf('default', 'override');
    assert.deepEqual(
      status.map((s) => [s.name, s.interface, s.default === true]),
      [
        ['default/alt', 'eth0', true],
        ['default/sec', 'net1', false],
      ],
    );
    assert.equal((await call(open, 'DEL', p)).code, 0);

    const bad = await apiPod('override-bad', { 'v1.multus-cni.io/default-network': 'alt,sec' });
    const refused = await call(open, 'ADD', bad);
    assert.equal(refused.json?.code, 7, refused.stdout);
    assert.match(
      String(refused.json?.msg),
      /v1\.multus-cni\.io\/default-network: must name exactly one network, not 2/,
    );
    const isolatedOverride = await apiPod('override-iso', { 'v1.multus-cni.io/default-network': `${nsB}/blue` }, nsA);
    const isoRefused = await call(isolated, 'ADD', isolatedOverride);
    assert.match(
      String(isoRefused.json?.msg),
      /v1\.multus-cni\.io\/default-network: network .*\/blue is in namespace .*, and namespace isolation is on/,
    );
    for (const x of [bad, isolatedOverride]) assert.deepEqual(podLinks(x.pod.ns), []);
  });

  it("refuses a sandbox whose K8S_POD_UID is not the pod's (a stale sandbox), and one of a pod that is gone, attaching nothing", async () => {
    const p = await apiPod('stale', { 'k8s.v1.cni.cncf.io/networks': 'sec' });
    const stale = { pod: p.pod, args: p.args.replace(p.uid, '11111111-2222-3333-4444-555555555555') };
    const refused = await call(open, 'ADD', stale);
    assert.equal(refused.json?.code, 4, refused.stdout);
    assert.match(
      String(refused.json?.msg),
      new RegExp(
        `pod default/stale in the API has UID ${p.uid}, but this sandbox is for UID 11111111-2222-3333-4444-555555555555`,
      ),
    );
    const gone = { pod: newPod(), args: p.args.replace('K8S_POD_NAME=stale', 'K8S_POD_NAME=never-created') };
    const missing = await call(open, 'ADD', gone);
    assert.equal(missing.json?.code, 4, missing.stdout);
    assert.match(String(missing.json?.msg), /pod default\/never-created does not exist in the API/);
    for (const x of [stale, gone]) assert.deepEqual(podLinks(x.pod.ns), []);
    assert.deepEqual(leases(open), []);
  });

  /** The mirror pod the kubelet makes in the API for a static pod: its config.mirror annotation is the static pod's UID. */
  const mirrorPod = async (name: string, staticUid: string, networks?: string): Promise<ApiPod> =>
    apiPod(name, {
      'kubernetes.io/config.source': 'file',
      'kubernetes.io/config.hash': staticUid,
      'kubernetes.io/config.mirror': staticUid,
      ...(networks ? { 'k8s.v1.cni.cncf.io/networks': networks } : {}),
    });
  /** The sandbox of the static pod itself: K8S_POD_UID is the static pod's UID (its manifest's hash), not the API's. */
  const staticSandbox = (mirror: ApiPod, staticUid: string): { pod: TestPod; args: string } => ({
    pod: mirror.pod,
    args: mirror.args.replace(mirror.uid, staticUid),
  });

  it("attaches a static pod's sandbox with the networks of its mirror pod, and writes status and events to the mirror pod", async () => {
    const staticUid = randomBytes(16).toString('hex');
    const mirror = await mirrorPod('static-web', staticUid, 'sec');
    const sandbox = staticSandbox(mirror, staticUid);
    const out = await call(open, 'ADD', sandbox);
    assert.equal(out.code, 0, out.stdout);
    assert.match(ip('-n', sandbox.pod.ns, '-o', '-4', 'addr', 'show', 'net1'), bridges.subnetOf(1));
    const status = await statusOf('default', 'static-web');
    assert.deepEqual(
      status.map((s) => s.interface),
      ['eth0', 'net1'],
    );
    const events = await eventsOf('default', 'static-web', (e) => e.some((x) => x.reason === 'AddedInterface'));
    assert.deepEqual(
      [...new Set(events.filter((e) => e.reason === 'AddedInterface').map((e) => e.involvedObject.uid))],
      [mirror.uid],
      "events name the mirror pod's UID, as kubectl describe looks them up",
    );
    assert.equal((await call(open, 'CHECK', sandbox)).code, 0);
    assert.equal((await call(open, 'DEL', sandbox)).code, 0);
    assert.deepEqual(leases(open), []);
  });

  it('attaches a static pod without a networks annotation to the default network alone', async () => {
    const staticUid = randomBytes(16).toString('hex');
    const sandbox = staticSandbox(await mirrorPod('static-plain', staticUid), staticUid);
    const out = await call(open, 'ADD', sandbox);
    assert.equal(out.code, 0, out.stdout);
    assert.deepEqual(podLinks(sandbox.pod.ns), ['eth0']);
    assert.equal((await call(open, 'DEL', sandbox)).code, 0);
  });

  it("refuses a sandbox whose UID is neither the pod's nor the one its mirror annotation names (an earlier static pod)", async () => {
    const mirror = await mirrorPod('static-old', randomBytes(16).toString('hex'), 'sec');
    const earlier = randomBytes(16).toString('hex');
    const refused = await call(open, 'ADD', staticSandbox(mirror, earlier));
    assert.equal(refused.json?.code, 4, refused.stdout);
    assert.match(String(refused.json?.msg), new RegExp(`this sandbox is for UID ${earlier}`));
    assert.deepEqual(podLinks(mirror.pod.ns), []);
  });

  it('finishes an ADD whose pod is deleted meanwhile without writing to the new pod of that name, and DEL cleans up', async () => {
    const p = await apiPod('doomed', { 'k8s.v1.cni.cncf.io/networks': 'slow' });
    const adding = call(open, 'ADD', p);
    await sleep(300); // the "slow" plugin holds the ADD for a second
    assert.equal(
      (await api.request('DELETE', '/api/v1/namespaces/default/pods/doomed', { gracePeriodSeconds: 0 })).status,
      200,
    );
    const again = await api.createPod('default', 'doomed', { nodeName: NODE });
    assert.equal(again.status, 201);
    const out = await adding;
    assert.equal(out.code, 0, out.stdout);
    await sleep(1500);
    assert.equal(
      (await annotationsOf('default', 'doomed'))['k8s.v1.cni.cncf.io/network-status'],
      undefined,
      'the new pod of that name got no status',
    );
    assert.equal((await call(open, 'DEL', p)).code, 0);
    assert.deepEqual(podLinks(p.pod.ns), []);
    assert.deepEqual(leases(open), []);
  });

  it('keeps serving while the API server is down: cached pods are added, CHECK and DEL work from the journal, status catches up', async () => {
    const cached = await apiPod('cached', { 'k8s.v1.cni.cncf.io/networks': 'sec' });
    const other = await apiPod('other', {});
    const uncached = { pod: newPod(), args: other.args.replace('K8S_POD_NAME=other', 'K8S_POD_NAME=not-in-cache') };
    const done = await apiPod('done', { 'k8s.v1.cni.cncf.io/networks': 'sec' });
    assert.equal((await call(open, 'ADD', done)).code, 0);
    await sleep(500); // the informer has seen the new pods
    await api.stopApiServer();
    let late: DaemonFixture | undefined;
    try {
      const started = Date.now();
      const added = await call(open, 'ADD', cached);
      assert.equal(added.code, 0, added.stdout);
      assert.ok(
        Date.now() - started < 2000,
        `a cached pod's ADD does not wait for the API (${Date.now() - started} ms)`,
      );
      assert.equal((await call(open, 'CHECK', cached)).code, 0);
      const del = await call(open, 'DEL', done);
      assert.equal(del.code, 0, del.stdout);
      const miss = await call(open, 'ADD', uncached);
      assert.equal(miss.json?.code, 11, miss.stdout);
      assert.match(String(miss.json?.msg), /cannot read pod default\/not-in-cache from the Kubernetes API/);

      // A daemon started now is not ready until its caches have synced.
      late = new DaemonFixture('podnet', {
        kubeconfig: api.userKubeconfig('plexus'),
        nodeName: NODE,
        cniBinDir: binDir,
      });
      const lateReady = late.start(60000);
      // Its socket comes up before its caches (how long that takes depends on the machine's load), then answers 503.
      await until('the late daemon to serve its socket', () => existsSync(late!.socket) || undefined, 30000);
      assert.equal((await getJson(late.socket, '/readyz')).status, 503, 'not ready while the API is away');
      await api.startApiServer();
      await lateReady;
    } finally {
      await api.startApiServer().catch(() => undefined);
      await late?.stop();
    }
    const status = await statusOf('default', 'cached');
    assert.deepEqual(
      status.map((s) => s.interface),
      ['eth0', 'net1'],
      'the status written while the API was down lands when it returns',
    );
    assert.equal((await call(open, 'DEL', cached)).code, 0);
    assert.deepEqual(leases(open), []);
  });
});
