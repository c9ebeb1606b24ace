/**
 * A memif network given by a claim, on a real node (SingleNode: a cluster of one node, plexusd inside it) and a
 * private OVS-DPDK on the host: a pod whose ResourceClaimTemplate asks for a memif.plexus.io device and names a
 * memif NAD runs; plexusd made the device's socket and secret at Prepare, the switch serves exactly that socket with
 * exactly that secret (a memif client on the host gets the link up), network-status and the claim's status show the
 * interface, and the pod's deletion removes the port, the record and the socket's directory. What reaches the
 * container through CDI (containerd 2 only, docs/dra.md) is dra-cdi.test.ts's.
 */
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { ApiPods } from '../support/api-pods';
import type { DaemonFixture } from '../support/daemon';
import {
  claimingPod,
  create,
  draSettings,
  draNodeMissing,
  draRegistrations,
  draTooOld,
  installDra,
  RESOURCE_API,
} from '../support/dra-node';
import type { SingleNode } from '../support/cluster/single-node';
import { ensureNamespace } from '../support/cluster/pods';
import { uniquePrefix } from '../support/netns';
import { ovsDpdkMissing } from '../support/ovs-dpdk';
import { MemifNodeFixture } from '../support/memif-node';
import { expectedPrerequisites, optionalSkip } from '../support/prerequisites';
import { until } from '../support/until';

const nodeMissing = draNodeMissing();
const ovsMissing = nodeMissing ? undefined : ovsDpdkMissing();
const skip =
  expectedPrerequisites(
    nodeMissing && `no real DRA node here: ${nodeMissing}`,
    ovsMissing && `no private OVS-DPDK here: ${ovsMissing}`,
  ) || optionalSkip(nodeMissing ? undefined : draTooOld());
const prefix = uniquePrefix('dm');
const MEMIF = 'plexus.io/memif';
const NS = 'default';

interface Record {
  devices: { device: string; socket?: string; secret?: string }[];
}

describe('a memif network given by a claim on a real node', { skip, timeout: 600_000 }, () => {
  const memifNode = new MemifNodeFixture();
  let node: SingleNode;
  let daemon: DaemonFixture;
  let work: string;

  const claimFiles = (): string[] => {
    const dir = join(daemon.stateDir, 'dra', 'claims');
    return existsSync(dir) ? readdirSync(dir).filter((f) => f.endsWith('.json')) : [];
  };
  const events = async (name: string): Promise<string> => {
    const selector = encodeURIComponent(`involvedObject.name=${name}`);
    const r = await node.call('GET', `/api/v1/namespaces/${NS}/events?fieldSelector=${selector}`);
    return ((r.body as { items?: { reason: string; message: string }[] }).items ?? [])
      .map((e) => `${e.reason}: ${e.message}`)
      .join(' | ');
  };

  before(async () => {
    await memifNode.start({
      prefix,
      resources: (dir) => [{ name: MEMIF, kind: 'memif', count: 2, socketDir: join(dir, 'memif'), offer: ['dra'] }],
    });
    ({ node, daemon, work } = memifNode);
    await installDra(node);
    // The controller-manager makes sa/default some time after the API server starts; a pod posted before it is
    // refused by the ServiceAccount admission (createPods makes it too, these pods are posted as written).
    await ensureNamespace(node.api, NS);
    daemon.addSettings({ ...draSettings(node, work, memifNode.binDir), logLevel: 'info' });
    await daemon.start(30000);
    await until(
      "the kubelet's registration of plexus.io",
      () => (draRegistrations(daemon) > 0 ? true : undefined),
      30000,
      100,
    );
  });

  after(() => memifNode.stop());

  let socket = '';
  let secret = '';
  let port = '';

  it('runs; the switch serves the socket and secret plexusd made for the claimed device at Prepare', async () => {
    await create(node, {
      apiVersion: 'resource.k8s.io/v1',
      kind: 'ResourceClaimTemplate',
      metadata: { name: 'memif-claim', namespace: NS },
      spec: {
        spec: {
          devices: {
            requests: [{ name: 'nic', exactly: { deviceClassName: 'memif.plexus.io' } }],
            config: [
              {
                requests: ['nic'],
                opaque: { driver: 'plexus.io', parameters: { network: 'memnet', interfaceName: 'net1' } },
              },
            ],
          },
        },
      },
    });
    await create(node, claimingPod(NS, 'mem', { template: 'memif-claim' }));
    await until(
      'pod mem Running',
      async () => ((await node.pod(NS, 'mem').catch(() => undefined))?.status?.phase === 'Running' ? true : undefined),
      90000,
      100,
    ).catch(async (e: Error) => assert.fail(`${e.message}: ${await events('mem')}\n${node.logTail('kubelet', 15)}`));
    const record = JSON.parse(readFileSync(join(daemon.stateDir, 'dra', 'claims', claimFiles()[0]!), 'utf8')) as Record;
    const device = record.devices[0]!;
    assert.match(device.device, /^memif[01]$/);
    assert.equal(device.socket, join(work, 'memif', device.device, 'memif.sock'));
    socket = device.socket!;
    secret = device.secret ?? '';
    assert.match(secret, /^[A-Za-z0-9]{20}$/);
    const ports = memifNode.plexusPorts();
    assert.equal(ports.length, 1, `Plexus ports on the switch: ${ports.join(' ')}`);
    port = ports[0]!;
    memifNode.assertServes(port, socket, secret);
  });

  it("network-status and the claim's status show the memif interface, Ready", async () => {
    const pods = new ApiPods(node.api, node.nodeName, () => {
      throw new Error('sandboxes come from the kubelet here');
    });
    const status = await pods.status(NS, 'mem', (s) => s.length === 2);
    assert.deepEqual(
      status.map((s) => `${s.name}@${s.interface}`),
      ['default/podnet@eth0', 'default/memnet@net1'],
    );
    const claim = await until("the claim's device status", async () => {
      const p = (await node.call('GET', `/api/v1/namespaces/${NS}/pods/mem`)).body as {
        status?: { resourceClaimStatuses?: { resourceClaimName?: string }[] };
      };
      const name = p.status?.resourceClaimStatuses?.[0]?.resourceClaimName;
      if (!name) return undefined;
      const c = (await node.call('GET', `${RESOURCE_API}/namespaces/${NS}/resourceclaims/${name}`)).body as {
        status?: {
          devices?: { networkData?: { interfaceName?: string }; conditions?: { type: string; status: string }[] }[];
        };
      };
      return c.status?.devices?.length ? c : undefined;
    });
    const [entry] = claim.status!.devices!;
    assert.equal(entry!.networkData?.interfaceName, 'net1');
    assert.deepEqual(
      entry!.conditions?.map((c) => `${c.type}=${c.status}`),
      ['Ready=True'],
    );
  });

  it("a memif client with the claim's secret on the device's host socket gets the link up", async () => {
    await memifNode.assertLinkComesUp(port, socket, secret);
  });

  it("deleting the pod removes its port, the claim's record and the socket's directory", async () => {
    await node.call('DELETE', `/api/v1/namespaces/${NS}/pods/mem`);
    await until('the record removed', () => (claimFiles().length === 0 ? true : undefined), 60000, 100);
    await until('the port removed', () => (memifNode.plexusPorts().length === 0 ? true : undefined), 30000, 100);
    assert.ok(!existsSync(join(socket, '..')), 'the socket directory is gone');
    await until('no journal record', () => (daemon.journalFiles().length === 0 ? true : undefined), 30000, 100);
  });
});
