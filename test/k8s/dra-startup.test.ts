/**
 * plexusd offers its plexus.io devices only while the kubelet knows the driver, on a real node (kube-apiserver,
 * scheduler, controller-manager, kubelet, containerd; the node's own network is the reference bridge): a pod waiting
 * for a device before plexusd starts runs within seconds of the start (no Prepare refused with "not registered",
 * which the kubelet would retry only at its resync, 60-90 s later); the slices go when plexusd stops and while the
 * kubelet is away, and come back only once the kubelet has registered plexus.io again.
 * A veth end the test creates in the node's network namespace (a single-node cluster's node) stands in for a NIC.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { DaemonFixture } from '../support/daemon';
import {
  bridgeConfList,
  claimingPod,
  create,
  draSettings,
  draNodeMissing,
  draRegistrations,
  draTooOld,
  hostDeviceTemplate,
  installDra,
  podEvents,
  RESOURCE_API,
} from '../support/dra-node';
import { SingleNode } from '../support/cluster/single-node';
import { addNicStandIn, uniquePrefix } from '../support/netns';
import { DEBIAN_PLUGINS } from '../support/plugin-dir';
import { expectedPrerequisites, optionalSkip } from '../support/prerequisites';
import { until } from '../support/until';

const missing = draNodeMissing();
const skip = expectedPrerequisites(missing) || optionalSkip(missing ? undefined : draTooOld());
const prefix = uniquePrefix('drs');
const NIC = 'plexus.io/startnic';
const DEVICE = `${prefix}n0`;
const PEER = `${prefix}p0`;
const NS = 'default';
/** How soon after plexusd's start a pod that waited for its device runs: well inside the kubelet's resync (60 s). */
const WITHIN_SECONDS_MS = 20000;
/** Long enough to see (and report) the kubelet's resync when the bound above is not met. */
const AFTER_KUBELET_RESYNC_MS = 130000;

describe('plexus.io devices offered only while the kubelet knows the driver, on a real node', { skip }, () => {
  let node: SingleNode;
  let daemon: DaemonFixture;
  let work: string;

  const phase = async (name: string): Promise<string | undefined> =>
    (await node.pod(NS, name).catch(() => undefined))?.status?.phase;
  const events = (name: string): Promise<string[]> => podEvents(node, NS, name);
  /** The node's plexus.io slices, by name. */
  const slices = async (): Promise<string[]> => {
    const selector = encodeURIComponent(`spec.nodeName=${node.nodeName},spec.driver=plexus.io`);
    const r = await node.call('GET', `${RESOURCE_API}/resourceslices?fieldSelector=${selector}`);
    assert.equal(r.status, 200, JSON.stringify(r.body).slice(0, 300));
    return (r.body as { items: { metadata: { name: string } }[] }).items.map((s) => s.metadata.name);
  };
  const running = async (name: string, timeoutMs: number): Promise<void> => {
    await until(
      `pod ${name} Running`,
      async () => ((await phase(name)) === 'Running' ? true : undefined),
      timeoutMs,
      100,
    ).catch(async (e: Error) => assert.fail(`${e.message}: ${(await events(name)).join(' | ')}`));
  };
  const deletePod = async (name: string): Promise<void> => {
    await node.call('DELETE', `/api/v1/namespaces/${NS}/pods/${name}`);
    await until(
      `pod ${name} gone`,
      async () => ((await node.call('GET', `/api/v1/namespaces/${NS}/pods/${name}`)).status === 404 ? true : undefined),
      60000,
      100,
    );
  };
  /** Where in plexusd's log (from `from` on) a line first says `text`; -1 when none does. */
  const logged = (text: string, from = 0): number => daemon.stderr.indexOf(text, from);
  const REGISTERED = 'registered with the kubelet as a DRA driver';
  const PUBLISHED = '"created":["plexus-';
  const KNOWN = '"msg":"the kubelet knows the DRA driver"';

  before(async () => {
    work = mkdtempSync(join(tmpdir(), 'plexus-drs-'));
    writeFileSync(
      join(work, 'resources.yaml'),
      JSON.stringify({ resources: [{ name: NIC, kind: 'host-device', devices: [DEVICE], offer: ['dra'] }] }),
    );
    node = await SingleNode.start({ cniBinDir: DEBIAN_PLUGINS, cniConfList: bridgeConfList(`${prefix}br`) });
    // The NIC stand-in is the node's: it goes with the node's network namespace.
    addNicStandIn(node.netns, DEVICE, PEER);
    await installDra(node);
    // The NAD the claims' config names: Prepare refuses a claim naming one that does not exist.
    const fast = JSON.stringify({ cniVersion: '1.0.0', name: 'fast', type: 'host-device' });
    assert.equal((await node.api.createNad(NS, 'fast', fast)).status, 201);
    await create(
      node,
      hostDeviceTemplate(NS, 'startnic', `device.attributes["plexus.io"].interfaceName == "${DEVICE}"`, {
        network: 'fast',
      }),
    );
    daemon = new DaemonFixture('podnet');
    daemon.launcher = node.launcher;
    daemon.addSettings({ ...draSettings(node, work), logLevel: 'info' });
  });

  after(async () => {
    await node?.stop({ runtimeStopped: () => daemon?.stop() });
    await daemon?.stop();
    if (work) rmSync(work, { recursive: true, force: true });
  });

  it("a pod Pending on a plexus.io device before plexusd starts runs within 20 s of plexusd's start", async () => {
    await create(node, claimingPod(NS, 'early', { template: 'startnic' }));
    await until('the scheduler found no device for pod early', async () => {
      const pod = (await node.call('GET', `/api/v1/namespaces/${NS}/pods/early`)).body as {
        status?: { conditions?: { type: string; status: string }[] };
      };
      const scheduled = pod.status?.conditions?.find((c) => c.type === 'PodScheduled');
      return scheduled?.status === 'False' ? true : undefined;
    });
    const startedAt = Date.now();
    await daemon.start(30000);
    await running('early', AFTER_KUBELET_RESYNC_MS);
    const took = Date.now() - startedAt;
    console.log(`# pod pending before plexusd's start: Running ${took} ms after the start`);
    const refused = (await events('early')).filter((e) => e.startsWith('FailedPrepareDynamicResources'));
    assert.deepEqual(refused, [], 'no Prepare refused');
    assert.ok(took < WITHIN_SECONDS_MS, `Running ${took} ms after plexusd's start, not within ${WITHIN_SECONDS_MS}`);
    await deletePod('early');
  });

  it("the node's slice is created only after the kubelet registered plexus.io", () => {
    const registered = logged(REGISTERED);
    const published = logged(PUBLISHED);
    assert.ok(registered >= 0 && published >= 0, daemon.stderr.slice(-2000));
    assert.ok(registered < published, 'registered first, then published');
  });

  it("plexusd stopping withdraws the node's slices; started again, it publishes them once registered", async () => {
    assert.equal((await slices()).length, 1);
    await daemon.kill('SIGTERM');
    assert.deepEqual(await slices(), [], 'no slice left once plexusd has exited');
    const registrations = draRegistrations(daemon);
    const logFrom = daemon.stderr.length;
    await daemon.start(30000);
    await until('registered again', () => (draRegistrations(daemon) > registrations ? true : undefined), 30000, 100);
    await until('the slice published again', async () => ((await slices()).length === 1 ? true : undefined));
    assert.ok(logged(REGISTERED, logFrom) < logged(PUBLISHED, logFrom), 'registered first, then published');
  });

  it('the kubelet gone: the slices are withdrawn, and come back once the restarted kubelet has registered plexus.io', async () => {
    await node.stopKubelet();
    const stoppedAt = Date.now();
    await until('the slices withdrawn', async () => ((await slices()).length === 0 ? true : undefined), 20000, 100);
    console.log(`# kubelet stopped: slices withdrawn ${Date.now() - stoppedAt} ms later`);
    const registrations = draRegistrations(daemon);
    const logFrom = daemon.stderr.length;
    const spawnedAt = await node.startKubeletAgain();
    await until('registered again', () => (draRegistrations(daemon) > registrations ? true : undefined), 60000, 100);
    await until('the slice published again', async () => ((await slices()).length === 1 ? true : undefined), 30000);
    console.log(`# kubelet started again: the slice published ${Date.now() - spawnedAt} ms after its start`);
    // The kubelet connects to the DRA socket while it registers the driver (before NotifyRegistrationStatus).
    assert.ok(logged(KNOWN, logFrom) < logged(PUBLISHED, logFrom), 'known to the new kubelet first, then published');
    // And a pod that claims the device runs at once: the kubelet knows the driver.
    const createdAt = Date.now();
    await create(node, claimingPod(NS, 'after', { template: 'startnic' }));
    await running('after', AFTER_KUBELET_RESYNC_MS);
    const took = Date.now() - createdAt;
    console.log(`# pod after the kubelet's restart: Running ${took} ms after it was created`);
    assert.ok(took < WITHIN_SECONDS_MS, `Running ${took} ms after it was created, not within ${WITHIN_SECONDS_MS}`);
    await deletePod('after');
  });
});
