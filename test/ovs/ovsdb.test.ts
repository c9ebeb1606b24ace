/**
 * The OVSDB client and switch ports against a real ovsdb-server (Debian's openvswitch-switch), with no switch daemon:
 * transactions, errors with their codes, and memif secrets kept out of error details.
 */
import assert from 'node:assert/strict';
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { OvsdbClient } from '../../src/ovs/ovsdb';
import { SwitchPorts } from '../../src/ovs/ports';
import { stopProcess } from '../support/processes';
import { until } from '../support/until';
import { expectedPrerequisites } from '../support/prerequisites';

const SCHEMA = '/usr/share/openvswitch/vswitch.ovsschema';
const missing =
  existsSync(SCHEMA) && existsSync('/usr/sbin/ovsdb-server')
    ? undefined
    : 'ovsdb-server is not installed (scripts/setup.sh installs openvswitch-switch)';

describe('OVSDB client on a real ovsdb-server', { skip: expectedPrerequisites(missing) }, () => {
  let dir: string;
  let server: ChildProcess | undefined;
  let db: OvsdbClient;
  let socket: string;

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'plexus-ovsdb-'));
    socket = join(dir, 'db.sock');
    execFileSync('ovsdb-tool', ['create', join(dir, 'conf.db'), SCHEMA]);
    server = spawn(
      'ovsdb-server',
      [join(dir, 'conf.db'), `--remote=punix:${socket}`, `--unixctl=${join(dir, 'ctl')}`],
      { stdio: 'ignore' },
    );
    await until('ovsdb-server to listen', () => (existsSync(socket) ? true : undefined), 10000);
    execFileSync('ovs-vsctl', [`--db=unix:${socket}`, '--no-wait', 'init']);
    execFileSync('ovs-vsctl', [`--db=unix:${socket}`, '--no-wait', 'add-br', 'pxtest0']);
    db = new OvsdbClient(socket, 3000);
  });
  after(async () => {
    db?.close();
    await stopProcess(server, 'SIGTERM');
    rmSync(dir, { recursive: true, force: true });
  });

  it('runs a transaction and answers its rows', async () => {
    const r = await db.transact([{ op: 'select', table: 'Bridge', where: [], columns: ['name'] }]);
    assert.ok(r.ok);
    assert.deepEqual(r.value[0]?.rows, [{ name: 'pxtest0' }]);
  });

  it("a refused transaction is an error with the database's reason, and the memif secret does not reach its details", async () => {
    // A wait that cannot hold fails the whole transaction, the insert after it included.
    const row = {
      name: 'pxdup',
      type: 'dpdk',
      options: ['map', [['dpdk-devargs', 'net_memif_x,role=server,socket=/run/x.sock,secret=TopSecret123']]],
    };
    const r = await db.transact([
      {
        op: 'wait',
        table: 'Bridge',
        where: [['name', '==', 'pxnothere']],
        columns: ['name'],
        until: '==',
        rows: [{ name: 'pxnothere' }],
        timeout: 0,
      },
      { op: 'insert', table: 'Interface', row },
    ]);
    assert.ok(!r.ok);
    assert.equal(r.error.code, 11);
    assert.match(r.error.message, /refused the change/);
    assert.doesNotMatch(r.error.details, /TopSecret123/);
    assert.match(r.error.details, /secret=\*\*\*/);
  });

  it('adding a port to a bridge the switch lacks is code 7 naming it, and nothing is made', async () => {
    const ports = new SwitchPorts(db, 2000);
    const r = await ports.add({
      bridge: 'pxnone0',
      port: 'pxmport',
      devargs: 'net_memif_pxmport,role=server,socket=/run/y.sock,secret=s',
      rxQueues: 1,
      externalIds: { 'plexus-owner': 't' },
    });
    assert.ok(!r.ok);
    assert.equal(r.error.code, 7);
    assert.match(r.error.message, /no bridge pxnone0/);
    const state = await ports.state('pxmport');
    assert.ok(state.ok);
    assert.equal(state.value, undefined);
  });

  it('removing a port that is not there succeeds', async () => {
    const r = await new SwitchPorts(db, 2000).remove('pxtest0', 'pxmgone');
    assert.ok(r.ok);
  });

  it('a database that is not there is "try again later" (11), naming its socket', async () => {
    const none = new OvsdbClient(join(dir, 'nothing.sock'), 1000);
    const r = await none.transact([{ op: 'select', table: 'Bridge', where: [], columns: ['name'] }]);
    none.close();
    assert.ok(!r.ok);
    assert.equal(r.error.code, 11);
    assert.match(r.error.message, /nothing\.sock cannot be reached/);
  });
});
