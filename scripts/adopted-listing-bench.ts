/**
 * Listing the sandboxes Multus made, measured: N sandboxes as Multus v4 and libcni leave them (Multus's cache of each,
 * with three delegates, and libcni's record of each of its networks), then the time one listing takes and the longest
 * the event loop is kept from a timer meanwhile (what a pod's ADD waits when it arrives during a listing or a GC);
 * first the read-ahead plexusd starts with, then listings with nothing changed, then one after a sandbox went.
 *
 *   node dist/scripts/adopted-listing-bench.js [--sandboxes N] [--rounds R]
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import pino from 'pino';
import { MultusSandboxes } from '../src/adopt/multus-sandboxes';
import { ok } from '../src/cni/errors';

const report = (what: string, m: { ms: number; cpuMs: number; stallMs: number }): void =>
  console.log(
    `${what}: ${m.ms.toFixed(1)} ms (${m.cpuMs.toFixed(1)} ms of CPU), event loop stalled ${m.stallMs.toFixed(1)} ms`,
  );

const b64 = (v: unknown): string => Buffer.from(JSON.stringify(v)).toString('base64');

const networks = [
  {
    cniVersion: '1.0.0',
    name: 'podnet',
    type: 'bridge',
    bridge: 'cni0',
    ipam: { type: 'host-local', subnet: '10.1.0.0/16' },
  },
  {
    cniVersion: '1.0.0',
    name: 'mvnet',
    type: 'macvlan',
    master: 'eth1',
    ipam: { type: 'host-local', subnet: '10.2.0.0/16' },
  },
  { cniVersion: '1.0.0', name: 'staticnet', type: 'bridge', bridge: 'br1', ipam: { type: 'static' } },
];

/** One sandbox's files: Multus's cache and libcni's three records, in the shapes they write. */
function writeSandbox(dir: string, i: number): void {
  const cid = i.toString(16).padStart(64, '0');
  const delegates = networks.map((n, d) => ({
    Conf: n,
    ConfList: { cniVersion: '', name: '', plugins: null },
    Name: n.name,
    ifnameRequest: d === 0 ? '' : `net${d}`,
    macRequest: '',
    infinibandGUIDRequest: '',
    IsFilterV4Gateway: false,
    IsFilterV6Gateway: false,
    deviceID: '',
    resourceName: '',
    Bytes: b64(n),
    MasterPlugin: d === 0,
    ConfListPlugin: false,
  }));
  writeFileSync(join(dir, cid), JSON.stringify(delegates));
  for (const [d, n] of networks.entries()) {
    const ifName = d === 0 ? 'eth0' : `net${d}`;
    const record = {
      kind: 'cniCacheV1',
      containerId: cid,
      config: b64(n),
      ifName,
      networkName: n.name,
      netns: `/var/run/netns/cni-${cid.slice(0, 8)}`,
      cniArgs: [
        ['K8S_POD_NAMESPACE', 'default'],
        ['K8S_POD_NAME', `pod-${i}`],
        ['K8S_POD_UID', `uid-${i}`],
      ],
      capabilityArgs: {},
      result: { cniVersion: '1.0.0', interfaces: [{ name: ifName, sandbox: '/var/run/netns/x' }], ips: [] },
    };
    writeFileSync(join(dir, 'results', `${n.name}-${cid}-${ifName}`), JSON.stringify(record));
  }
}

/**
 * How long `run` takes, the CPU time this process spent meanwhile (on a busy machine wall time is mostly waiting for a
 * core), and the longest a 1 ms timer was kept waiting past its time.
 */
async function measure(run: () => unknown): Promise<{ ms: number; cpuMs: number; stallMs: number }> {
  let last = performance.now();
  let stall = 0;
  const timer = setInterval(() => {
    const now = performance.now();
    stall = Math.max(stall, now - last - 1);
    last = now;
  }, 1);
  await new Promise((r) => setTimeout(r, 5));
  last = performance.now();
  const start = performance.now();
  const cpu = process.cpuUsage();
  await run();
  const ms = performance.now() - start;
  const used = process.cpuUsage(cpu);
  await new Promise((r) => setTimeout(r, 5));
  clearInterval(timer);
  return { ms, cpuMs: (used.user + used.system) / 1000, stallMs: Math.max(0, stall) };
}

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { sandboxes: { type: 'string' }, rounds: { type: 'string' } } });
  const count = Number(values.sandboxes ?? 3000);
  const rounds = Number(values.rounds ?? 3);
  const dir = mkdtempSync(join(tmpdir(), 'plexus-adopted-bench-'));
  try {
    mkdirSync(join(dir, 'results'));
    for (let i = 0; i < count; i++) writeSandbox(dir, i);
    const sandboxes = new MultusSandboxes({
      cacheDir: dir,
      runtimeCacheDir: dir,
      cniBinDir: '/usr/lib/cni',
      exec: () => Promise.resolve(ok({ stdout: '', stderr: '' })),
      log: pino({ level: 'silent' }),
    });
    // What plexusd does as it starts: the caches are read ahead, a batch per turn of the event loop.
    report('reading ahead', await measure(() => sandboxes.refresh()));
    for (let r = 1; r <= rounds; r++) {
      let listed = 0;
      const m = await measure(() => (listed = sandboxes.list().length));
      report(`listing ${r} (${listed} sandboxes)`, m);
    }
    rmSync(join(dir, sandboxes.list()[0]!.containerId));
    report('listing after a sandbox went', await measure(() => sandboxes.list()));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((e: unknown) => {
  console.error(e);
  process.exit(1);
});
