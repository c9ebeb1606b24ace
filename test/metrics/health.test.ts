/** The probes' answers: liveness is the kernel worker answering and memory under the ceiling; readiness adds start-up. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { DaemonHealth } from '../../src/metrics/health';

const MiB = 1048576;

describe('health', () => {
  it('is live and ready when the kernel worker answers, memory is under the ceiling and start-up is done', async () => {
    const h = new DaemonHealth({
      kernelAnswers: () => Promise.resolve(),
      ready: () => true,
      memoryCeilingBytes: 300 * MiB,
      rss: () => 120 * MiB,
    });
    assert.deepEqual(await h.live(), { ok: true, checks: { kernel: 'ok', memory: 'ok' } });
    assert.equal((await h.ready()).ok, true);
  });

  it('is live but not ready while recovering or syncing the API caches', async () => {
    const h = new DaemonHealth({ kernelAnswers: () => Promise.resolve(), ready: () => false });
    assert.equal((await h.live()).ok, true);
    const ready = await h.ready();
    assert.equal(ready.ok, false);
    assert.match(ready.checks.started!, /syncing the API caches/);
  });

  it('is not ready while a problem outside it blocks serving; a problem that does not is a warning', async () => {
    const problems = [
      { check: 'rbac', problem: 'the API refuses list pods', blocksServing: true },
      { check: 'rbac', problem: 'the API refuses patch pods', blocksServing: false },
    ];
    const h = new DaemonHealth({ kernelAnswers: () => Promise.resolve(), ready: () => true, problems: () => problems });
    assert.deepEqual(await h.ready(), {
      ok: false,
      checks: { kernel: 'ok', started: 'ok', rbac: 'the API refuses list pods' },
      warnings: { rbac: 'the API refuses patch pods' },
    });
    const warned = new DaemonHealth({
      kernelAnswers: () => Promise.resolve(),
      ready: () => true,
      problems: () => problems.slice(1),
    });
    assert.equal((await warned.ready()).ok, true);
    assert.equal((await warned.live()).ok, true);
  });

  it('is not live when the kernel worker does not answer in time', async () => {
    const h = new DaemonHealth({
      kernelAnswers: () => new Promise(() => undefined),
      ready: () => true,
      kernelTimeoutMs: 50,
    });
    const live = await h.live();
    assert.equal(live.ok, false);
    assert.equal(live.checks.kernel, 'the kernel worker has not answered for 50 ms');
    assert.equal((await h.ready()).ok, false);
  });

  it('is not live while the journal cannot be written, saying why, and live again once it can', async () => {
    let problem: string | undefined = 'plexusd cannot write its journal record /s/journal/.probe: ENOSPC';
    const h = new DaemonHealth({
      kernelAnswers: () => Promise.resolve(),
      ready: () => true,
      journalWritable: () => Promise.resolve(problem),
    });
    assert.deepEqual(await h.live(), { ok: false, checks: { kernel: 'ok', journal: problem } });
    problem = undefined;
    await new Promise((r) => setTimeout(r, 1001)); // asked at most once per second
    assert.deepEqual(await h.live(), { ok: true, checks: { kernel: 'ok', journal: 'ok' } });
  });

  it('is not live when the kernel worker fails', async () => {
    const h = new DaemonHealth({ kernelAnswers: () => Promise.reject(new Error('EBADF')), ready: () => true });
    const live = await h.live();
    assert.equal(live.ok, false);
    assert.equal(live.checks.kernel, 'the kernel worker failed: EBADF');
    assert.equal((await h.ready()).ok, false, 'not ready either: readiness includes liveness');
  });

  it('is not live over the memory ceiling, saying by how much', async () => {
    const h = new DaemonHealth({
      kernelAnswers: () => Promise.resolve(),
      ready: () => true,
      memoryCeilingBytes: 300 * MiB,
      rss: () => 350 * MiB,
    });
    const live = await h.live();
    assert.equal(live.ok, false);
    assert.equal(live.checks.memory, 'resident memory 350 MiB is over the ceiling of 300 MiB');
    assert.equal(live.checks.kernel, 'ok', 'the kernel worker is fine: memory alone makes it not live');
  });

  it('asks the kernel worker at most once a second, however often it is probed', async () => {
    let calls = 0;
    const h = new DaemonHealth({ kernelAnswers: () => Promise.resolve(void calls++), ready: () => true });
    await Promise.all([h.live(), h.ready(), h.live()]);
    await h.live();
    assert.equal(calls, 1);
  });
});
