/**
 * CDI for a claimed memif device, on a real node whose containerd has CDI (containerd 2, the default pair): a pod
 * whose claim holds a memif device gets, through the CDI spec plexusd wrote at Prepare, what a pod given a memif
 * device by the device plugin gets — MEMIF_SOCKET, MEMIF_SECRET, PLEXUS_DEVICES_<resource> and the device's socket
 * directory mounted — checked field by field against such a pod on the same node; the secret is the claim's; and
 * deleting the pod removes the spec. No switch is needed: neither pod asks for a memif network.
 */
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { containerdMajor, containerdVersion } from '../support/containerd';
import { claimingPod, create, draSettings, draNodeMissing, draRegistrations, draTooOld } from '../support/dra-node';
import { installDra } from '../support/dra-node';
import { podnetBridge } from '../support/k8s';
import { PAUSE_IMAGE } from '../support/kube-node';
import { ensureNamespace } from '../support/cluster/pods';
import { uniquePrefix } from '../support/netns';
import { PlexusNodeFixture } from '../support/plexus-node';
import { expectedPrerequisites, optionalSkip } from '../support/prerequisites';
import { until } from '../support/until';

const nodeMissing = draNodeMissing();
const noCdi = (): string | undefined =>
  containerdMajor() < 2
    ? `CDI needs containerd 2 (this run: ${containerdVersion()}; the default PLEXUS_STACK=1.36 runs containerd 2)`
    : undefined;
const skip =
  expectedPrerequisites(nodeMissing && `no real DRA node here: ${nodeMissing}`) ||
  optionalSkip(nodeMissing ? undefined : (draTooOld() ?? noCdi()));
const prefix = uniquePrefix('dc');
const MEMIF = 'plexus.io/memif';
const NS = 'default';

interface Seen {
  env: Map<string, string>;
  mounts: { destination: string; source: string }[];
}

/** What a container was given for its memif device: the three variables and the mounts under /run/memif. */
const memifView = (seen: Seen): { env: Record<string, string>; mounts: { destination: string; source: string }[] } => ({
  env: Object.fromEntries(
    ['MEMIF_SOCKET', 'MEMIF_SECRET', 'PLEXUS_DEVICES_PLEXUS_IO_MEMIF'].map((k) => [k, seen.env.get(k) ?? '(unset)']),
  ),
  mounts: seen.mounts
    .filter((m) => m.destination.startsWith('/run/memif'))
    .map((m) => ({ destination: m.destination, source: m.source })),
});

describe('a memif device given by a claim reaches the container through CDI', { skip, timeout: 600_000 }, () => {
  const plexus = new PlexusNodeFixture();
  let socketDir = '';

  const specFiles = (): string[] =>
    existsSync(plexus.node.cdiDir) ? readdirSync(plexus.node.cdiDir).filter((f) => f.startsWith('plexus.io-')) : [];

  before(async () => {
    await plexus.start({ prefix });
    const { node, work, daemon } = plexus;
    socketDir = join(work, 'memif');
    writeFileSync(
      join(work, 'resources.yaml'),
      JSON.stringify({
        resources: [{ name: MEMIF, kind: 'memif', count: 2, socketDir, offer: ['dra', 'device-plugin'] }],
      }),
    );
    const podnet = podnetBridge(
      `${prefix}b0`,
      `10.${100 + Math.floor(Math.random() * 50)}.${Math.floor(Math.random() * 250)}.0/24`,
    );
    assert.equal((await node.api.createNad(NS, 'podnet', podnet)).status, 201);
    await installDra(node);
    // The controller-manager makes sa/default some time after the API server starts; a pod posted before it is
    // refused by the ServiceAccount admission (createPods makes it too, these pods are posted as written).
    await ensureNamespace(node.api, NS);
    daemon.addSettings({ ...draSettings(node, work, plexus.binDir), logLevel: 'info' });
    await daemon.start(30000);
    await until('plexus.io registered', () => (draRegistrations(daemon) > 0 ? true : undefined), 30000, 100);
    await until(
      'the node offers plexus.io/memif through the device plugin',
      async () => (Number(await allocatable()) === 2 ? true : undefined),
      60000,
      200,
    );
  });

  after(() => plexus.stop());

  const allocatable = async (): Promise<string | undefined> => {
    const got = (await plexus.node.call('GET', `/api/v1/nodes/${plexus.node.nodeName}`)).body as {
      status?: { allocatable?: Record<string, string> };
    };
    return got.status?.allocatable?.[MEMIF];
  };

  let claimed: Seen;
  let secret = '';

  it('a pod whose claim holds a memif device runs; its container has the spec’s env and mount', async () => {
    const { node } = plexus;
    await create(node, {
      apiVersion: 'resource.k8s.io/v1',
      kind: 'ResourceClaimTemplate',
      metadata: { name: 'memif-cdi', namespace: NS },
      spec: { spec: { devices: { requests: [{ name: 'nic', exactly: { deviceClassName: 'memif.plexus.io' } }] } } },
    });
    await create(node, claimingPod(NS, 'cm', { template: 'memif-cdi' }));
    await until(
      'pod cm Running',
      async () => ((await node.pod(NS, 'cm').catch(() => undefined))?.status?.phase === 'Running' ? true : undefined),
      90000,
      100,
    ).catch((e: Error) =>
      assert.fail(`${e.message}\n${node.logTail('kubelet', 15)}\n${node.logTail('containerd', 10)}`),
    );
    assert.equal(specFiles().length, 1, `one spec of ours in ${node.cdiDir}`);
    const records = readdirSync(join(plexus.daemon.stateDir, 'dra', 'claims')).filter((f) => f.endsWith('.json'));
    const record = JSON.parse(readFileSync(join(plexus.daemon.stateDir, 'dra', 'claims', records[0]!), 'utf8')) as {
      uid: string;
      devices: { device: string; secret?: string }[];
    };
    assert.equal(specFiles()[0], `plexus.io-${record.uid}.json`);
    secret = record.devices[0]!.secret ?? '';
    claimed = await node.containerSpec(NS, 'cm');
    const device = record.devices[0]!.device;
    assert.deepEqual(memifView(claimed), {
      env: {
        MEMIF_SOCKET: `/run/memif/${device}/memif.sock`,
        MEMIF_SECRET: secret,
        PLEXUS_DEVICES_PLEXUS_IO_MEMIF: device,
      },
      mounts: [{ destination: `/run/memif/${device}`, source: join(socketDir, device) }],
    });
  });

  it('field by field, what a device-plugin memif pod on the same node gets (its own device and secret)', async () => {
    const { node } = plexus;
    // The claimed device is Unhealthy to the device plugin: wait until the kubelet counts it out of allocatable.
    await until(
      'one plexus.io/memif left allocatable',
      async () => (Number(await allocatable()) === 1 ? true : undefined),
      30000,
      200,
    );
    await create(node, {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name: 'dp', namespace: NS },
      spec: {
        automountServiceAccountToken: false,
        enableServiceLinks: false,
        terminationGracePeriodSeconds: 1,
        containers: [
          { name: 'c', image: PAUSE_IMAGE, imagePullPolicy: 'Never', resources: { limits: { [MEMIF]: '1' } } },
        ],
      },
    });
    await until(
      'pod dp Running',
      async () => ((await node.pod(NS, 'dp').catch(() => undefined))?.status?.phase === 'Running' ? true : undefined),
      90000,
      100,
    );
    const viaPlugin = await node.containerSpec(NS, 'dp');
    const dp = memifView(viaPlugin);
    const dra = memifView(claimed);
    const devDp = dp.env.PLEXUS_DEVICES_PLEXUS_IO_MEMIF!;
    const devDra = dra.env.PLEXUS_DEVICES_PLEXUS_IO_MEMIF!;
    assert.notEqual(devDp, devDra, 'each has a device of its own');
    // The same fields, each the same function of the device (and a secret of the same shape).
    const generic = (v: ReturnType<typeof memifView>, dev: string): string =>
      JSON.stringify({
        ...v,
        env: { ...v.env, MEMIF_SECRET: /^[A-Za-z0-9]{20}$/.test(v.env.MEMIF_SECRET!) },
      }).replaceAll(dev, 'DEV');
    assert.equal(generic(dra, devDra), generic(dp, devDp));
    const opts = (s: Seen): string[] => {
      const m = (s.mounts as { destination: string; options?: string[]; type?: string }[]).find((x) =>
        x.destination.startsWith('/run/memif'),
      );
      return [m?.type ?? '', ...(m?.options ?? []).filter((o) => o !== 'rprivate')].sort();
    };
    assert.deepEqual(opts(claimed), opts(viaPlugin), 'the mount is a read-write bind mount either way');
    assert.notEqual(dp.env.MEMIF_SECRET, secret);
    await node.call('DELETE', `/api/v1/namespaces/${NS}/pods/dp`);
  });

  it('deleting the pod removes the claim’s CDI spec', async () => {
    await plexus.node.call('DELETE', `/api/v1/namespaces/${NS}/pods/cm`);
    await until('the spec removed', () => (specFiles().length === 0 ? true : undefined), 60000, 100);
  });
});
