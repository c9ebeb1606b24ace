/**
 * A claim's status.devices[] written by plexusd (applyClaimDeviceStatus) on a real API server, as the `plexus` user
 * with deploy/dra/50-dra.yaml's role: networkData and Ready for a device, Ready=False with the error for a failed attach,
 * another driver's entry left alone, and plexusd's entries removed by an empty apply. (The engine calls it once a
 * pod's interfaces exist; that wiring is a later change.)
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { parseAllDocuments } from 'yaml';
import { applyClaimDeviceStatus } from '../../src/dra/claim-status';
import type { KubeApiClient } from '../../src/k8s/api-client';
import { ROOT } from '../support/daemon';
import { apiClientFor, k8sMissing, KubeApiFixture, PLEXUS_USER } from '../support/k8s';
import { k8sOlderThan } from '../support/k8s-binaries';
import { expectedPrerequisites, optionalSkip } from '../support/prerequisites';

// resource.k8s.io/v1 is served from 1.34 on: an older Kubernetes skips this, saying so.
const skip = expectedPrerequisites(k8sMissing()) || optionalSkip(k8sMissing() ? undefined : k8sOlderThan('1.34'));
const CLAIMS = '/apis/resource.k8s.io/v1/namespaces/default/resourceclaims';
const POOL = 'n1/plexus.io/nic';

interface Entry {
  driver: string;
  device: string;
  pool: string;
  conditions?: { type: string; status: string; reason: string; message: string }[];
  networkData?: unknown;
}

describe("a claim's status.devices[] written by plexusd", { skip }, () => {
  let api: KubeApiFixture;
  let client: KubeApiClient;
  const entries = async (): Promise<Entry[]> =>
    ((await api.request('GET', `${CLAIMS}/c1`)).body as { status?: { devices?: Entry[] } }).status?.devices ?? [];

  before(async () => {
    api = await KubeApiFixture.startForPlexus();
    const served = await api.request('GET', '/apis/resource.k8s.io/v1');
    if (served.status !== 200)
      throw new Error(`this API server does not serve resource.k8s.io/v1 (DRA needs 1.34+): ${served.status}`);
    for (const doc of parseAllDocuments(readFileSync(join(ROOT, 'deploy/dra/50-dra.yaml'), 'utf8'))) {
      const o = doc.toJSON() as { kind: string };
      if (o.kind !== 'ClusterRole') continue;
      assert.equal((await api.request('POST', '/apis/rbac.authorization.k8s.io/v1/clusterroles', o)).status, 201);
    }
    assert.equal(
      (
        await api.request('POST', '/apis/rbac.authorization.k8s.io/v1/clusterrolebindings', {
          apiVersion: 'rbac.authorization.k8s.io/v1',
          kind: 'ClusterRoleBinding',
          metadata: { name: 'plexus-dra-user' },
          roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'plexus-dra' },
          subjects: [{ apiGroup: 'rbac.authorization.k8s.io', kind: 'User', name: PLEXUS_USER }],
        })
      ).status,
      201,
    );
    client = apiClientFor(api.userKubeconfig(PLEXUS_USER));
    const claim = await api.request('POST', CLAIMS, {
      apiVersion: 'resource.k8s.io/v1',
      kind: 'ResourceClaim',
      metadata: { name: 'c1' },
      spec: {
        devices: {
          requests: [
            { name: 'nic', exactly: { deviceClassName: 'host-device.plexus.io' } },
            { name: 'gpu', exactly: { deviceClassName: 'other' } },
          ],
        },
      },
    });
    assert.equal(claim.status, 201, JSON.stringify(claim.body));
    // What the scheduler would write: the allocation (a plexus.io device and another driver's).
    const body = claim.body as Record<string, unknown>;
    const allocated = await api.request('PUT', `${CLAIMS}/c1/status`, {
      ...body,
      status: {
        allocation: {
          devices: {
            results: [
              { request: 'nic', driver: 'plexus.io', pool: POOL, device: 'eth1' },
              { request: 'gpu', driver: 'other.example.com', pool: 'n1', device: 'gpu0' },
            ],
          },
        },
      },
    });
    assert.equal(allocated.status, 200, JSON.stringify(allocated.body));
    const other = await api.request(
      'PATCH',
      `${CLAIMS}/c1/status?fieldManager=other-driver`,
      {
        apiVersion: 'resource.k8s.io/v1',
        kind: 'ResourceClaim',
        metadata: { name: 'c1', namespace: 'default' },
        status: { devices: [{ driver: 'other.example.com', pool: 'n1', device: 'gpu0' }] },
      },
      'application/apply-patch+yaml',
    );
    assert.equal(other.status, 200, JSON.stringify(other.body));
  });
  after(async () => {
    client?.close();
    await api?.stop();
  });

  it('an attached device: networkData with the interface, its addresses and MAC, and Ready=True', async () => {
    const r = await applyClaimDeviceStatus(client, { namespace: 'default', name: 'c1' }, [
      {
        pool: POOL,
        device: 'eth1',
        network: { interfaceName: 'net1', ips: ['10.9.0.5/24', 'fd00::5/64'], mac: '02:00:00:00:00:05' },
      },
    ]);
    assert.deepEqual(r, { ok: true, value: undefined });
    const mine = (await entries()).find((e) => e.driver === 'plexus.io')!;
    assert.deepEqual(mine.networkData, {
      interfaceName: 'net1',
      ips: ['10.9.0.5/24', 'fd00::5/64'],
      hardwareAddress: '02:00:00:00:00:05',
    });
    assert.deepEqual(
      mine.conditions?.map((c) => [c.type, c.status, c.reason]),
      [['Ready', 'True', 'NetworkReady']],
    );
  });

  it("a failed attach: Ready=False with the error as its message, no networkData, the other driver's entry kept", async () => {
    const r = await applyClaimDeviceStatus(client, { namespace: 'default', name: 'c1' }, [
      { pool: POOL, device: 'eth1', error: 'NAD default/fast does not exist' },
    ]);
    assert.ok(r.ok, r.ok ? '' : r.error);
    const all = await entries();
    const mine = all.find((e) => e.driver === 'plexus.io')!;
    assert.equal(mine.networkData, undefined);
    assert.deepEqual(
      mine.conditions?.map((c) => [c.status, c.reason, c.message]),
      [['False', 'NetworkAttachFailed', 'NAD default/fast does not exist']],
    );
    assert.ok(all.some((e) => e.driver === 'other.example.com' && e.device === 'gpu0'));
  });

  it("an empty apply removes plexusd's entries only; a claim that is gone is an error naming it", async () => {
    assert.ok((await applyClaimDeviceStatus(client, { namespace: 'default', name: 'c1' }, [])).ok);
    assert.deepEqual(
      (await entries()).map((e) => e.driver),
      ['other.example.com'],
    );
    const gone = await applyClaimDeviceStatus(client, { namespace: 'default', name: 'nope' }, []);
    assert.ok(!gone.ok);
    assert.match(gone.error, /^writing the status of ResourceClaim default\/nope: 404 /);
  });
});
