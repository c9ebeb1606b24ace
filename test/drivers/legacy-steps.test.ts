/**
 * A journal written before driver steps were opaque (each driver's step in a shape of its own, journal v0 and v1) is
 * read and undone after an upgrade: its driver steps are read as their drivers' (version 0), run through the registry
 * by the driver that owns them, and found by the drivers that read them (memif's resync, the delegate's CHECK).
 */
import assert from 'node:assert/strict';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { invocationsIn } from '../../src/drivers/delegate';
import { DriverRegistry } from '../../src/drivers/registry';
import { switchPortsIn } from '../../src/drivers/memif/undo';
import { MemifSwitches } from '../../src/drivers/memif/switch';
import { Journal } from '../../src/engine/journal';
import { runUndoSteps } from '../../src/engine/transaction';
import { Kernel } from '../../src/kernel/kernel';
import { tempIpam } from './support';

const at = '2026-11-24T10:00:00.000Z';
const key = { network: 'default/legacy', ifname: 'net1' };

describe('a journal in the step shapes of a plexusd before this one', () => {
  let dir: string;
  let journalDir: string;
  let socketDir: string;
  let delLog: string;
  let binDir: string;
  let kernel: Kernel;
  let ipam: Awaited<ReturnType<typeof tempIpam>>;

  const delegateConfig = '{"cniVersion":"1.0.0","name":"legacy","type":"recorder"}';
  const delegateDel = () => ({
    kind: 'delegateDel',
    plugin: 'recorder',
    config: delegateConfig,
    env: { containerId: 'c0ffee01', netns: '', ifname: 'net1', args: 'K8S_POD_NAME=p', path: binDir },
  });
  const switchPort = {
    kind: 'deleteSwitchPort',
    ovsdb: '/nonexistent/plexus-legacy/db.sock',
    bridge: 'br-user',
    port: 'pxm0123456789ab',
    devargs: 'net_memif_pxm0123456789ab,role=server,id=0,socket=/nonexistent/plexus-legacy/memif.sock,secret=s',
    rxQueues: 1,
    externalIds: { 'plexus-owner': 'node-a' },
  };

  /** The lines a plexusd of the previous format wrote for one attachment of each driver with steps of its own. */
  const legacyLines = (): string[] =>
    [
      {
        v: 1,
        t: 'begin',
        meta: {
          containerId: 'c0ffee01',
          ifname: 'eth0',
          netns: '/var/run/netns/plexus-legacy-gone',
          pod: {},
          cniNetwork: 'podnet',
          networks: ['default/legacy'],
          startedAt: at,
        },
      },
      {
        v: 1,
        t: 'undo',
        step: { kind: 'releaseIpam', network: 'legacy', containerId: 'c0ffee01', ifname: 'eth0:net1' },
        a: key,
        at,
      },
      { v: 1, t: 'undo', step: { kind: 'removeSocketDir', path: socketDir }, a: key, at },
      { v: 1, t: 'undo', step: switchPort, a: key, at },
      { v: 1, t: 'undo', step: delegateDel(), a: key, at },
      {
        v: 1,
        t: 'undo',
        step: { kind: 'returnLink', netns: '/var/run/netns/plexus-legacy-gone', name: 'net9', hostName: 'eth9' },
        a: key,
        at,
      },
      // A v0 committed line: its details kept the delegated network's invocations.
      {
        t: 'committed',
        result: { interfaces: [], ips: [], routes: [] },
        cniVersion: '1.0.0',
        at,
        details: {
          attachments: [
            {
              ...key,
              driver: 'delegate',
              isDefault: false,
              result: { interfaces: [], ips: [], routes: [] },
              delegated: [delegateDel()],
            },
          ],
          networkStatus: [],
        },
      },
    ].map((line) => JSON.stringify(line));

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'plexus-legacy-steps-'));
    journalDir = join(dir, 'journal');
    socketDir = join(dir, 'memif', 'c0ffee01-net1');
    mkdirSync(socketDir, { recursive: true });
    writeFileSync(join(socketDir, 'secret'), 's');
    binDir = join(dir, 'bin');
    mkdirSync(binDir);
    delLog = join(dir, 'del.log');
    const recorder = join(binDir, 'recorder');
    writeFileSync(
      recorder,
      `#!/bin/sh\necho "$CNI_COMMAND $CNI_CONTAINERID $CNI_IFNAME $CNI_ARGS" >> ${delLog}\ncat >> ${delLog}\n`,
    );
    chmodSync(recorder, 0o755);
    mkdirSync(journalDir, { mode: 0o700 });
    writeFileSync(join(journalDir, 'c0ffee01@eth0.jsonl'), `${legacyLines().join('\n')}\n`);
    kernel = new Kernel();
    ipam = await tempIpam();
  });
  after(async () => {
    await kernel?.close();
    await ipam?.remove();
    rmSync(dir, { recursive: true, force: true });
  });

  it("reads each driver step as its driver's, version 0, with the fields it was written with", async () => {
    const record = await (await Journal.open(journalDir, false)).load('c0ffee01', 'eth0');
    assert.ok(record && !record.unreadable, 'the record is readable');
    assert.deepEqual(
      record.undo.map((s) => (s.kind === 'driver' ? `${s.driver}/${s.step} v${s.v}` : s.kind)),
      [
        'releaseIpam',
        'memif/removeSocketDir v0',
        'memif/deleteSwitchPort v0',
        'delegate/delegateDel v0',
        'host-device/returnLink v0',
      ],
    );
    const { kind: _kind, ...port } = switchPort;
    assert.deepEqual(switchPortsIn(record.undo, new MemifSwitches()), [port], "memif's resync finds the port");
    const delegated = record.details?.attachments[0]?.delegated ?? [];
    assert.deepEqual(
      invocationsIn(delegated).map((i) => i.config),
      [delegateConfig],
      'and CHECK the v0 invocations',
    );
  });

  it('undoes every step through the registry, each by the driver that owns it', async () => {
    const record = await (await Journal.open(journalDir, false)).load('c0ffee01', 'eth0');
    const registry = new DriverRegistry();
    const undone = await runUndoSteps(
      (s) => registry.undo(s, { kernel, ipam: ipam.ipam }),
      record?.undo ?? [],
      'the legacy record',
    );
    // Only the port fails: there is no switch at its database socket. The error is memif's own.
    assert.ok(!undone.ok);
    assert.match(undone.error.message, /could not undo 1 step\(s\)/);
    assert.match(undone.error.message, /deleteSwitchPort of the memif driver: .*removing memif port pxm0123456789ab/);
    assert.equal(existsSync(socketDir), false, 'memif removed the socket directory');
    assert.equal(
      readFileSync(delLog, 'utf8'),
      `DEL c0ffee01 net1 K8S_POD_NAME=p\n${delegateConfig}`,
      'the plugin got its DEL, byte for byte',
    );
  });
});
