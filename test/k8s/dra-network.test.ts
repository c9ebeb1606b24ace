/**
 * A network device claimed through DRA becomes the pod's interface, on a real node (kube-apiserver, scheduler,
 * controller-manager, kubelet, containerd; plexus-cni is the node's CNI): docs/dra.md's example (a NAD, a
 * ResourceClaimTemplate for a plexus.io host device naming that NAD, a pod) runs as written, the device is in the
 * pod's netns in the same journaled transaction as eth0, the claim's status shows what the network-status annotation
 * shows, and the device is freed when the pod goes. Then each bad case: config that does not parse, a NAD that does
 * not exist, a NAD namespace isolation forbids, a device allocated twice, plexusd restarted between Prepare and ADD, a
 * claim deleted under a running pod, an attach that fails, a restarted kubelet, stale records, a claim two pods share;
 * nothing leaked.
 * The node is a single-node cluster's (its own network and mount namespaces, plexusd inside it); veth ends the test
 * creates in the node's network namespace stand in for NICs, and the node's namespace is the "host" a device leaves
 * for a pod and comes back to.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it, type TestContext } from 'node:test';
import { ApiPods, type ApiEvent } from '../support/api-pods';
import { DaemonFixture } from '../support/daemon';
import {
  claimingPod,
  claimSpec,
  create,
  docExample,
  draSettings,
  draNodeMissing,
  draRegistrations,
  draTooOld,
  hostDeviceTemplate,
  installDra,
  RESOURCE_API,
} from '../support/dra-node';
import { plexusConflist } from '../support/kube-node';
import { SingleNode } from '../support/cluster/single-node';
import { addNicStandIn, ip, ipTry, uniquePrefix } from '../support/netns';
import { until } from '../support/until';
import { expectedPrerequisites, optionalSkip } from '../support/prerequisites';
import { podnetBridge } from '../support/k8s';
import { plexusPluginDir } from '../support/plugin-dir';

const missing = draNodeMissing();
const skip = expectedPrerequisites(missing) || optionalSkip(missing ? undefined : draTooOld());
const prefix = uniquePrefix('drn');
const NIC = 'plexus.io/fastnic';
const NICS = [0, 1, 2].map((i) => `${prefix}n${i}`);
const PEERS = [0, 1, 2].map((i) => `${prefix}p${i}`);
const NS = 'default';
const OTHER_NS = `${prefix}-other`;
const B = 100 + Math.floor(Math.random() * 50);
const C = Math.floor(Math.random() * 200);

interface Claim {
  metadata: { name: string; uid: string; deletionTimestamp?: string };
  status?: {
    allocation?: unknown;
    devices?: {
      driver: string;
      pool: string;
      device: string;
      conditions?: { type: string; status: string; reason: string; message: string }[];
      networkData?: { interfaceName?: string; ips?: string[]; hardwareAddress?: string };
    }[];
  };
}
interface Slice {
  spec: { driver: string; devices: { name: string }[] };
}

describe('a network device claimed through DRA on a real node', { skip }, () => {
  let node: SingleNode;
  let daemon: DaemonFixture;
  let work: string;
  let binDir: string;
  let pods: ApiPods;
  const macs = new Map<string, string>();

  const call = (method: string, path: string, body?: unknown): Promise<{ status: number; body: unknown }> =>
    node.call(method, path, body);
  const claimFiles = (): string[] => {
    const dir = join(daemon.stateDir, 'dra', 'claims');
    return existsSync(dir) ? readdirSync(dir).filter((f) => f.endsWith('.json')) : [];
  };
  const phase = async (name: string, ns = NS): Promise<string | undefined> =>
    (await node.pod(ns, name).catch(() => undefined))?.status?.phase;
  const events = async (name: string, ns = NS): Promise<string[]> => {
    const r = await call(
      'GET',
      `/api/v1/namespaces/${ns}/events?fieldSelector=${encodeURIComponent(`involvedObject.name=${name}`)}`,
    );
    return ((r.body as { items?: ApiEvent[] }).items ?? []).map((e) => `${e.reason}: ${e.message}`);
  };
  const running = async (name: string, ns = NS, timeoutMs = 90000): Promise<void> => {
    await until(
      `pod ${name} Running`,
      async () => ((await phase(name, ns)) === 'Running' ? true : undefined),
      timeoutMs,
      100,
    ).catch(async (e: Error) =>
      assert.fail(`${e.message}: ${(await events(name, ns)).join(' | ')}\n${node.logTail('kubelet', 15)}`),
    );
  };
  const eventSaying = (name: string, text: string | RegExp, ns = NS): Promise<string[]> =>
    until(
      `an event of ${name} saying ${String(text)}`,
      async () => {
        const all = await events(name, ns);
        return all.some((e) => (typeof text === 'string' ? e.includes(text) : text.test(e))) ? all : undefined;
      },
      60000,
      250,
    );
  const deletePod = async (name: string, ns = NS): Promise<void> => {
    await call('DELETE', `/api/v1/namespaces/${ns}/pods/${name}`);
    await until(
      `pod ${name} gone`,
      async () => ((await call('GET', `/api/v1/namespaces/${ns}/pods/${name}`)).status === 404 ? true : undefined),
      60000,
      100,
    );
  };
  /** The claim a pod's template made (status.resourceClaimStatuses), as the API has it now. */
  const claimOf = async (pod: string, ns = NS): Promise<Claim> => {
    const name = await until(`the claim of ${pod}`, async () => {
      const p = (await call('GET', `/api/v1/namespaces/${ns}/pods/${pod}`)).body as {
        status?: { resourceClaimStatuses?: { resourceClaimName?: string }[] };
      };
      return p.status?.resourceClaimStatuses?.[0]?.resourceClaimName;
    });
    return (await call('GET', `${RESOURCE_API}/namespaces/${ns}/resourceclaims/${name}`)).body as Claim;
  };
  const podLink = async (pod: string, ifname: string): Promise<string> => {
    const netns = await node.podNetns(NS, pod);
    return (
      execFileSync('nsenter', [`--net=${netns}`, 'ip', '-o', 'addr', 'show', 'dev', ifname], { encoding: 'utf8' }) +
      execFileSync('nsenter', [`--net=${netns}`, 'ip', '-o', 'link', 'show', 'dev', ifname], { encoding: 'utf8' })
    );
  };
  /** The pods a test makes go when it ends, passed or not, so the next test finds its device free. */
  const owned = (t: TestContext, ...names: string[]): void =>
    t.after(async () => {
      for (const name of names) await deletePod(name).catch(() => undefined);
    });
  /** Whether a link is in the node's network namespace (where the devices live when no pod holds them). */
  const onHost = (name: string): boolean => ipTry('-n', node.netns, 'link', 'show', 'dev', name).status === 0;
  const byName = (ifname: string): string => `device.attributes["plexus.io"].interfaceName == "${ifname}"`;
  const registrations = (): number => draRegistrations(daemon);
  /**
   * How long a pod may wait when one of its Prepare calls failed: the 1.35 kubelet retries only at its next resync
   * (syncFrequency 1 min with 0.5 jitter: 60-90 s; kubernetes/kubernetes#139836, fixed after 1.35.6), plus the
   * sandbox's start under a loaded suite.
   */
  const AFTER_KUBELET_RESYNC_MS = 130000;
  /** A pod whose Prepare never failed is Running well before the kubelet's first resync could have retried one. */
  const WITHOUT_RETRY_MS = 45000;

  before(async () => {
    work = mkdtempSync(join(tmpdir(), 'plexus-drn-'));
    binDir = join(work, 'bin');
    plexusPluginDir(binDir);
    writeFileSync(
      join(work, 'resources.yaml'),
      JSON.stringify({ resources: [{ name: NIC, kind: 'host-device', devices: NICS, offer: ['dra'] }] }),
    );
    daemon = new DaemonFixture('podnet');
    node = await SingleNode.start({ cniBinDir: binDir, cniConfList: plexusConflist(daemon.socket) });
    daemon.launcher = node.launcher;
    // The NICs' stand-ins are the node's: they go with its network namespace.
    for (const [i, name] of NICS.entries()) {
      addNicStandIn(node.netns, name, PEERS[i]!);
      macs.set(name, /link\/ether (\S+)/.exec(ip('-n', node.netns, '-o', 'link', 'show', 'dev', name))![1]!);
    }
    await installDra(node);
    await node.api.ensureNamespace(OTHER_NS);
    const podnet = podnetBridge(`${prefix}b0`, `10.${B}.${C}.0/24`);
    assert.equal((await node.api.createNad(NS, 'podnet', podnet)).status, 201);
    const hostDevice = (name: string, ipam: unknown): string =>
      JSON.stringify({ cniVersion: '1.0.0', name, type: 'host-device', capabilities: { ips: true }, ipam });
    assert.equal((await node.api.createNad(OTHER_NS, 'fenced', hostDevice('fenced', { type: 'static' }))).status, 201);
    // Addresses of a /30 range: a claim asking for one outside it fails at attach, after Prepare took it.
    assert.equal(
      (
        await node.api.createNad(
          NS,
          'narrow',
          hostDevice('narrow', { type: 'host-local', ranges: [[{ subnet: `10.${B}.${C + 2}.0/30` }]] }),
        )
      ).status,
      201,
    );
    daemon.addSettings({ ...draSettings(node, work, binDir), namespaceIsolation: true, logLevel: 'info' });
    pods = new ApiPods(node.api, node.nodeName, () => {
      throw new Error('sandboxes come from the kubelet here');
    });
    await daemon.start(30000);
    await until("the kubelet's registration of plexus.io", () => (registrations() > 0 ? true : undefined), 30000, 100);
  });

  after(async () => {
    await node?.stop({ runtimeStopped: () => daemon?.stop() });
    await daemon?.stop();
    if (work) rmSync(work, { recursive: true, force: true });
  });

  it("docs/dra.md's example runs as written: the claimed device is net1 in the pod, in one transaction with eth0", async () => {
    const startedAt = Date.now();
    for (const object of docExample('host-device')) await create(node, object);
    await running('fast-pod');
    console.log(`# docs/dra.md example: pod created to Running in ${Date.now() - startedAt} ms`);
    const record = JSON.parse(readFileSync(join(daemon.stateDir, 'dra', 'claims', claimFiles()[0]!), 'utf8')) as {
      devices: { device: string }[];
    };
    const device = record.devices[0]!.device;
    assert.ok(NICS.includes(device), device);
    const link = await podLink('fast-pod', 'net1');
    assert.match(link, /inet 10\.1\.0\.5\/24/);
    assert.ok(link.includes(`link/ether ${macs.get(device)}`), `net1 is ${device}: ${link}`);
    assert.equal(onHost(device), false, "the device left the node's namespace");
    const status = await pods.status(NS, 'fast-pod', (s) => s.length === 2);
    assert.deepEqual(
      status.map((s) => `${s.name}@${s.interface}`),
      ['default/podnet@eth0', 'default/fast@net1'],
    );
    const journal = daemon.journalFiles();
    assert.equal(journal.length, 1, `one journal record for the pod: ${journal.join(', ')}`);
    const lines = readFileSync(join(daemon.stateDir, 'journal', journal[0]!), 'utf8');
    assert.match(
      lines.split('\n')[0]!,
      /default\/podnet.*default\/fast|default\/fast.*default\/podnet/,
      'both networks in its begin line',
    );
  });

  it("the claim's status.devices[] has the interface name, IPs and MAC of the network-status annotation, and Ready", async () => {
    const status = await pods.status(NS, 'fast-pod', (s) => s.length === 2);
    const net1 = status.find((s) => s.interface === 'net1')!;
    const claim = await until("the claim's device status", async () => {
      const c = await claimOf('fast-pod');
      return c.status?.devices?.length ? c : undefined;
    }).catch((e: Error) =>
      assert.fail(
        `${e.message}; plexusd: ${daemon.stderr
          .split('\n')
          .filter((l) => /claim/i.test(l))
          .slice(-5)
          .join('\n')}`,
      ),
    );
    const [entry] = claim.status!.devices!;
    assert.equal(entry!.driver, 'plexus.io');
    assert.deepEqual(entry!.networkData, {
      interfaceName: 'net1',
      ips: net1.ips.map((ip) => `${ip}/24`),
      hardwareAddress: net1.mac,
    });
    assert.deepEqual(
      entry!.conditions?.map((c) => `${c.type}=${c.status}`),
      ['Ready=True'],
    );
  });

  it("the device stays in the node's ResourceSlice while the pod holds it, and is freed when the pod goes", async (t) => {
    owned(t, 'fast-pod', 'again');
    const record = JSON.parse(readFileSync(join(daemon.stateDir, 'dra', 'claims', claimFiles()[0]!), 'utf8')) as {
      devices: { device: string }[];
    };
    const device = record.devices[0]!.device;
    const slice = await call(
      'GET',
      `${RESOURCE_API}/resourceslices?fieldSelector=${encodeURIComponent(`spec.nodeName=${node.nodeName}`)}`,
    );
    const published = (
      (slice.body as { items: Slice[] }).items.find((s) => s.spec.driver === 'plexus.io')?.spec.devices ?? []
    ).map((d) => d.name);
    assert.deepEqual(published, NICS, 'held devices are published too');
    await deletePod('fast-pod');
    await until(
      'the claim unprepared (record removed)',
      () => (claimFiles().length === 0 ? true : undefined),
      30000,
      100,
    );
    assert.ok(onHost(device), "the device is back in the node's namespace");
    // Allocatable again: a pod that asks for exactly that device runs.
    await create(
      node,
      hostDeviceTemplate(NS, 'again', byName(device), { network: 'fast', interfaceName: 'net1', ips: ['10.1.0.6/24'] }),
    );
    await create(node, claimingPod(NS, 'again', { template: 'again' }));
    await running('again');
    assert.match(await podLink('again', 'net1'), /inet 10\.1\.0\.6\/24/);
    await deletePod('again');
    await until('the record removed', () => (claimFiles().length === 0 ? true : undefined), 30000, 100);
  });

  it('opaque config that does not parse: the pod does not start, its event names the field, nothing is recorded', async (t) => {
    owned(t, 'badcfg');
    await create(
      node,
      hostDeviceTemplate(NS, 'badcfg', byName(NICS[1]!), { network: 'fast', ips: ['not-an-address'] }),
    );
    await create(node, claimingPod(NS, 'badcfg', { template: 'badcfg' }));
    const all = await eventSaying('badcfg', 'ips[0]: must be an address with its prefix');
    assert.ok(
      all.some(
        (e) =>
          e.startsWith('FailedPrepareDynamicResources') && e.includes('opaque config for plexus.io from the claim'),
      ),
      all.join(' | '),
    );
    assert.notEqual(await phase('badcfg'), 'Running');
    assert.deepEqual(claimFiles(), []);
    await deletePod('badcfg');
  });

  it("a NAD that does not exist: Prepare refuses with the NAD named; once it exists the kubelet's retry starts the pod", async (t) => {
    owned(t, 'nonad');
    await create(node, hostDeviceTemplate(NS, 'nonad', byName(NICS[1]!), { network: 'later', interfaceName: 'net1' }));
    await create(node, claimingPod(NS, 'nonad', { template: 'nonad' }));
    await eventSaying(
      'nonad',
      'network default/later is not defined: there is no such NetworkAttachmentDefinition in the API',
    );
    assert.deepEqual(claimFiles(), []);
    assert.equal(
      (
        await node.api.createNad(
          NS,
          'later',
          JSON.stringify({ cniVersion: '1.0.0', name: 'later', type: 'host-device' }),
        )
      ).status,
      201,
    );
    // The refused Prepare is retried only at the kubelet's next resync.
    await running('nonad', NS, AFTER_KUBELET_RESYNC_MS);
    assert.match(await podLink('nonad', 'net1'), /net1/);
    await deletePod('nonad');
    await until('the record removed', () => (claimFiles().length === 0 ? true : undefined), 30000, 100);
  });

  it('a NAD of a namespace the pod may not use (namespace isolation): refused with the rule, nothing recorded', async (t) => {
    owned(t, 'fenced');
    await create(node, hostDeviceTemplate(NS, 'fenced', byName(NICS[1]!), { network: `${OTHER_NS}/fenced` }));
    await create(node, claimingPod(NS, 'fenced', { template: 'fenced' }));
    await eventSaying(
      'fenced',
      `network ${OTHER_NS}/fenced is in namespace ${OTHER_NS}, and namespace isolation is on`,
    );
    assert.deepEqual(claimFiles(), []);
    await deletePod('fenced');
  });

  it('a device allocated to a second claim while the first holds it: Prepare refuses, naming the claim that holds it', async (t) => {
    owned(t, 'holder', 'twice');
    t.after(async () => {
      await call('DELETE', `${RESOURCE_API}/namespaces/${NS}/resourceclaims/twice`);
      await node.call(
        'PATCH',
        `${RESOURCE_API}/namespaces/${NS}/resourceclaims/twice`,
        { metadata: { finalizers: null } },
        'application/merge-patch+json',
      );
    });
    await create(
      node,
      hostDeviceTemplate(NS, 'holder', byName(NICS[2]!), {
        network: 'fast',
        interfaceName: 'net1',
        ips: ['10.1.0.7/24'],
      }),
    );
    await create(node, claimingPod(NS, 'holder', { template: 'holder' }));
    await running('holder');
    const first = await claimOf('holder');
    // A second claim with the first's allocation written into its status: what a second scheduler (or a bug) would do.
    await create(node, {
      apiVersion: 'resource.k8s.io/v1',
      kind: 'ResourceClaim',
      metadata: { name: 'twice', namespace: NS, finalizers: ['resource.kubernetes.io/delete-protection'] },
      spec: claimSpec(byName(NICS[2]!), { network: 'fast', ips: ['10.1.0.8/24'] }),
    });
    const twice = (await call('GET', `${RESOURCE_API}/namespaces/${NS}/resourceclaims/twice`)).body as Claim &
      Record<string, unknown>;
    const put = await call('PUT', `${RESOURCE_API}/namespaces/${NS}/resourceclaims/twice/status`, {
      ...twice,
      status: { allocation: first.status!.allocation },
    });
    assert.equal(put.status, 200, JSON.stringify(put.body).slice(0, 400));
    await create(node, claimingPod(NS, 'twice', { claim: 'twice' }));
    await eventSaying(
      'twice',
      `is already prepared for ResourceClaim ${NS}/${first.metadata.name} (${first.metadata.uid})`,
    );
    assert.equal(claimFiles().length, 1, "only the holder's record");
    assert.notEqual(await phase('twice'), 'Running');
    await deletePod('twice');
    await deletePod('holder');
    await until("the holder's record removed", () => (claimFiles().length === 0 ? true : undefined), 30000, 100);
  });

  it("plexusd restarted between Prepare and the pod's ADD: the restarted daemon attaches the device from the record", async (t) => {
    owned(t, 'restart');
    await create(
      node,
      hostDeviceTemplate(NS, 'restart', byName(NICS[0]!), {
        network: 'fast',
        interfaceName: 'net1',
        ips: ['10.1.0.9/24'],
      }),
    );
    await create(node, claimingPod(NS, 'restart', { template: 'restart' }));
    // Stopped the moment the claim is recorded (well before containerd asks for the sandbox's network), then killed.
    await until('the claim recorded', () => (claimFiles().length === 1 ? true : undefined), 60000, 5);
    process.kill(daemon.pid!, 'SIGSTOP');
    const journalBefore = daemon.journalFiles().length;
    await daemon.kill('SIGKILL');
    assert.equal(journalBefore, 0, 'no ADD had reached plexusd');
    await daemon.start(30000);
    // The kubelet's Prepare is usually still under way when plexusd is stopped (the record is written before the
    // answer): it fails, and the kubelet tries again only at its next resync, whatever plexusd does. When the answer
    // got out first, the pod runs at once.
    const restartedAt = Date.now();
    await running('restart', NS, AFTER_KUBELET_RESYNC_MS);
    console.log(`# restarted between Prepare and ADD: Running ${Date.now() - restartedAt} ms after plexusd was ready`);
    assert.match(await podLink('restart', 'net1'), /inet 10\.1\.0\.9\/24/);
    await deletePod('restart');
    await until('the record removed', () => (claimFiles().length === 0 ? true : undefined), 30000, 100);
    assert.ok(onHost(NICS[0]!));
  });

  it('a claim deleted while its pod runs: the pod keeps its interface, and its deletion frees the device', async (t) => {
    owned(t, 'doomed');
    await create(
      node,
      hostDeviceTemplate(NS, 'doomed', byName(NICS[0]!), {
        network: 'fast',
        interfaceName: 'net1',
        ips: ['10.1.0.10/24'],
      }),
    );
    await create(node, claimingPod(NS, 'doomed', { template: 'doomed' }));
    await running('doomed');
    const claim = await claimOf('doomed');
    const r = await call('DELETE', `${RESOURCE_API}/namespaces/${NS}/resourceclaims/${claim.metadata.name}`);
    assert.equal(r.status, 200, JSON.stringify(r.body).slice(0, 300));
    const deleting = (await call('GET', `${RESOURCE_API}/namespaces/${NS}/resourceclaims/${claim.metadata.name}`))
      .body as Claim;
    assert.ok(deleting.metadata.deletionTimestamp, 'kept (deleting) while the pod uses it');
    await new Promise((resolve) => setTimeout(resolve, 2000));
    assert.equal(await phase('doomed'), 'Running');
    assert.match(await podLink('doomed', 'net1'), /inet 10\.1\.0\.10\/24/);
    await deletePod('doomed');
    await until('the record removed', () => (claimFiles().length === 0 ? true : undefined), 30000, 100);
    await until(
      'the claim gone',
      async () =>
        (await call('GET', `${RESOURCE_API}/namespaces/${NS}/resourceclaims/${claim.metadata.name}`)).status === 404
          ? true
          : undefined,
      30000,
      200,
    );
    assert.ok(onHost(NICS[0]!));
  });

  it("an attach that fails after Prepare: the claim's Ready is False with the error, and the pod has the event", async (t) => {
    owned(t, 'narrow');
    await create(
      node,
      hostDeviceTemplate(NS, 'narrow', byName(NICS[1]!), {
        network: 'narrow',
        interfaceName: 'net1',
        ips: [`10.${B}.${C + 3}.5/24`],
      }),
    );
    await create(node, claimingPod(NS, 'narrow', { template: 'narrow' }));
    await eventSaying('narrow', /^FailedAttachNetwork: plexus: .*10\.\d+\.\d+\.5/);
    const claim = await until("Ready=False in the claim's status", async () => {
      const c = await claimOf('narrow');
      return c.status?.devices?.[0]?.conditions?.some((x) => x.type === 'Ready' && x.status === 'False')
        ? c
        : undefined;
    });
    const ready = claim.status!.devices![0]!.conditions!.find((x) => x.type === 'Ready')!;
    assert.equal(ready.reason, 'NetworkAttachFailed');
    assert.match(ready.message, /10\.\d+\.\d+\.5/);
    assert.equal(claim.status!.devices![0]!.networkData, undefined);
    assert.ok(onHost(NICS[1]!), "the failed ADD gave the device back to the node's namespace");
    await deletePod('narrow');
    await until('the record removed', () => (claimFiles().length === 0 ? true : undefined), 30000, 100);
  });

  it('a restarted kubelet registers plexus.io again; a pod running across the restart is still freed when it goes', async (t) => {
    owned(t, 'kubelet');
    await create(
      node,
      hostDeviceTemplate(NS, 'kubelet', byName(NICS[2]!), {
        network: 'fast',
        interfaceName: 'net1',
        ips: ['10.1.0.11/24'],
      }),
    );
    await create(node, claimingPod(NS, 'kubelet', { template: 'kubelet' }));
    await running('kubelet');
    const before = registrations();
    await node.restartKubelet();
    await until('a new registration', () => (registrations() > before ? true : undefined), 60000, 200);
    assert.match(await podLink('kubelet', 'net1'), /inet 10\.1\.0\.11\/24/);
    await deletePod('kubelet');
    await until('the record removed', () => (claimFiles().length === 0 ? true : undefined), 30000, 100);
    assert.ok(onHost(NICS[2]!));
  });

  it('a stale record (its claim gone while plexusd was away) is released at start: its device can be claimed again', async (t) => {
    owned(t, 'afterghost');
    await daemon.kill('SIGTERM');
    const ghost = '00000000-0000-4000-8000-00000000dead';
    const pool = `${node.nodeName}/${NIC}`;
    writeFileSync(
      join(daemon.stateDir, 'dra', 'claims', `${ghost}.json`),
      JSON.stringify({
        v: 1,
        uid: ghost,
        namespace: NS,
        name: 'ghost',
        pods: [{ name: 'ghost-pod', uid: '00000000-0000-4000-8000-00000000beef' }],
        devices: [
          {
            request: 'nic',
            pool,
            device: NICS[1],
            resourceName: NIC,
            kind: 'host-device',
            deviceID: NICS[1],
            network: { namespace: NS, name: 'fast' },
          },
        ],
        preparedAt: new Date().toISOString(),
      }),
    );
    const before = registrations();
    await daemon.start(30000);
    await until('the stale record released', () => (claimFiles().length === 0 ? true : undefined), 30000, 100);
    assert.match(daemon.stderr, /stale prepared claim released/);
    // The plugin is served before the stale look ends; the kubelet registers it within its second's reconcile.
    await until('the kubelet registered the restarted plexusd', () => (registrations() > before ? true : undefined));
    await create(
      node,
      hostDeviceTemplate(NS, 'afterghost', byName(NICS[1]!), {
        network: 'fast',
        interfaceName: 'net1',
        ips: ['10.1.0.12/24'],
      }),
    );
    await create(node, claimingPod(NS, 'afterghost', { template: 'afterghost' }));
    // Its first Prepare succeeds: no kubelet retry, so no 60-90 s wait.
    await running('afterghost', NS, WITHOUT_RETRY_MS);
    await deletePod('afterghost');
    await until('the record removed', () => (claimFiles().length === 0 ? true : undefined), 30000, 100);
  });

  it("a claim two pods share: the second pod's ADD fails naming the first, which keeps the device", async (t) => {
    owned(t, 'share2', 'share1');
    t.after(async () => {
      await until(
        'the shared claim deallocated',
        async () => {
          const c = (await call('GET', `${RESOURCE_API}/namespaces/${NS}/resourceclaims/shared`)).body as Claim;
          return c.status?.allocation ? undefined : true;
        },
        30000,
        200,
      ).catch(() => undefined);
      await call('DELETE', `${RESOURCE_API}/namespaces/${NS}/resourceclaims/shared`);
    });
    await create(node, {
      apiVersion: 'resource.k8s.io/v1',
      kind: 'ResourceClaim',
      metadata: { name: 'shared', namespace: NS },
      spec: claimSpec(byName(NICS[2]!), { network: 'fast', interfaceName: 'net1', ips: ['10.1.0.13/24'] }),
    });
    await create(node, claimingPod(NS, 'share1', { claim: 'shared' }));
    await running('share1');
    // Reserved for share2 only now: the kubelet does not prepare the claim again, plexusd finds it by its name.
    await create(node, claimingPod(NS, 'share2', { claim: 'shared' }));
    const all = await eventSaying(
      'share2',
      `device ${NICS[2]} of ResourceClaim ${NS}/shared is already in pod ${NS}/share1`,
    );
    assert.ok(
      all.some((e) => e.startsWith('FailedAttachNetwork')),
      all.join(' | '),
    );
    assert.notEqual(await phase('share2'), 'Running');
    assert.match(await podLink('share1', 'net1'), /inet 10\.1\.0\.13\/24/);
    const claim = (await call('GET', `${RESOURCE_API}/namespaces/${NS}/resourceclaims/shared`)).body as Claim;
    assert.deepEqual(
      claim.status?.devices?.map((d) => d.conditions?.map((c) => `${c.type}=${c.status}`).join()),
      ['Ready=True'],
      "the claim's status is share1's",
    );
    await deletePod('share2');
    await deletePod('share1');
    await until('the record removed', () => (claimFiles().length === 0 ? true : undefined), 30000, 100);
    assert.ok(onHost(NICS[2]!));
  });

  it("nothing leaked: no journal record, no prepared claim, no lease, every device back in the node's namespace", async () => {
    await until('no journal record', () => (daemon.journalFiles().length === 0 ? true : undefined), 30000, 100);
    assert.deepEqual(claimFiles(), []);
    for (const network of ['podnet', 'fast', 'narrow', 'later'])
      assert.deepEqual(daemon.leases(`default/${network}`).concat(daemon.leases(network)), [], network);
    for (const name of NICS) assert.ok(onHost(name), `${name} is in the node's namespace`);
    assert.deepEqual(node.netnsLeft(), []);
  });
});
