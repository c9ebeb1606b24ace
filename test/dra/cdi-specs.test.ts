/**
 * CDI specs of prepared claims (src/dra/cdi-specs.ts): a memif claim's spec carries exactly what the device plugin's
 * Allocate gives a memif pod, host devices get none, names never collide; Prepare writes the spec before it answers
 * the CDI device IDs, Unprepare and the stale-claim sweep remove it, writes never follow a planted link, and a start
 * removes every spec of ours that has no prepared record (and nothing else of the directory).
 */
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import { writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import pino from 'pino';
import { ok } from '../../src/cni/errors';
import { parseResources, type MemifResource, type ResourceConfig } from '../../src/deviceplugin/config';
import { MemifDevices } from '../../src/deviceplugin/memif-devices';
import { DraDriver } from '../../src/dra';
import {
  CDI_KIND,
  cdiDeviceId,
  cdiDeviceIds,
  CdiSpecs,
  cdiSpecFile,
  claimCdiSpec,
  type CdiSpec,
} from '../../src/dra/cdi-specs';
import type { ClaimReader, ResourceClaim } from '../../src/dra/claims-api';
import { DraInventory } from '../../src/dra/devices';
import { ClaimPreparer } from '../../src/dra/prepare';
import { PreparedClaims, type PreparedClaim } from '../../src/dra/prepared-claims';
import type { KubeApiClient } from '../../src/k8s/api-client';

const root = mkdtempSync(join(tmpdir(), 'plexus-dra-cdi-'));
after(() => rmSync(root, { recursive: true, force: true }));
let n = 0;
const freshDir = (): string => mkdtempSync(join(root, `d${n++}-`));
const silent = pino({ level: 'silent' });

function resources(socketDir: string, more: object = {}): ResourceConfig[] {
  const r = parseResources({
    resources: [
      { name: 'plexus.io/memif', kind: 'memif', count: 2, socketDir, offer: ['dra', 'device-plugin'], ...more },
      { name: 'plexus.io/nic', kind: 'host-device', devices: ['dummy-cdi0'], offer: ['dra'] },
    ],
  });
  if (!r.ok) throw r.error;
  return r.value;
}
const memifOf = (rs: ResourceConfig[]): MemifResource => rs.find((r): r is MemifResource => r.kind === 'memif')!;

const memifDevice = (device: string, socketDir: string, secret = 'S'.repeat(20)): PreparedClaim['devices'][number] => ({
  request: 'nic',
  pool: 'n1/plexus.io/memif',
  device,
  resourceName: 'plexus.io/memif',
  kind: 'memif',
  deviceID: device,
  socket: join(socketDir, device, 'memif.sock'),
  secret,
});

const claimOf = (uid: string, devices: PreparedClaim['devices']): PreparedClaim => ({
  v: 1,
  uid,
  namespace: 'ns',
  name: `c-${uid}`,
  pods: [{ name: 'p', uid: `pod-${uid}` }],
  devices,
  preparedAt: '2026-11-28T00:00:00.000Z',
});

/** A CDI fully qualified device name, as the CDI spec's parser accepts it: vendor/class=name. */
const QUALIFIED =
  /^[a-z0-9]([a-z0-9.-]*[a-z0-9])?\/[a-zA-Z0-9]([a-zA-Z0-9_.-]*[a-zA-Z0-9])?=[a-zA-Z0-9][a-zA-Z0-9_.:-]*$/;

describe('the CDI spec of a claim (pure)', () => {
  it("a memif claim's spec gives the container field by field what the device plugin's Allocate gives", () => {
    const socketDir = freshDir();
    const rs = resources(socketDir, { containerPath: '/run/memif' });
    const allocated = new MemifDevices(memifOf(rs), { stateDir: freshDir(), deviceInfoDir: freshDir() }).allocate([
      'memif1',
    ]);
    assert.ok(allocated.ok);
    const secret = allocated.value.envs.MEMIF_SECRET!;
    const spec = claimCdiSpec(claimOf('uid-a', [memifDevice('memif1', socketDir, secret)]), () => memifOf(rs))!;
    assert.equal(spec.kind, 'plexus.io/memif');
    assert.equal(spec.cdiVersion, '0.6.0');
    const env = Object.fromEntries(
      spec.containerEdits!.env!.map((e) => [e.slice(0, e.indexOf('=')), e.slice(e.indexOf('=') + 1)]),
    );
    assert.deepEqual(env, allocated.value.envs);
    assert.deepEqual(env, {
      MEMIF_SOCKET: '/run/memif/memif1/memif.sock',
      MEMIF_SECRET: secret,
      PLEXUS_DEVICES_PLEXUS_IO_MEMIF: 'memif1',
    });
    assert.deepEqual(
      spec.devices.map((d) => ({ name: d.name, mounts: d.containerEdits.mounts })),
      [
        {
          name: 'uid-a-memif1',
          mounts: allocated.value.mounts.map((m) => ({
            hostPath: m.host_path,
            containerPath: m.container_path,
            type: 'bind',
            options: ['rbind', 'rw'],
          })),
        },
      ],
    );
    assert.equal(spec.devices[0]!.containerEdits.mounts![0]!.hostPath, join(socketDir, 'memif1'));
  });

  it('two memif devices of one claim: MEMIF_SOCKET and MEMIF_SECRET list both, in order, as Allocate does', () => {
    const socketDir = freshDir();
    const rs = resources(socketDir);
    const spec = claimCdiSpec(
      claimOf('uid-b', [
        memifDevice('memif0', socketDir, 'A'.repeat(20)),
        memifDevice('memif1', socketDir, 'B'.repeat(20)),
      ]),
      () => memifOf(rs),
    )!;
    assert.deepEqual(spec.containerEdits!.env, [
      `MEMIF_SECRET=${'A'.repeat(20)},${'B'.repeat(20)}`,
      'MEMIF_SOCKET=/run/memif/memif0/memif.sock,/run/memif/memif1/memif.sock',
      'PLEXUS_DEVICES_PLEXUS_IO_MEMIF=memif0,memif1',
    ]);
    assert.deepEqual(
      spec.devices.map((d) => d.name),
      ['uid-b-memif0', 'uid-b-memif1'],
    );
  });

  it('a host device needs nothing in the container: no spec, no CDI device ID', () => {
    const nic: PreparedClaim['devices'][number] = {
      request: 'nic',
      pool: 'n1/plexus.io/nic',
      device: 'dummy-cdi0',
      resourceName: 'plexus.io/nic',
      kind: 'host-device',
      deviceID: 'dummy-cdi0',
    };
    assert.equal(
      claimCdiSpec(claimOf('uid-h', [nic]), () => undefined),
      undefined,
    );
    assert.deepEqual(cdiDeviceIds('uid-h', nic), []);
  });

  it('names: one file per claim, named after the driver; device IDs qualified and unique per claim', () => {
    const a = '8f0e7a3c-1d2b-4c5e-9f60-718293a4b5c6';
    const b = '0a1b2c3d-4e5f-4061-8273-94a5b6c7d8e9';
    assert.equal(cdiSpecFile(a), `plexus.io-${a}.json`);
    assert.notEqual(cdiSpecFile(a), cdiSpecFile(b));
    assert.equal(cdiDeviceId(a, 'memif0'), `${CDI_KIND}=${a}-memif0`);
    assert.match(cdiDeviceId(a, 'memif0'), QUALIFIED);
    assert.notEqual(cdiDeviceId(a, 'memif0'), cdiDeviceId(b, 'memif0'));
  });
});

/** Claims as the API would answer them: `name` allocated device `device` of the memif pool. */
class FakeClaims implements ClaimReader {
  readonly claims = new Map<string, ResourceClaim>();
  get(namespace: string, name: string): Promise<{ ok: true; value: ResourceClaim | undefined }> {
    return Promise.resolve({ ok: true, value: this.claims.get(`${namespace}/${name}`) });
  }
  add(name: string, uid: string, device: string): { namespace: string; name: string; uid: string } {
    this.claims.set(`ns/${name}`, {
      metadata: { namespace: 'ns', name, uid },
      status: {
        allocation: {
          devices: {
            results: [{ request: 'nic', driver: 'plexus.io', pool: 'n1/plexus.io/memif', device }],
            config: [],
          },
        },
        reservedFor: [{ resource: 'pods', name: `pod-${name}`, uid: `pod-${uid}` }],
      },
    });
    return { namespace: 'ns', name, uid };
  }
}

function bed(): { preparer: ClaimPreparer; claims: FakeClaims; cdiDir: string; devinfo: string; socketDir: string } {
  const socketDir = freshDir();
  const rs = resources(socketDir);
  const inventory = new DraInventory(rs, { nodeName: 'n1' });
  const cdiDir = join(freshDir(), 'cdi'); // not there yet: made at the first write
  const devinfo = freshDir();
  const claims = new FakeClaims();
  const preparer = new ClaimPreparer({
    claims,
    inventory,
    prepared: PreparedClaims.open(freshDir()),
    cdi: new CdiSpecs(cdiDir, (r) => inventory.memifResource(r)),
    deviceInfoDir: devinfo,
    log: silent,
  });
  return { preparer, claims, cdiDir, devinfo, socketDir };
}

const readSpec = (dir: string, uid: string): CdiSpec =>
  JSON.parse(readFileSync(join(dir, cdiSpecFile(uid)), 'utf8')) as CdiSpec;

describe('CDI specs on disk', () => {
  it('Prepare writes the spec before it answers the CDI device ID; Unprepare removes it', async () => {
    const { preparer, claims, cdiDir, devinfo, socketDir } = bed();
    const ref = claims.add('a', 'uid-a', 'memif0');
    const answer = await preparer.prepare([ref]);
    assert.deepEqual(answer['uid-a']?.devices[0]?.cdi_device_ids, ['plexus.io/memif=uid-a-memif0']);
    const spec = readSpec(cdiDir, 'uid-a');
    assert.deepEqual(
      spec.devices.map((d) => d.name),
      ['uid-a-memif0'],
    );
    assert.equal(spec.devices[0]!.containerEdits.mounts![0]!.hostPath, join(socketDir, 'memif0'));
    const info = JSON.parse(readFileSync(join(devinfo, 'dp', 'plexus.io-memif-memif0-device.json'), 'utf8')) as object;
    assert.deepEqual(info, {
      type: 'memif',
      version: '1.1.0',
      memif: { role: 'slave', path: '/run/memif/memif0/memif.sock', mode: 'ethernet' },
    });
    assert.deepEqual(await preparer.prepare([ref]), answer, 'asked again: the same answer');
    assert.deepEqual(await preparer.unprepare([ref]), { 'uid-a': { error: '' } });
    assert.deepEqual(readdirSync(cdiDir), [], 'the spec is gone');
    assert.ok(!existsSync(join(devinfo, 'dp', 'plexus.io-memif-memif0-device.json')), 'the device-info file is gone');
  });

  it('asked again after its spec was removed by hand, Prepare writes it again', async () => {
    const { preparer, claims, cdiDir } = bed();
    const ref = claims.add('b', 'uid-b', 'memif1');
    await preparer.prepare([ref]);
    rmSync(join(cdiDir, cdiSpecFile('uid-b')));
    await preparer.prepare([ref]);
    assert.equal(readSpec(cdiDir, 'uid-b').devices[0]!.name, 'uid-b-memif1');
  });

  it('the stale-claim sweep removes the spec of the claim it releases', async () => {
    const { preparer, claims, cdiDir } = bed();
    const ref = claims.add('c', 'uid-c', 'memif0');
    await preparer.prepare([ref]);
    claims.claims.clear();
    const released = await preparer.releaseStale({
      claims,
      pods: { exists: () => Promise.resolve(ok(false)) },
      log: silent,
    });
    assert.deepEqual(released, ['ns/c']);
    assert.deepEqual(readdirSync(cdiDir), []);
  });

  it('a symlink planted at the temp path is not written through', () => {
    const socketDir = freshDir();
    const rs = resources(socketDir);
    const dir = freshDir();
    const victim = join(freshDir(), 'victim');
    writeFileSync(victim, 'precious');
    symlinkSync(victim, join(dir, `${cdiSpecFile('uid-s')}.tmp`));
    new CdiSpecs(dir, () => memifOf(rs)).write(claimOf('uid-s', [memifDevice('memif0', socketDir)]));
    assert.equal(readFileSync(victim, 'utf8'), 'precious');
    assert.equal(readSpec(dir, 'uid-s').kind, CDI_KIND);
    assert.deepEqual(readdirSync(dir), [cdiSpecFile('uid-s')], 'no temp file left');
  });

  it("a start removes our specs without a prepared record and a crash's temp file; keeps the rest", () => {
    const socketDir = freshDir();
    const state = freshDir();
    const cdiDir = freshDir();
    const kept = PreparedClaims.open(state);
    kept.record(claimOf('uid-kept', [memifDevice('memif0', socketDir)]));
    for (const name of [cdiSpecFile('uid-kept'), cdiSpecFile('uid-gone'), `${cdiSpecFile('uid-cut')}.tmp`])
      writeFileSync(join(cdiDir, name), '{}');
    writeFileSync(join(cdiDir, 'vendor.com-gpu.json'), '{}');
    writeFileSync(join(cdiDir, 'plexus.io-notes.txt'), 'x');
    mkdirSync(join(state, 'dra', 'claims', 'uid-held.json')); // an unreadable record: its spec is held too
    writeFileSync(join(cdiDir, cdiSpecFile('uid-held')), '{}');
    const api = { request: () => Promise.resolve({ ok: true, value: {} }) } as unknown as KubeApiClient;
    const settings = { nodeName: 'n1', kubeletRoot: freshDir(), stateDir: state, cdiDir };
    DraDriver.create(resources(socketDir), { api }, settings, silent);
    assert.deepEqual(
      readdirSync(cdiDir).sort(),
      [cdiSpecFile('uid-held'), cdiSpecFile('uid-kept'), 'plexus.io-notes.txt', 'vendor.com-gpu.json'].sort(),
    );
  });
});
