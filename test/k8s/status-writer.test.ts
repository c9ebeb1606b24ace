/** network-status write-back (ApiStatusWriter) against a real API server: what is written, and what is never written. */
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import pino from 'pino';
import type { KubeApiClient } from '../../src/k8s/api-client';
import { ApiStatusWriter, NETWORK_STATUS_ANNOTATION } from '../../src/k8s/status-writer';
import type { NetworkStatusEntry } from '../../src/networks/status';
import { apiClientFor, k8sMissing, KubeApiFixture } from '../support/k8s';
import { expectedPrerequisites } from '../support/prerequisites';

const skip = expectedPrerequisites(k8sMissing());
const status: NetworkStatusEntry[] = [
  { name: 'default/podnet', interface: 'eth0', ips: ['10.1.0.7'], mac: '02:00:00:00:00:07', default: true, dns: {} },
  { name: 'team-a/blue', interface: 'net1', ips: ['10.2.0.9'], mac: '02:00:00:00:00:09', dns: {} },
];

describe('network-status write-back on a real API server', { skip }, () => {
  let api: KubeApiFixture;
  let client: KubeApiClient;
  before(async () => {
    api = await KubeApiFixture.start();
    client = apiClientFor(api.kubeconfig);
  });
  after(async () => {
    client?.close();
    await api?.stop();
  });

  /** A pod object (no kubelet runs it: its node does not exist), with an annotation of its own. */
  async function pod(name: string): Promise<string> {
    const made = await api.createPod('default', name, { annotations: { 'team.example/owner': 'me' } });
    assert.equal(made.status, 201, JSON.stringify(made.body));
    return (made.body as { metadata: { uid: string } }).metadata.uid;
  }
  const annotations = async (name: string): Promise<Record<string, string>> =>
    (
      (await api.request('GET', `/api/v1/namespaces/default/pods/${name}`)).body as {
        metadata: { annotations?: Record<string, string> };
      }
    ).metadata.annotations ?? {};

  it('writes the annotation with a PATCH of it alone: the pod keeps its other annotations', async () => {
    const uid = await pod('p1');
    // Every request goes to the real API server; this only notes what was sent.
    const sent: Parameters<KubeApiClient['request']>[] = [];
    const recorded = {
      request: (...args: Parameters<KubeApiClient['request']>) => {
        sent.push(args);
        return client.request(...args);
      },
    };
    const writer = new ApiStatusWriter(recorded as unknown as KubeApiClient, pino({ level: 'silent' }));
    writer.attached({ namespace: 'default', name: 'p1', uid }, 'c1', status);
    await writer.settled();
    assert.deepEqual(
      sent.map(([method, path]) => `${method} ${path}`),
      ['PATCH /api/v1/namespaces/default/pods/p1'],
      'one request, a PATCH (no GET and PUT of the whole pod)',
    );
    const options = sent[0]?.[3];
    assert.equal(options?.contentType, 'application/merge-patch+json');
    const body = options?.body as { metadata: { uid?: string; annotations: Record<string, string> } };
    assert.deepEqual(Object.keys(body), ['metadata'], 'the patch names metadata alone');
    assert.deepEqual(Object.keys(body.metadata).sort(), ['annotations', 'uid'], 'the UID precondition and annotations');
    assert.equal(body.metadata.uid, uid);
    assert.deepEqual(Object.keys(body.metadata.annotations), [NETWORK_STATUS_ANNOTATION], 'the one annotation');
    const got = await annotations('p1');
    assert.deepEqual(JSON.parse(got[NETWORK_STATUS_ANNOTATION]!), status);
    assert.equal(got['team.example/owner'], 'me');
  });

  it('never writes to another pod of the same name (the UID is a precondition), nor to a pod that is gone', async () => {
    await pod('p2');
    const writer = new ApiStatusWriter(client, pino({ level: 'silent' }), { firstDelayMs: 10 });
    writer.attached({ namespace: 'default', name: 'p2', uid: '00000000-0000-0000-0000-000000000000' }, 'c2', status);
    writer.attached({ namespace: 'default', name: 'gone', uid: '00000000-0000-0000-0000-000000000001' }, 'c3', status);
    const started = Date.now();
    await writer.settled();
    assert.ok(Date.now() - started < 3000, 'refusals end the retries at once');
    assert.equal((await annotations('p2'))[NETWORK_STATUS_ANNOTATION], undefined);
  });

  it('retries while the API cannot be reached, then gives up without failing anything', async () => {
    const dead = join(api.dir, 'dead.kubeconfig');
    writeFileSync(
      dead,
      JSON.stringify({
        apiVersion: 'v1',
        kind: 'Config',
        'current-context': 'x',
        clusters: [{ name: 'x', cluster: { server: 'https://127.0.0.1:1', 'insecure-skip-tls-verify': true } }],
        users: [{ name: 'u', user: { token: 't' } }],
        contexts: [{ name: 'x', context: { cluster: 'x', user: 'u' } }],
      }),
    );
    const unreachable = apiClientFor(dead);
    // Every PATCH the writer sends still goes to the real (unreachable) client; this only notes when it was sent.
    const sentAt: number[] = [];
    const counted = {
      request: (...args: Parameters<KubeApiClient['request']>) => {
        sentAt.push(performance.now());
        return unreachable.request(...args);
      },
    };
    const lines: string[] = [];
    const log = pino({ level: 'debug' }, { write: (l: string) => void lines.push(l) });
    const writer = new ApiStatusWriter(counted as unknown as KubeApiClient, log, { firstDelayMs: 50, attempts: 3 });
    writer.attached({ namespace: 'default', name: 'p1' }, 'c4', status);
    await writer.settled();
    unreachable.close();
    assert.equal(sentAt.length, 3, 'the first PATCH and two retries');
    const gaps = sentAt.slice(1).map((at, i) => at - sentAt[i]!);
    assert.ok(
      gaps[0]! >= 45 && gaps[1]! >= 95,
      `backing off 50 ms, then 100 ms: ${gaps.map((g) => g.toFixed(0)).join(', ')} ms`,
    );
    assert.ok(
      lines.some((l) => /not written after retries/.test(l)),
      lines.join('\n'),
    );
  });
});
