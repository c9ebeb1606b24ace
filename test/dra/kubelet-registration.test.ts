/**
 * The node's plexus.io ResourceSlices follow whether the kubelet knows the driver, without a kubelet: a fake kubelet
 * does what the kubelet's plugin manager does (GetInfo on the registration socket, a connection kept to the DRA
 * socket, NotifyRegistrationStatus) against the real sockets under a directory of the test's, and a fake API keeps
 * the slices. Published only once registered; withdrawn when plexusd stops (while its sockets still answer), when the
 * kubelet's connection is gone, and when the registration socket is served anew, until the kubelet registers again.
 */
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, describe, it } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import pino from 'pino';
import { unary } from '../../src/kubelet/grpc';
import { parseResources } from '../../src/deviceplugin/config';
import { DraDriver, type DraSettings } from '../../src/dra';
import { loadDraServices, type PluginInfo } from '../../src/dra/api';
import type { ClaimReader } from '../../src/dra/claims-api';
import type { PodPresence } from '../../src/dra/stale-claims';
import { KubeletRegistration } from '../../src/dra/kubelet-registration';
import { ok } from '../../src/cni/errors';
import type { KubeApiClient } from '../../src/k8s/api-client';
import { until } from '../support/until';

const root = mkdtempSync(join(tmpdir(), 'plexus-dra-reg-'));
after(() => rmSync(root, { recursive: true, force: true }));
let n = 0;
const freshDir = (): string => mkdtempSync(join(root, `d${n++}-`));
const silent = pino({ level: 'silent' });
const SLICES = '/apis/resource.k8s.io/v1/resourceslices';

/** The API as the slice publisher uses it: ResourceSlices kept in a map; each delete notes whether `during` held. */
class FakeSliceApi {
  readonly slices = new Map<string, unknown>();
  readonly deletes: { name: string; during: boolean }[] = [];
  during: () => boolean = () => true;

  request(method: string, path: string, _resource: string, options: { body?: unknown } = {}): Promise<unknown> {
    const name = decodeURIComponent(path.slice(SLICES.length + 1));
    const body = options.body as { metadata: { name: string } } | undefined;
    if (method === 'GET') return Promise.resolve(ok({ items: [...this.slices.values()] }));
    if (method === 'POST' || method === 'PUT') this.slices.set(body!.metadata.name, body);
    if (method === 'DELETE') {
      this.deletes.push({ name, during: this.during() });
      this.slices.delete(name);
    }
    return Promise.resolve(ok({}));
  }
}

/** What the kubelet's plugin manager and DRA manager do with a plugin's sockets. */
class FakeKubelet {
  private readonly services = loadDraServices();
  private dra: grpc.Client | undefined;

  constructor(private readonly sockets: { registration: string }) {}

  /** GetInfo, a connection to the endpoint it names (kept open), NotifyRegistrationStatus. */
  async register(): Promise<void> {
    this.leave();
    const reg = new this.services.RegistrationClient(
      `unix://${this.sockets.registration}`,
      grpc.credentials.createInsecure(),
    );
    try {
      const info = await unary<unknown, PluginInfo>(reg, 'GetInfo', {}, 5000);
      this.dra = new this.services.DraPluginClient.v1(`unix://${info.endpoint}`, grpc.credentials.createInsecure());
      const dra = this.dra;
      await new Promise<void>((resolve, reject) =>
        dra.waitForReady(Date.now() + 5000, (e) => (e ? reject(e) : resolve())),
      );
      await unary(reg, 'NotifyRegistrationStatus', { plugin_registered: true, error: '' }, 5000);
    } finally {
      reg.close();
    }
  }

  /** The kubelet exits: its connection to the DRA socket closes. */
  leave(): void {
    this.dra?.close();
    this.dra = undefined;
  }
}

const memifResources = () => {
  const r = parseResources({
    resources: [{ name: 'plexus.io/memif', kind: 'memif', count: 2, socketDir: freshDir(), offer: ['dra'] }],
  });
  if (!r.ok) throw r.error;
  return r.value;
};
const noClaims: ClaimReader = { get: () => Promise.resolve(ok(undefined)) };
const noPods: PodPresence = { exists: () => Promise.resolve(ok(false)) };

/** A started DRA driver on a fake API, with a fake kubelet for its sockets; `stop` ends both. */
async function startDriver(
  leftOver: readonly string[] = [],
): Promise<{ dra: DraDriver; api: FakeSliceApi; kubelet: FakeKubelet }> {
  const api = new FakeSliceApi();
  for (const name of leftOver) api.slices.set(name, { metadata: { name }, spec: { pool: { name: `n1/${name}` } } });
  const settings: DraSettings = {
    nodeName: 'n1',
    kubeletRoot: freshDir(),
    stateDir: freshDir(),
  };
  const fast = { ...settings, kubeletLostAfterMs: 200 };
  const ports = { api: api as unknown as KubeApiClient, claims: noClaims, pods: noPods };
  const dra = DraDriver.create(memifResources(), ports, fast, silent)!;
  await dra.start();
  return { dra, api, kubelet: new FakeKubelet(dra.plugin.sockets) };
}
const published = (api: FakeSliceApi) => () => (api.slices.size === 1 ? true : undefined);
const withdrawn = (api: FakeSliceApi) => () => (api.slices.size === 0 ? true : undefined);

describe("the node's plexus.io slices follow the kubelet's registration of the driver", () => {
  it('none is published before the kubelet registered the driver (one left from before is withdrawn); then it is', async () => {
    const { dra, api, kubelet } = await startDriver(['left-from-before']);
    try {
      const leftGone = () => (api.slices.has('left-from-before') ? undefined : true);
      await until('the slice left from before withdrawn', leftGone, 5000, 10);
      await dra.slices.reconcile();
      assert.equal(api.slices.size, 0, 'nothing published while the kubelet does not know the driver');
      await kubelet.register();
      await until('the slice published', published(api), 5000, 10);
    } finally {
      kubelet.leave();
      await dra.stop();
    }
  });

  it('plexusd stopping withdraws the slices while its sockets still answer', async () => {
    const { dra, api, kubelet } = await startDriver();
    try {
      await kubelet.register();
      await until('the slice published', published(api), 5000, 10);
      api.during = () => existsSync(dra.plugin.sockets.registration) && existsSync(dra.plugin.sockets.service);
    } finally {
      kubelet.leave();
      await dra.stop();
    }
    assert.equal(api.slices.size, 0, 'no slice left once stopped');
    assert.deepEqual(
      api.deletes.map((d) => d.during),
      [true],
      'deleted before the sockets went',
    );
  });

  it("the kubelet gone (its connection closed, none back): withdrawn; the restarted kubelet's registration publishes them", async () => {
    const { dra, api, kubelet } = await startDriver();
    try {
      await kubelet.register();
      await until('the slice published', published(api), 5000, 10);
      kubelet.leave();
      await until('the slice withdrawn', withdrawn(api), 5000, 10);
      await kubelet.register();
      await until('the slice published again', published(api), 5000, 10);
    } finally {
      kubelet.leave();
      await dra.stop();
    }
  });

  it('the registration socket removed: withdrawn when it is served anew, published once the kubelet registers again', async () => {
    const { dra, api, kubelet } = await startDriver();
    try {
      await kubelet.register();
      await until('the slice published', published(api), 5000, 10);
      rmSync(dra.plugin.sockets.registration);
      await until('the slice withdrawn', withdrawn(api), 5000, 10);
      await until('served anew', () => (existsSync(dra.plugin.sockets.registration) ? true : undefined), 5000, 10);
      await sleep(300); // the kubelet's old connection is gone: nothing comes back without a registration
      await dra.slices.reconcile();
      assert.equal(api.slices.size, 0);
      await kubelet.register();
      await until('the slice published again', published(api), 5000, 10);
    } finally {
      kubelet.leave();
      await dra.stop();
    }
  });
});

describe('whether the kubelet knows the driver', () => {
  const watch = (lostAfterMs = 100) => {
    const changes: string[] = [];
    const registration = new KubeletRegistration((known) => changes.push(known ? 'known' : 'unknown'), lostAfterMs);
    return { registration, changes };
  };

  it('known only once NotifyRegistrationStatus says registered; a refusal is not', () => {
    const { registration, changes } = watch();
    registration.connectionOpened();
    assert.equal(registration.known, false, 'a connection alone is no registration');
    registration.notified({ plugin_registered: false, error: 'bad version' });
    assert.equal(registration.known, false);
    registration.notified({ plugin_registered: true, error: '' });
    assert.equal(registration.known, true);
    assert.deepEqual(changes, ['known']);
    registration.close();
  });

  it('a connection that closes and comes back within the grace keeps it known (the idle reconnect)', async () => {
    const { registration, changes } = watch();
    registration.notified({ plugin_registered: true, error: '' });
    registration.connectionOpened();
    registration.connectionClosed();
    registration.connectionOpened();
    await sleep(200);
    assert.equal(registration.known, true);
    assert.deepEqual(changes, ['known']);
    registration.close();
  });

  it('no connection back within the grace: unknown; the kubelet connecting again (while it registers) makes it known', async () => {
    const { registration, changes } = watch();
    registration.notified({ plugin_registered: true, error: '' });
    registration.connectionOpened();
    registration.connectionClosed();
    await until('unknown', () => (registration.known ? undefined : true), 2000, 10);
    registration.connectionOpened();
    assert.equal(registration.known, true);
    assert.deepEqual(changes, ['known', 'unknown', 'known']);
    registration.close();
  });

  it('deregistered (sockets served anew, or closed): unknown, and only a new registration makes it known again', () => {
    const { registration, changes } = watch();
    registration.notified({ plugin_registered: true, error: '' });
    registration.connectionOpened();
    registration.deregistered('the DRA sockets are served anew');
    registration.connectionClosed();
    registration.connectionOpened();
    assert.equal(registration.known, false);
    registration.notified({ plugin_registered: true, error: '' });
    assert.equal(registration.known, true);
    assert.deepEqual(changes, ['known', 'unknown', 'known']);
    registration.close();
  });
});
