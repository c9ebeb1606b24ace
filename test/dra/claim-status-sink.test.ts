/**
 * ClaimStatusSink, the engine's ClaimSink on the API, on a fake API client (what it sends is the point): one apply per
 * claim with networkData and Ready for an attached device, Ready=False with the error for a failed one, an empty apply
 * when the pod's networks are gone; retries while the API fails, stops on 404, and a newer status supersedes an older
 * one still retrying. (The apply itself on a real API server: claim-status.test.ts.)
 */
import type { ApiFailure } from '../../src/common/api-object';
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import pino from 'pino';
import { ClaimStatusSink } from '../../src/dra/claim-status-sink';
import type { ClaimedNetworkDevice } from '../../src/engine/claims/ports';
import type { KubeApiClient } from '../../src/k8s/api-client';
import { err, ok, type Result } from '../../src/common/result';

interface Sent {
  path: string;
  devices: { device: string; networkData?: unknown; conditions: { status: string; message: string }[] }[];
}

/** Answers each request with the next of `answers` (then 200), keeping what was sent. */
function fakeApi(answers: number[] = []): { client: KubeApiClient; sent: Sent[] } {
  const sent: Sent[] = [];
  const client = {
    request: (
      _method: string,
      path: string,
      _resource: string,
      options: { body: { status: { devices: Sent['devices'] } } },
    ): Promise<Result<unknown, ApiFailure>> => {
      sent.push({ path, devices: options.body.status.devices });
      const status = answers.shift() ?? 200;
      return Promise.resolve(status === 200 ? ok({}) : err({ status, message: `HTTP ${status}` }));
    },
  } as unknown as KubeApiClient;
  return { client, sent };
}

const device = (claim: string, name: string): ClaimedNetworkDevice => ({
  claim: { namespace: 'ns', name: claim, uid: `uid-${claim}` },
  request: 'nic',
  pool: 'n1/plexus.io/nic',
  device: name,
  resourceName: 'plexus.io/nic',
  kind: 'host-device',
  deviceID: name,
  network: { namespace: 'ns', name: 'fast' },
});
const pod = { namespace: 'ns', name: 'p', uid: 'pod-1' };
const silent = pino({ level: 'silent' });
const fast = { firstDelayMs: 1, maxDelayMs: 2, attempts: 4 };

describe('the claim status sink', () => {
  it('one apply per claim: networkData and Ready=True for an attached device, Ready=False with the error otherwise', async () => {
    const { client, sent } = fakeApi();
    const sink = new ClaimStatusSink(client, silent, fast);
    sink.settled(pod, [
      {
        device: device('a', 'eth1'),
        attached: { interfaceName: 'net1', ips: ['10.1.0.5/24'], mac: '02:00:00:00:00:05' },
      },
      { device: device('b', 'eth2'), error: 'attaching network ns/fast as net2: no such device' },
    ]);
    await sink.idle();
    assert.deepEqual(
      sent.map((s) => s.path.split('?')[0]),
      [
        '/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/a/status',
        '/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/b/status',
      ],
    );
    assert.deepEqual(sent[0]!.devices[0]!.networkData, {
      interfaceName: 'net1',
      ips: ['10.1.0.5/24'],
      hardwareAddress: '02:00:00:00:00:05',
    });
    assert.equal(sent[0]!.devices[0]!.conditions[0]!.status, 'True');
    assert.equal(sent[1]!.devices[0]!.networkData, undefined);
    assert.deepEqual(
      sent[1]!.devices[0]!.conditions.map((c) => [c.status, c.message]),
      [['False', 'attaching network ns/fast as net2: no such device']],
    );
  });
  it("released: an empty apply per claim removes plexusd's entries", async () => {
    const { client, sent } = fakeApi();
    const sink = new ClaimStatusSink(client, silent, fast);
    sink.released(pod, [device('a', 'eth1'), device('a', 'eth3')]);
    await sink.idle();
    assert.equal(sent.length, 1);
    assert.deepEqual(sent[0]!.devices, []);
  });
  it('retried while the API fails, given up on 404 (the claim is gone)', async () => {
    const retried = fakeApi([503, 500]);
    const sink = new ClaimStatusSink(retried.client, silent, fast);
    sink.released(pod, [device('a', 'eth1')]);
    await sink.idle();
    assert.equal(retried.sent.length, 3, 'two failures, then written');
    const gone = fakeApi([404]);
    const sink2 = new ClaimStatusSink(gone.client, silent, fast);
    sink2.released(pod, [device('a', 'eth1')]);
    await sink2.idle();
    assert.equal(gone.sent.length, 1, 'not retried');
  });
  it("an apply refused as a change of status.allocation: the claim is read and its status PUT, others' entries kept", async () => {
    const calls: { method: string; body?: { status?: { devices?: { driver: string }[] }; metadata?: unknown } }[] = [];
    const live = {
      metadata: { name: 'a', namespace: 'ns', resourceVersion: '7' },
      status: { allocation: {}, devices: [{ driver: 'other.example.com' }, { driver: 'plexus.io' }] },
    };
    const client = {
      request: (
        method: string,
        _path: string,
        _resource: string,
        options: { body?: never } = {},
      ): Promise<Result<unknown, ApiFailure>> => {
        calls.push({ method, ...(options.body ? { body: options.body } : {}) });
        if (method === 'PATCH')
          return Promise.resolve(
            err({
              status: 422,
              message: 'ResourceClaim "a" is invalid: status.allocation: Invalid value: ...: field is immutable',
            }),
          );
        return Promise.resolve(ok(method === 'GET' ? live : {}));
      },
    } as unknown as KubeApiClient;
    const sink = new ClaimStatusSink(client, silent, fast);
    sink.settled(pod, [{ device: device('a', 'eth1'), attached: { interfaceName: 'net1', ips: [] } }]);
    await sink.idle();
    assert.deepEqual(
      calls.map((c) => c.method),
      ['PATCH', 'GET', 'PUT'],
    );
    const put = calls[2]!.body!;
    assert.deepEqual(put.metadata, live.metadata, 'with the resourceVersion read');
    assert.deepEqual(
      put.status!.devices!.map((d) => d.driver),
      ['other.example.com', 'plexus.io'],
    );
  });
  it('a newer status of a claim supersedes an older one still retrying', async () => {
    const { client, sent } = fakeApi([503]);
    const sink = new ClaimStatusSink(client, silent, { firstDelayMs: 20, maxDelayMs: 20, attempts: 4 });
    sink.settled(pod, [{ device: device('a', 'eth1'), error: 'first' }]);
    sink.settled(pod, [{ device: device('a', 'eth1'), attached: { interfaceName: 'net1', ips: [] } }]);
    await sink.idle();
    assert.deepEqual(
      sent.map((s) => s.devices[0]!.conditions[0]!.status),
      ['False', 'True'],
      'the failed first write is not sent again',
    );
  });
});
