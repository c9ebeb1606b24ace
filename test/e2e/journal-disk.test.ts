/**
 * A journal that cannot be written: a full disk (the state dir on a small tmpfs this test mounts) and a journal
 * directory removed while plexusd runs. The runtime hears code 5 with what to do, /healthz says so, nothing is left
 * that blocks a retry, and no lease of a live pod is released, then or after a restart.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import {
  closeSync,
  existsSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
  writeSync,
} from 'node:fs';
import { request } from 'node:http';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { DaemonFixture, podCall, podMaker, type TestPod } from '../support/daemon';
import { NetnsFixture, uniquePrefix } from '../support/netns';

const prefix = uniquePrefix('pk');
const fx = new NetnsFixture(prefix);
const daemon = new DaemonFixture('podnet', { metricsAddress: '127.0.0.1:0', logLevel: 'info' });
const newPod = podMaker(fx, prefix, ['eth0']);
const filler = join(daemon.stateDir, 'filler');
let mounted = false;
let port = 0;

before(async () => {
  fx.trackHostLink(`${prefix}br`);
  daemon.writeBridgeNetwork({
    name: 'podnet',
    bridge: `${prefix}br`,
    subnet: `10.${200 + Math.floor(Math.random() * 50)}.${Math.floor(Math.random() * 250)}.0/24`,
  });
  mkdirSync(daemon.stateDir, { recursive: true });
  execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=2m,mode=0700', `${prefix}-state`, daemon.stateDir]);
  mounted = true;
  await startDaemon();
});
after(async () => {
  await daemon.kill('SIGTERM');
  if (mounted) execFileSync('umount', [daemon.stateDir]);
  await daemon.stop();
  fx.cleanup();
});

async function startDaemon(): Promise<void> {
  const before = daemon.stderr.length;
  await daemon.start();
  port = Number(/"address":"127\.0\.0\.1:(\d+)".*serving \/metrics/.exec(daemon.stderr.slice(before))?.[1]);
}

function healthz(): Promise<{ status: number; body: { checks?: Record<string, string> } }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path: '/healthz', method: 'GET' }, (res) => {
      let body = '';
      res.on('data', (c: Buffer) => (body += c.toString()));
      res.on('end', () =>
        resolve({ status: res.statusCode ?? 0, body: JSON.parse(body) as { checks?: Record<string, string> } }),
      );
    });
    req.on('error', reject);
    req.end();
  });
}

/** Fills the tmpfs to the last page. */
function fillDisk(): void {
  const fd = openSync(filler, 'w');
  const chunk = Buffer.alloc(4096, 1);
  try {
    for (;;) writeSync(fd, chunk);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'ENOSPC') throw e;
  } finally {
    closeSync(fd);
  }
}

const add = (pod: TestPod) => podCall(daemon, 'ADD', pod, daemon.runtimeConfig());
const del = (pod: TestPod) => podCall(daemon, 'DEL', pod, daemon.runtimeConfig());
const addressOf = (out: Awaited<ReturnType<typeof add>>): string =>
  String((out.json as { ips: { address: string }[] }).ips[0]?.address).split('/')[0]!;

describe('a journal that cannot be written', () => {
  it('a full disk: ADD fails with code 5 naming the cause, /healthz says so, and the retry succeeds once there is room', async () => {
    const pod = newPod();
    fillDisk();
    try {
      const failed = await add(pod);
      assert.equal(failed.json?.code, 5, failed.stdout);
      assert.match(String(failed.json?.msg), /ENOSPC/);
      assert.match(String(failed.json?.details), /free space/);
      assert.deepEqual(daemon.journalFiles(), [], 'no empty record is left behind');
      await new Promise((r) => setTimeout(r, 1100)); // the probe's answer is kept for a second
      const sick = await healthz();
      assert.equal(sick.status, 503);
      assert.match(sick.body.checks?.journal ?? '', /ENOSPC/);
    } finally {
      rmSync(filler, { force: true });
    }
    const retried = await add(pod);
    assert.equal(retried.code, 0, retried.stdout);
    await new Promise((r) => setTimeout(r, 1100));
    assert.equal((await healthz()).status, 200);
    assert.equal((await del(pod)).code, 0);
  });

  it('a journal directory removed while plexusd runs is made again, and after a restart the live pod keeps its lease', async () => {
    const live = newPod();
    const first = await add(live);
    assert.equal(first.code, 0, first.stdout);
    rmSync(join(daemon.stateDir, 'journal'), { recursive: true, force: true });
    const next = newPod();
    const second = await add(next);
    assert.equal(second.code, 0, `an ADD after the removal succeeds: ${second.stdout}`);
    assert.ok(existsSync(join(daemon.stateDir, 'journal', 'LOST')), 'the loss is marked');
    await daemon.kill('SIGTERM');
    const before = daemon.stderr.length;
    await startDaemon();
    assert.ok(
      daemon.leases('podnet').includes(addressOf(first)),
      'the live pod whose record was lost keeps its address',
    );
    assert.ok(daemon.leases('podnet').includes(addressOf(second)));
    assert.match(daemon.stderr.slice(before), /journal records were lost/);
    assert.equal((await del(next)).code, 0);
    assert.equal((await del(live)).code, 0, 'DEL of a pod without a record succeeds');
    assert.deepEqual(
      readdirSync(join(daemon.stateDir, 'journal')).filter((n) => n.endsWith('.jsonl')),
      [],
    );
  });

  it('a read-only state dir with a half-done ADD to undo: plexusd starts, ADD is code 5, and all is undone once writable', async () => {
    const pod = newPod();
    const out = await add(pod);
    assert.equal(out.code, 0, out.stdout);
    await daemon.kill('SIGTERM');
    // As if plexusd had died before its commit: complete lines, no committed one.
    const path = join(daemon.stateDir, 'journal', `${pod.cid}@eth0.jsonl`);
    const lines = readFileSync(path, 'utf8')
      .split('\n')
      .filter((l) => l && !l.includes('"t":"committed"'));
    writeFileSync(path, `${lines.join('\n')}\n`);
    execFileSync('mount', ['-o', 'remount,ro', daemon.stateDir]);
    try {
      await startDaemon();
      assert.ok(existsSync(path), 'the record it could not undo is kept');
      assert.ok(daemon.leases('podnet').includes(addressOf(out)));
      const refused = await add(newPod());
      assert.equal(refused.json?.code, 5, refused.stdout);
      assert.match(String(refused.json?.msg), /EROFS/);
      const sick = await healthz();
      assert.equal(sick.status, 503);
      assert.match(sick.body.checks?.journal ?? '', /EROFS/);
      await daemon.kill('SIGTERM');
    } finally {
      execFileSync('mount', ['-o', 'remount,rw', daemon.stateDir]);
    }
    await startDaemon();
    assert.ok(!existsSync(path), 'recovery undid it once it could write');
    assert.ok(!daemon.leases('podnet').includes(addressOf(out)));
  });

  it('a journal directory missing at start while leases exist: the leases are kept', async () => {
    const pod = newPod();
    const out = await add(pod);
    assert.equal(out.code, 0, out.stdout);
    await daemon.kill('SIGTERM');
    rmSync(join(daemon.stateDir, 'journal'), { recursive: true, force: true });
    await startDaemon();
    assert.ok(daemon.leases('podnet').includes(addressOf(out)), 'the lease of the pod whose record was lost is kept');
  });
});
