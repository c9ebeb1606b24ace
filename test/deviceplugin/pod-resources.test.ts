/**
 * PodResourcesClient.devicesOf against a pod-resources server on a unix socket that behaves as a restarting kubelet
 * does (measured on 1.35.6, test/k8s/device-plugin-kubelet.test.ts): its socket is missing for about a second, then
 * its List answers no pods until its pod sources have synced, then the pods with their devices.
 */
import { serviceOf, unixTarget } from '../../src/kubelet/grpc';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { podResourcesPackage, type PodResources } from '../../src/deviceplugin/api';
import { PodResourcesClient } from '../../src/deviceplugin/pod-resources';
import { CniCode } from '../../src/cni/errors';

const root = mkdtempSync(join(tmpdir(), 'plexus-podres-'));
after(() => rmSync(root, { recursive: true, force: true }));
let n = 0;

const POD: PodResources = {
  name: 'p',
  namespace: 'default',
  containers: [{ name: 'c', devices: [{ resource_name: 'plexus.io/testnic', device_ids: ['nic1'] }] }],
};

/** A pod-resources server whose List answers what `answer` says at that moment. */
async function kubelet(
  socket: string,
  answer: () => PodResources[],
): Promise<{ lists: () => number; stop: () => Promise<void> }> {
  let lists = 0;
  const server = new grpc.Server();
  server.addService(serviceOf(podResourcesPackage(), 'PodResourcesLister').service, {
    List: (_call: unknown, done: grpc.sendUnaryData<{ pod_resources: PodResources[] }>) => {
      lists++;
      done(null, { pod_resources: answer() });
    },
  });
  await new Promise<void>((ok, fail) =>
    server.bindAsync(unixTarget(socket), grpc.ServerCredentials.createInsecure(), (e) => (e ? fail(e) : ok())),
  );
  return { lists: () => lists, stop: () => new Promise((r) => server.tryShutdown(() => r())) };
}

describe('pod-resources after a kubelet restart', () => {
  it('a pod the kubelet does not list yet is asked for again until it is, with its devices', async () => {
    const socket = join(root, `k${n++}.sock`);
    const syncedAt = Date.now() + 400;
    const server = await kubelet(socket, () => (Date.now() < syncedAt ? [] : [POD]));
    const client = new PodResourcesClient(socket, { relistMs: 50 });
    try {
      const got = await client.devicesOf('default', 'p');
      assert.ok(got.ok, got.ok ? '' : got.error.message);
      assert.deepEqual([...got.value], [['plexus.io/testnic', ['nic1']]]);
      assert.ok(server.lists() > 1, `asked again: ${server.lists()} Lists`);
    } finally {
      client.close();
      await server.stop();
    }
  });

  it('a kubelet whose socket is not there yet is waited for', async () => {
    const socket = join(root, `k${n++}.sock`);
    const client = new PodResourcesClient(socket, { relistMs: 50 });
    let server: Awaited<ReturnType<typeof kubelet>> | undefined;
    const late = new Promise<void>((r) =>
      setTimeout(() => void kubelet(socket, () => [POD]).then((s) => ((server = s), r())), 500),
    );
    try {
      const got = await client.devicesOf('default', 'p');
      assert.ok(got.ok, got.ok ? '' : got.error.message);
      assert.deepEqual(got.value.get('plexus.io/testnic'), ['nic1']);
    } finally {
      client.close();
      await late;
      await server?.stop();
    }
  });

  it('a pod listed without devices answers at once: no devices is an answer, not a reason to wait', async () => {
    const socket = join(root, `k${n++}.sock`);
    const server = await kubelet(socket, () => [{ ...POD, containers: [{ name: 'c', devices: [] }] }]);
    const client = new PodResourcesClient(socket, { podListedWithinMs: 5000 });
    try {
      const t0 = Date.now();
      const got = await client.devicesOf('default', 'p');
      assert.ok(got.ok);
      assert.equal(got.value.size, 0);
      assert.equal(server.lists(), 1);
      assert.ok(Date.now() - t0 < 1000);
    } finally {
      client.close();
      await server.stop();
    }
  });

  it('a pod never listed is error 11 after the bound, naming the pod and the socket', async () => {
    const socket = join(root, `k${n++}.sock`);
    const server = await kubelet(socket, () => []);
    const client = new PodResourcesClient(socket, { podListedWithinMs: 600, relistMs: 100 });
    try {
      const t0 = Date.now();
      const got = await client.devicesOf('default', 'gone');
      const took = Date.now() - t0;
      assert.ok(!got.ok);
      assert.equal(got.error.code, CniCode.TryAgainLater);
      assert.match(
        got.error.message,
        /the kubelet does not list pod default\/gone in pod-resources \(List on .*k\d+\.sock, asked for 0\.\d+ s\)/,
      );
      assert.match(got.error.details, /restarted/);
      assert.ok(took >= 600 && took < 2000, `bounded: ${took} ms`);
      assert.ok(server.lists() >= 4, `asked again: ${server.lists()} Lists`);
    } finally {
      client.close();
      await server.stop();
    }
  });

  it('no kubelet at all is error 11 after the bound, with the connection error', async () => {
    const client = new PodResourcesClient(join(root, 'none.sock'), { podListedWithinMs: 500, relistMs: 100 });
    try {
      const got = await client.devicesOf('default', 'p');
      assert.ok(!got.ok);
      assert.equal(got.error.code, CniCode.TryAgainLater);
      assert.match(
        got.error.message,
        /does not list pod default\/p .*: cannot ask the kubelet which devices pods have/,
      );
    } finally {
      client.close();
    }
  });
});
