/**
 * The node lease's rules (src/k8s/node-lease.ts) on an in-memory Lease store that answers as the API server does
 * (resourceVersion preconditions, 404, 409): who takes the lease, when a node counts as expired, when this node stops
 * allocating. test/k8s/cluster-ipam-node-lease.test.ts runs the same on a real API server.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import pino from 'pino';
import type { KubeApiClient } from '../../src/k8s/api-client';
import { NodeLeases, leaseNameOf } from '../../src/k8s/node-lease';

const log = pino({ level: 'silent' });

interface Stored {
  metadata: { name: string; uid: string; resourceVersion: string };
  spec: { holderIdentity?: string; leaseDurationSeconds?: number };
}

/** Leases by name; `down` makes every request fail as an unreachable server does. */
class FakeLeases {
  readonly leases = new Map<string, Stored>();
  down = false;
  private version = 1;

  put(name: string, holder: string, durationSeconds = 1): void {
    this.leases.set(name, {
      metadata: { name, uid: 'u', resourceVersion: String(++this.version) },
      spec: { holderIdentity: holder, leaseDurationSeconds: durationSeconds },
    });
  }

  get client(): KubeApiClient {
    const request = async (method: string, path: string, _r: string, o: { body?: unknown } = {}) => {
      if (this.down) return { ok: false, error: { status: 0, message: 'down' } };
      const body = o.body as Stored | undefined;
      const name = method === 'POST' ? body!.metadata.name : decodeURIComponent(path.split('/').pop()!);
      const have = this.leases.get(name);
      if (method === 'GET')
        return have
          ? { ok: true, value: structuredClone(have) }
          : { ok: false, error: { status: 404, message: 'not found' } };
      if (method === 'POST') {
        if (have) return { ok: false, error: { status: 409, message: 'exists' } };
        this.leases.set(name, {
          metadata: { name, uid: 'u', resourceVersion: String(++this.version) },
          spec: body!.spec,
        });
        return { ok: true, value: this.leases.get(name) };
      }
      if (!have || have.metadata.resourceVersion !== body!.metadata.resourceVersion)
        return { ok: false, error: { status: 409, message: 'conflict' } };
      this.leases.set(name, {
        metadata: { ...have.metadata, resourceVersion: String(++this.version) },
        spec: body!.spec,
      });
      return { ok: true, value: this.leases.get(name) };
    };
    return { request } as unknown as KubeApiClient;
  }
}

const leasesOf = (
  api: FakeLeases,
  o: { node?: string; identity?: string; predecessor?: string; durationMs?: number } = {},
): NodeLeases =>
  new NodeLeases(
    api.client,
    {
      node: o.node ?? 'n1',
      namespace: 'kube-system',
      identity: o.identity ?? 'me',
      durationMs: o.durationMs ?? 300,
      ...(o.predecessor ? { predecessor: o.predecessor } : {}),
    },
    log,
  );

describe('node lease', () => {
  it('creates the lease under its identity and renews it', async () => {
    const api = new FakeLeases();
    const mine = leasesOf(api);
    await mine.start();
    const first = api.leases.get(leaseNameOf('n1'))!;
    assert.equal(first.spec.holderIdentity, 'me');
    await sleep(250);
    assert.notEqual(
      api.leases.get(leaseNameOf('n1'))!.metadata.resourceVersion,
      first.metadata.resourceVersion,
      'renewed',
    );
    assert.equal(mine.refusal(1000), undefined);
    await mine.stop();
    assert.equal(api.leases.get(leaseNameOf('n1'))!.spec.holderIdentity, '', 'released at stop');
  });

  it("takes over at once the lease its state directory's previous process held", async () => {
    const api = new FakeLeases();
    api.put(leaseNameOf('n1'), 'before', 40);
    const mine = leasesOf(api, { predecessor: 'before' });
    await mine.start();
    assert.equal(api.leases.get(leaseNameOf('n1'))!.spec.holderIdentity, 'me');
    assert.equal(mine.refusal(1000), undefined);
    assert.equal(mine.contested, false);
    await mine.stop();
  });

  it('a lease another process renews is a conflict: refused, until that process stops renewing for the duration', async () => {
    const api = new FakeLeases();
    api.put(leaseNameOf('n1'), 'other', 1);
    const mine = leasesOf(api);
    await mine.start();
    assert.match(mine.refusal(1000) ?? '', /another plexusd \(identity other\) holds the lease of node n1/);
    assert.equal(mine.contested, true);
    // The other keeps renewing: still refused.
    for (let i = 0; i < 6; i++) {
      await sleep(200);
      api.put(leaseNameOf('n1'), 'other', 1);
    }
    assert.equal(mine.contested, true);
    assert.equal(api.leases.get(leaseNameOf('n1'))!.spec.holderIdentity, 'other');
    // It stops: after its duration (1 s), this process takes the lease.
    await sleep(1600);
    assert.equal(api.leases.get(leaseNameOf('n1'))!.spec.holderIdentity, 'me');
    assert.equal(mine.refusal(1000), undefined);
    await mine.stop();
  });

  it('another node is expired by this clock: not while it renews, from its duration after its last renewal', async () => {
    const api = new FakeLeases();
    const observer = leasesOf(api, { node: 'n0' });
    assert.equal(await observer.expiredForMs('n2'), 0, 'absent: counted from the first look');
    await sleep(100);
    assert.ok((await observer.expiredForMs('n2'))! >= 100, 'absent for 100 ms');
    api.put(leaseNameOf('n2'), 'other', 1);
    assert.equal(await observer.expiredForMs('n2'), 0, 'a new version: alive');
    await sleep(500);
    assert.equal(await observer.expiredForMs('n2'), 0, 'within its duration (1 s)');
    await sleep(800);
    const expired = (await observer.expiredForMs('n2'))!;
    assert.ok(expired >= 250 && expired < 1000, `expired for ${expired} ms, 1.3 s after a 1 s lease's last renewal`);
    api.down = true;
    assert.equal(await observer.expiredForMs('n2'), undefined, 'the API does not answer: unknown, not dead');
  });

  it('a released lease is expired from its release', async () => {
    const api = new FakeLeases();
    const observer = leasesOf(api, { node: 'n0' });
    api.put(leaseNameOf('n2'), '', 1);
    assert.equal(await observer.expiredForMs('n2'), 0);
    await sleep(200);
    assert.ok((await observer.expiredForMs('n2'))! >= 200);
  });

  it('a node that cannot renew stops allocating after the duration and half the grace, and serves again once it renews', async () => {
    const api = new FakeLeases();
    const mine = leasesOf(api, { durationMs: 300 });
    await mine.start();
    api.down = true;
    // Margins of a second either side: a loaded machine (CI, 2 cores) oversleeps by hundreds of milliseconds.
    await sleep(400);
    assert.equal(mine.refusal(2400), undefined, 'within the duration and half the grace (1.5 s)');
    await sleep(1600);
    assert.match(mine.refusal(2400) ?? '', /could not renew its lease for \d+ s/);
    api.down = false;
    assert.ok(mine.refusal(2400) !== undefined);
    await sleep(50); // the refusal asked for a renewal at once
    assert.equal(mine.refusal(2400), undefined);
    await mine.stop();
  });
});
