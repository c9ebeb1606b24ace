/**
 * The node Leases as the vxlan driver's directory (src/k8s/vtep-leases.ts) on an in-memory API: what this node's record
 * said at start, a record left by a previous plexusd retracted, no peers known before the Leases are listed, and new
 * connections before the write of an address that moved. test/k8s/vxlan-peers.test.ts runs it on a real API server.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import pino from 'pino';
import type { KubeApiClient } from '../../src/k8s/api-client';
import { VTEPS_ANNOTATION, VtepLeases } from '../../src/k8s/vtep-leases';

const log = pino({ level: 'silent' });
const NS = 'kube-system';
const OWN = 'plexus-node-a';

/** One node's Lease (`annotation`: its VTEPs as written), the requests made, and reconnects, in order. */
class FakeApi {
  readonly calls: string[] = [];
  constructor(private annotation: string | undefined) {}

  private lease(): unknown {
    const annotations = this.annotation === undefined ? {} : { [VTEPS_ANNOTATION]: this.annotation };
    return {
      metadata: { name: OWN, namespace: NS, uid: 'u', resourceVersion: '5', annotations },
      spec: { holderIdentity: 'me', leaseDurationSeconds: 40 },
    };
  }

  get client(): KubeApiClient {
    const request = (method: string, path: string, _r: string, o: { body?: unknown } = {}) => {
      if (path.startsWith('/api/v1/nodes/'))
        return Promise.resolve({
          ok: true,
          value: { status: { addresses: [{ type: 'InternalIP', address: '192.0.2.1' }] } },
        });
      this.calls.push(`${method} ${path.split('?')[0]!.split('/').pop()}`);
      if (method === 'PATCH') {
        const body = o.body as { metadata: { annotations: Record<string, string | null> } };
        this.annotation = body.metadata.annotations[VTEPS_ANNOTATION] ?? undefined;
        return Promise.resolve({ ok: true, value: this.lease() });
      }
      if (path.includes('?'))
        return Promise.resolve({ ok: true, value: { items: [this.lease()], metadata: { resourceVersion: '5' } } });
      return Promise.resolve({ ok: true, value: this.lease() });
    };
    // A watch that stays open, silent, until the informer stops.
    const stream = (_p: string, _r: string, _idle: number, _line: unknown, signal?: AbortSignal) =>
      new Promise((done) => signal?.addEventListener('abort', () => done({ ok: true, value: undefined })));
    const reconnect = () => this.calls.push('reconnect');
    return { request, stream, reconnect } as unknown as KubeApiClient;
  }

  get written(): string | undefined {
    return this.annotation;
  }
}

describe('the node Leases as the VTEP directory', () => {
  it("reads what this node's record said at start", async () => {
    const api = new FakeApi('{"7":"192.0.2.1"}');
    const leases = new VtepLeases(api.client, { node: 'a', namespace: NS }, log);
    await leases.start();
    try {
      assert.deepEqual(leases.publishedBefore(), new Map([[7, '192.0.2.1']]));
    } finally {
      await leases.stop();
    }
  });

  it('retracts a record a previous plexusd left, though this one serves nothing', async () => {
    const api = new FakeApi('{"7":"192.0.2.1"}');
    const leases = new VtepLeases(api.client, { node: 'a', namespace: NS }, log);
    await leases.start();
    try {
      await leases.publish(new Map());
      assert.equal(api.written, undefined, `the annotation is gone (requests: ${api.calls.join(', ')})`);
    } finally {
      await leases.stop();
    }
  });

  it('knows no peers (undefined, not none) until the Leases are listed', async () => {
    const api = new FakeApi(undefined);
    const leases = new VtepLeases(api.client, { node: 'a', namespace: NS }, log);
    await leases.start();
    try {
      assert.equal(leases.livePeers(), undefined);
      await leases.publish(new Map([[7, '192.0.2.1']]));
      assert.deepEqual(leases.livePeers(), []);
    } finally {
      await leases.stop();
    }
  });

  it('opens new connections before it writes an address that moved', async () => {
    const api = new FakeApi('{"7":"192.0.2.1"}');
    const leases = new VtepLeases(api.client, { node: 'a', namespace: NS }, log);
    await leases.start();
    try {
      await leases.publish(new Map([[7, '192.0.2.9']]));
      assert.deepEqual(api.calls.slice(-2), ['reconnect', `PATCH ${OWN}`]);
      assert.equal(api.written, '{"7":"192.0.2.9"}');
    } finally {
      await leases.stop();
    }
  });
});
