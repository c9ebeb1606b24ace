/**
 * The drivers' lifecycle as the registry runs it: start with a context, resync every interval and on request (never
 * two at once for one driver), stop the last first; and the per-instance config cache of native drivers.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import pino from 'pino';
import { ok } from '../../src/cni/errors';
import { createMemifDriver, switchPortStep } from '../../src/drivers/memif';
import { createMacvlanDriver } from '../../src/drivers/macvlan';
import { onePlugin, type Driver, type DriverContext, type UndoStep } from '../../src/drivers/driver';
import { DriverRegistry, type LifecycleSettings } from '../../src/drivers/registry';
import { FakeKernel } from '../support/fake-kernel';
import { until } from '../support/until';
import { plugin } from './support';

/** A logger whose lines a test reads. */
function capturedLog(): { log: pino.Logger; lines: Record<string, unknown>[] } {
  const lines: Record<string, unknown>[] = [];
  const log = pino(
    { level: 'debug' },
    { write: (s: string) => void lines.push(JSON.parse(s) as Record<string, unknown>) },
  );
  return { log, lines };
}

interface FakeDriver extends Driver {
  readonly calls: string[];
  context?: DriverContext;
  /** Resolves the resync running now. */
  release?: () => void;
}

/** A driver that records its lifecycle calls; its resync waits for `release` when `slow`. */
function fakeDriver(type: string, calls: string[], opts: { slow?: boolean; failing?: boolean } = {}): FakeDriver {
  const d: FakeDriver = {
    type,
    capabilities: [],
    calls,
    parse: () => ok(undefined),
    attach: () => Promise.resolve(ok({ interfaces: [], ips: [], routes: [] })),
    start(ctx) {
      d.context = ctx;
      calls.push(`start ${type}`);
    },
    async resync(why) {
      calls.push(`resync ${type}: ${why}`);
      if (opts.failing) throw new Error(`${type} cannot resync`);
      if (opts.slow) await new Promise<void>((resolve) => (d.release = resolve));
    },
    stop() {
      calls.push(`stop ${type}`);
    },
  };
  return d;
}

/** Lets the slow resync running now end. */
function release(d: FakeDriver): void {
  const end = d.release;
  d.release = undefined;
  end?.();
}

const settings = (log: pino.Logger, intervalMs = 3_600_000, steps: readonly UndoStep[] = []): LifecycleSettings => ({
  log,
  kernel: new FakeKernel(),
  recordedSteps: () => Promise.resolve(steps),
  resyncIntervalMs: intervalMs,
});

describe('driver lifecycle through the registry', () => {
  it('starts every driver in order with a context, resyncs each at start, and stops them the last first', async () => {
    const calls: string[] = [];
    const a = fakeDriver('alpha', calls);
    const b = fakeDriver('beta', calls);
    const registry = new DriverRegistry([a], b);
    await registry.start(settings(capturedLog().log));
    await until('both first resyncs', () => (calls.length >= 4 ? true : undefined), 2000);
    await registry.stop();
    assert.deepEqual(calls, [
      'start alpha',
      'start beta',
      'resync alpha: start',
      'resync beta: start',
      'stop beta',
      'stop alpha',
    ]);
    assert.ok(a.context && b.context, 'each driver got its context');
  });

  it('runs a resync every interval and when the driver asks, never two at once for one driver', async () => {
    const calls: string[] = [];
    const d = fakeDriver('slow', calls, { slow: true });
    const registry = new DriverRegistry([d], fakeDriver('delegate', []));
    await registry.start(settings(capturedLog().log, 20));
    await until('the first resync to start', () => (d.release ? true : undefined), 2000);
    // While the first one runs, the periodic ones and a request are skipped.
    d.context?.requestResync('reconnected');
    await new Promise((r) => setTimeout(r, 100));
    assert.deepEqual(calls, ['start slow', 'resync slow: start']);
    release(d);
    await until('a periodic resync', () => (d.release ? true : undefined), 2000);
    assert.equal(calls[2], 'resync slow: periodic check');
    release(d);
    await registry.stop();
    const before = calls.length;
    d.context?.requestResync('after stop');
    await new Promise((r) => setTimeout(r, 60));
    assert.equal(calls.length, before, 'nothing runs once the drivers are stopped');
  });

  it("runs a requested resync with the driver's reason", async () => {
    const calls: string[] = [];
    const d = fakeDriver('asker', calls);
    const registry = new DriverRegistry([d], fakeDriver('delegate', []));
    await registry.start(settings(capturedLog().log));
    await until('the first resync', () => (calls.includes('resync asker: start') ? true : undefined), 2000);
    d.context?.requestResync('reconnected to the switch database');
    await until(
      'the requested resync',
      () => (calls.includes('resync asker: reconnected to the switch database') ? true : undefined),
      2000,
    );
    await registry.stop();
  });

  it('logs a failed resync with the driver as component, and keeps running', async () => {
    const { log, lines } = capturedLog();
    const calls: string[] = [];
    const registry = new DriverRegistry([fakeDriver('broken', calls, { failing: true })], fakeDriver('delegate', []));
    await registry.start(settings(log, 20));
    await until(
      'two failed resyncs',
      () => (lines.filter((l) => l.msg === 'broken resync failed').length >= 2 ? true : undefined),
      2000,
    );
    await registry.stop();
    const line = lines.find((l) => l.msg === 'broken resync failed');
    assert.equal(line?.component, 'broken');
    assert.equal(line?.err, 'broken cannot resync');
  });

  it("answers a driver's dataplane readiness, and false for a driver that cannot say", async () => {
    const ready: Driver = { ...fakeDriver('up', []), ready: () => Promise.resolve(true) };
    const registry = new DriverRegistry([ready, fakeDriver('mute', [])], fakeDriver('delegate', []));
    assert.equal(await registry.ready('up'), true);
    assert.equal(await registry.ready('mute'), false);
    assert.equal(await registry.ready('nothere'), false);
  });
});

describe('memif driver lifecycle without a switch', () => {
  const port: UndoStep = switchPortStep({
    ovsdb: '/nonexistent/plexus-test/db.sock',
    bridge: 'br-user',
    port: 'pxm000000000001',
    devargs: 'net_memif_pxm000000000001,role=server,id=0,socket=/nonexistent/plexus-test/memif.sock,secret=s',
    rxQueues: 1,
    externalIds: {},
  });

  it("a resync reads the journal's ports and reports those it could not check on an unreachable switch", async () => {
    const { log, lines } = capturedLog();
    const registry = new DriverRegistry([createMemifDriver()], fakeDriver('delegate', []));
    await registry.start(settings(log, 3_600_000, [port]));
    const failed = await until(
      "the resync's report",
      () => lines.find((l) => l.msg === 'memif ports could not be checked or made again'),
      15_000,
    );
    await registry.stop();
    assert.equal(failed.component, 'memif');
    assert.equal(failed.why, 'start');
    assert.match(String((failed.failures as string[])[0]), /^pxm000000000001: /);
  });

  it('a node that never had a memif port reads its journal once, not every interval', async () => {
    let reads = 0;
    const registry = new DriverRegistry([createMemifDriver()], fakeDriver('delegate', []));
    await registry.start({
      log: capturedLog().log,
      kernel: new FakeKernel(),
      recordedSteps: () => {
        reads++;
        return Promise.resolve([]);
      },
      resyncIntervalMs: 20,
    });
    await new Promise((r) => setTimeout(r, 200));
    await registry.stop();
    assert.equal(reads, 1);
  });
});

describe('native config parsing', () => {
  it("parses a network's plugin object once per driver instance, and each instance keeps its own cache", () => {
    let parses = 0;
    const parse = (): ReturnType<typeof ok<number>> => ok(++parses);
    const first = onePlugin(parse);
    const second = onePlugin(parse);
    const config = plugin('n', { type: 'x' });
    assert.deepEqual([first([config]), first([config]), second([config])], [ok(1), ok(1), ok(2)]);
  });

  it('two drivers of one type share nothing: a fresh instance from each factory call', () => {
    assert.notEqual(createMacvlanDriver(), createMacvlanDriver());
    const registries = [new DriverRegistry(), new DriverRegistry()];
    assert.notEqual(registries[0]!.get('memif'), registries[1]!.get('memif'));
    assert.notEqual(registries[0]!.delegate, registries[1]!.delegate);
  });
});
