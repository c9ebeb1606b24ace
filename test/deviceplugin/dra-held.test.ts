/**
 * A resource offered both as a device plugin and as DRA devices: a device prepared for a claim is not offered to the
 * kubelet's device manager while the claim holds it. ListAndWatch (through the plugin's real gRPC socket) reports it
 * Unhealthy, Allocate refuses it, and once the claim is unprepared it is Healthy again and the change is announced.
 * Host devices are `lo` (up with carrier; only read) and interface names no host has; memif devices are sockets.
 */
import { serviceOf, unixTarget } from '../../src/kubelet/grpc';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import pino from 'pino';
import { devicePluginPackage, type Device, type ListAndWatchResponse } from '../../src/deviceplugin/api';
import type { MemifResource } from '../../src/deviceplugin/config';
import { KUBELET_SOCKET, ResourcePlugin } from '../../src/deviceplugin/plugin-server';
import { HostDevicePool } from '../../src/deviceplugin/host-device-pool';
import { MemifDevices } from '../../src/deviceplugin/memif-devices';
import { untilTrue } from '../support/until';

const root = mkdtempSync(join(tmpdir(), 'plexus-dp-dra-'));
after(() => rmSync(root, { recursive: true, force: true }));
let n = 0;
const freshDir = (): string => mkdtempSync(join(root, `d${n++}-`));

/** What DRA holds now: "<resource> <device>" entries the test adds and removes as Prepare and Unprepare would. */
const heldSet = (): { held: Set<string>; heldByDra: (resource: string, id: string) => boolean } => {
  const held = new Set<string>();
  return { held, heldByDra: (resource, id) => held.has(`${resource} ${id}`) };
};
const healthOf = (devices: readonly Device[]): string[] => devices.map((d) => `${d.ID}:${d.health}`);

describe('devices DRA holds are not offered by the device plugin', () => {
  it('a host device prepared for a claim is Unhealthy until unprepared, and each change is announced', async () => {
    const { held, heldByDra } = heldSet();
    const pool = new HostDevicePool(
      { name: 'plexus.io/nic', kind: 'host-device', devices: ['lo'] },
      {
        deviceInfoDir: freshDir(),
        healthIntervalMs: 20,
        heldByDra,
      },
    );
    let changes = 0;
    const stop = pool.watch(() => changes++);
    try {
      assert.deepEqual(healthOf(pool.devices()), ['lo:Healthy']);
      held.add('plexus.io/nic lo');
      await untilTrue('lo to turn Unhealthy', () => pool.devices()[0]!.health === 'Unhealthy', 1000, 10);
      assert.deepEqual(healthOf(pool.devices()), ['lo:Unhealthy']);
      held.delete('plexus.io/nic lo');
      await untilTrue('lo to turn Healthy again', () => pool.devices()[0]!.health === 'Healthy', 1000, 10);
      assert.deepEqual(healthOf(pool.devices()), ['lo:Healthy']);
      assert.equal(changes, 2, 'held, then freed: each announced once');
    } finally {
      stop();
    }
  });

  it('a host device DRA holds is refused by Allocate, naming the device and DRA; another of the pool is allocated', () => {
    const { held, heldByDra } = heldSet();
    const pool = new HostDevicePool(
      { name: 'plexus.io/nic', kind: 'host-device', devices: ['lo', 'plexusnone9'] },
      {
        deviceInfoDir: freshDir(),
        heldByDra,
      },
    );
    held.add('plexus.io/nic lo');
    const refused = pool.allocate(['lo']);
    assert.ok(!refused.ok);
    assert.match(refused.error.message, /plexus\.io\/nic device lo is prepared for a DRA claim/);
    assert.ok(pool.allocate(['plexusnone9']).ok);
  });

  it('a memif device DRA holds is Unhealthy and refused; the others stay offered', async () => {
    const { held, heldByDra } = heldSet();
    const config: MemifResource = {
      name: 'plexus.io/memif',
      kind: 'memif',
      count: 2,
      socketDir: freshDir(),
      containerPath: '/run/memif',
      mode: 'ethernet',
      healthFromSwitch: false,
    };
    const memif = new MemifDevices(config, { deviceInfoDir: freshDir(), healthIntervalMs: 20, heldByDra });
    let changes = 0;
    const stop = memif.watch(() => changes++);
    try {
      held.add('plexus.io/memif memif1');
      assert.deepEqual(healthOf(memif.devices()), ['memif0:Healthy', 'memif1:Unhealthy']);
      assert.equal(memif.allocate(['memif1']).ok, false);
      await untilTrue('the hold to be announced', () => changes > 0, 1000, 10);
      assert.equal(changes, 1, 'the hold is announced');
    } finally {
      stop();
    }
  });

  it("ListAndWatch on the plugin's socket streams the held device as Unhealthy, then Healthy once it is freed", async () => {
    const dir = freshDir();
    writeFileSync(join(dir, KUBELET_SOCKET), ''); // never dialled: the test reads the plugin's own socket
    const { held, heldByDra } = heldSet();
    const pool = new HostDevicePool(
      { name: 'plexus.io/nic', kind: 'host-device', devices: ['lo'] },
      {
        deviceInfoDir: freshDir(),
        healthIntervalMs: 20,
        heldByDra,
      },
    );
    const plugin = new ResourcePlugin(pool, dir, pino({ level: 'silent' }), {}, 60_000);
    await plugin.start();
    const Client = serviceOf(devicePluginPackage(), 'DevicePlugin');
    const client = new Client(unixTarget(plugin.socketPath), grpc.credentials.createInsecure());
    const seen: string[][] = [];
    try {
      const lister = client as unknown as {
        ListAndWatch(req: object): grpc.ClientReadableStream<ListAndWatchResponse>;
      };
      const watch = lister.ListAndWatch({});
      watch.on('data', (r: ListAndWatchResponse) => seen.push(healthOf(r.devices ?? [])));
      watch.on('error', () => undefined);
      const waitFor = (want: string): Promise<void> =>
        untilTrue(`ListAndWatch to send ${want}`, () => seen.at(-1)?.[0] === want, 2000, 10);
      await waitFor('lo:Healthy');
      held.add('plexus.io/nic lo');
      await waitFor('lo:Unhealthy');
      held.delete('plexus.io/nic lo');
      await waitFor('lo:Healthy');
      watch.cancel();
    } finally {
      client.close();
      await plugin.stop();
    }
  });
});
