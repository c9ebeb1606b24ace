/**
 * Where a 1-interface ADD's time goes, outside plexusd's code: the daemon's pieces (the real Kernel, Journal, Ipam,
 * drivers, engine and HTTP server, wired as src/node/main.ts wires them) run in this process, and each port the engine
 * uses is wrapped in a timing proxy. So the product pays nothing for the profile, and every microsecond is attributed
 * to the port call it was spent in; what the proxies do not see is the engine's own work (plan, locks, result).
 *
 *   node dist/scripts/lib/bench/floor-profile.js [--runs N] [--json FILE]     (root; under the heavy-test lock)
 *
 * Per run, in a netns made beforehand (untimed), rotating who goes first: an ADD through engine.add (the proxies record
 * its parts), one as an HTTP request to the in-process server, and one through bin/plexus-cni; each pod is deleted
 * with engine.del before the next (untimed).
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import pino from 'pino';
import { DaemonServer } from '../../../src/api/server';
import { CallSlots } from '../../../src/common/call-slots';
import { parseCniRequest } from '../../../src/cni/request';
import { DriverRegistry } from '../../../src/drivers/registry';
import { AttachmentEngine } from '../../../src/engine/engine';
import { Journal, JournalEntry } from '../../../src/engine/journal';
import { Ipam, type IpamBackend } from '../../../src/ipam';
import { Kernel, type KernelPort } from '../../../src/kernel/kernel';
import type { BatchOp } from '../../../src/kernel/types';
import { NetworkDirectory } from '../../../src/networks/directory';
import { referencePlugins } from '../../../test/support/plugin-dir';
import { invoke, newPod } from '../cni';
import { deleteLinkIfPresent, deleteNetns, freeTenNet, ipBatch, listNetns, netnsPath, uniquePrefix } from '../host';
import { httpOverSocket, shimBinary, writeNetworkDefinition } from '../plexusd';
import { fmt, round, summarize, table } from '../stats';
import { podnetConfig } from './subjects-setup';

type Parts = Map<string, number>;

/** The parts of the ADD being profiled; undefined between ADDs, so the DELs and the other paths are not counted. */
interface Recorder {
  current: Parts | undefined;
}

const add = (r: Recorder, part: string, ms: number): void => {
  if (r.current) r.current.set(part, (r.current.get(part) ?? 0) + ms);
};

async function timed<T>(r: Recorder, part: string, call: () => Promise<T>): Promise<T> {
  const t0 = performance.now();
  try {
    return await call();
  } finally {
    add(r, part, performance.now() - t0);
  }
}

const batchPart = (ops: readonly BatchOp[]): string => {
  const first = ops[0];
  if (first?.op === 'linkList') return 'kernel: link dump of the pod netns (taken names)';
  if (first?.op === 'linkAdd' && first.link.kind === 'veth') return 'kernel: the attachment batch (worker thread)';
  return `kernel: other (${ops.map((o) => o.op).join(',')})`;
};

function kernelProxy(kernel: Kernel, r: Recorder): KernelPort {
  return {
    batch: (netns, ops) => timed(r, batchPart(ops), () => kernel.batch(netns, ops)),
    getLink: (netns, name) => timed(r, 'kernel: getLink', () => kernel.getLink(netns, name)),
    deleteLink: (netns, name) => timed(r, 'kernel: deleteLink', () => kernel.deleteLink(netns, name)),
  };
}

type AsyncMethod = (...args: unknown[]) => Promise<unknown>;

/** `target` with the methods named in `parts` timed as those parts (and `wrap` applied to what they answer). */
function timedMethods<T extends object>(
  target: T,
  r: Recorder,
  parts: Readonly<Record<string, string>>,
  wrap?: (x: unknown) => unknown,
): T {
  return new Proxy(target, {
    get(t, key, receiver): unknown {
      const v: unknown = Reflect.get(t, key, receiver);
      if (typeof v !== 'function') return v;
      const method = (v as AsyncMethod).bind(t);
      const part = typeof key === 'string' ? parts[key] : undefined;
      if (part === undefined) return method;
      return async (...args: unknown[]): Promise<unknown> => {
        const answer = await timed(r, part, () => method(...args));
        return wrap ? wrap(answer) : answer;
      };
    },
  });
}

const ipamProxy = (ipam: Ipam, r: Recorder): IpamBackend =>
  timedMethods(ipam, r, { allocate: 'IPAM: allocate (lease file)' });

const entryProxy = (entry: JournalEntry, r: Recorder): JournalEntry =>
  timedMethods(entry, r, {
    record: 'journal: undo lines',
    event: 'journal: event lines',
    commit: 'journal: commit line',
    close: 'journal: close',
  });

const journalProxy = (journal: Journal, r: Recorder): Journal =>
  timedMethods(
    journal,
    r,
    { begin: 'journal: create + begin line', load: 'journal: look for an existing record' },
    (x) => (x instanceof JournalEntry ? entryProxy(x, r) : x),
  );

const forwarded = (cid: string, netns: string, socketPath: string) => ({
  env: {
    CNI_COMMAND: 'ADD',
    CNI_CONTAINERID: cid,
    CNI_NETNS: netns,
    CNI_IFNAME: 'eth0',
    CNI_PATH: referencePlugins(),
    CNI_ARGS: `IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=prof-${cid.slice(0, 8)};K8S_POD_INFRA_CONTAINER_ID=${cid}`,
  },
  stdin: JSON.stringify({ cniVersion: '1.1.0', name: 'plexus', type: 'plexus-cni', socketPath }),
});

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { runs: { type: 'string' }, json: { type: 'string' } } });
  const runs = Number(values.runs ?? 200);
  const prefix = uniquePrefix('pxp');
  const root = mkdtempSync(join('/var/lib', `${prefix}-`));
  const bridge = `${prefix}b`;
  const net = freeTenNet(150, 199);
  const networksDir = join(root, 'networks');
  mkdirSync(networksDir);
  // The bench's own default network (section 1), so the profile's ADDs are the same ADDs.
  await writeNetworkDefinition(networksDir, 'default', 'podnet', podnetConfig(bridge, net));
  const r: Recorder = { current: undefined };
  const kernel = new Kernel(1, undefined, { inlineWhen: () => true }); // as plexusd's for one call at a time (node-state.ts)
  const ipam = await Ipam.open(join(root, 'ipam'), { sync: false });
  const journal = await Journal.open(join(root, 'journal'), false);
  const log = pino({ level: 'silent' });
  const engine = new AttachmentEngine({
    ports: {
      kernel: kernelProxy(kernel, r),
      ipam: ipamProxy(ipam, r),
      journal: journalProxy(journal, r),
      networks: new NetworkDirectory(networksDir),
      drivers: new DriverRegistry(),
    },
    settings: {
      cniBinDir: referencePlugins(),
      naming: 'multus',
      selectionAnnotation: true,
      defaultNetworks: [],
      defaultNetwork: 'default/podnet',
      namespaceIsolation: false,
      globalNamespaces: [],
      systemNamespaces: [],
      limits: { interfacesPerPod: 32, annotationBytes: 32768 },
    },
    log,
  });
  const socket = join(root, 'plexus.sock');
  const server = new DaemonServer({ socketPath: socket, slots: new CallSlots(16, 1024) }, engine, { ready: true }, log);
  await server.listen();
  const names = Array.from({ length: 3 * (runs + 3) }, (_, i) => `${prefix}-${i}`);
  const samples = { engine: [] as number[], http: [] as number[], shim: [] as number[] };
  const parts: Parts[] = [];
  try {
    const made = ipBatch(names.map((n) => `netns add ${n}`));
    if (made.status !== 0) throw new Error(made.stderr);
    let k = 0;
    for (let i = 0; i < runs + 3; i++) {
      const ways = ['engine', 'http', 'shim'] as const;
      for (let j = 0; j < 3; j++) {
        const way = ways[(i + j) % 3]!;
        const netns = netnsPath(names[k++]!);
        const cid = `${prefix}${i}${way}`.padEnd(64, '0');
        const call = forwarded(cid, netns, socket);
        const request = parseCniRequest(call);
        if (!request.ok) throw request.error;
        let ms: number;
        if (way === 'engine') {
          const p: Parts = new Map();
          r.current = p;
          const t0 = performance.now();
          const added = await engine.add(request.value as Parameters<AttachmentEngine['add']>[0]);
          ms = performance.now() - t0;
          r.current = undefined;
          if (!added.ok) throw added.error;
          if (i >= 3) parts.push(p.set('total', ms));
        } else if (way === 'http') {
          const t0 = performance.now();
          const reply = await httpOverSocket(socket, 'POST', '/v1/cni', JSON.stringify(call));
          ms = performance.now() - t0;
          if (reply.headers['x-cni-exit-code'] !== '0') throw new Error(`HTTP ADD: ${reply.body}`);
        } else {
          const pod = { ...newPod('default', `prof-${i}`, netns), containerId: cid };
          const out = await invoke(
            {
              binary: shimBinary(),
              config: JSON.parse(call.stdin) as Record<string, unknown>,
              env: { CNI_PATH: referencePlugins() },
            },
            'ADD',
            pod,
          );
          if (out.exitCode !== 0) throw new Error(`shim ADD: ${out.stdout} ${out.stderr}`);
          ms = out.ms;
        }
        if (i >= 3) samples[way].push(ms);
        const del = parseCniRequest({ ...call, env: { ...call.env, CNI_COMMAND: 'DEL' } });
        if (!del.ok) throw del.error;
        const gone = await engine.del(del.value as Parameters<AttachmentEngine['del']>[0]);
        if (!gone.ok) throw gone.error;
      }
    }
  } finally {
    await server.close();
    await kernel.close();
    deleteNetns(listNetns(prefix));
    deleteLinkIfPresent(bridge);
    rmSync(root, { recursive: true, force: true });
  }
  const keys = [...new Set(parts.flatMap((p) => [...p.keys()]))].filter((k) => k !== 'total');
  const median = (xs: readonly number[]): number => {
    const sorted = [...xs].sort((x, y) => x - y);
    const mid = Math.floor(sorted.length / 2);
    return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
  };
  const rows: string[][] = [];
  const us = (ms: number): string => fmt(ms * 1000, 0);
  const engineMedian = median(samples.engine);
  let attributed = 0;
  for (const key of keys) {
    const m = median(parts.map((p) => p.get(key) ?? 0));
    attributed += m;
    rows.push([key, us(m)]);
  }
  rows.push(['engine: the rest (plan, locks, driver logic, result merge)', us(engineMedian - attributed)]);
  rows.push(['engine.add, median', us(engineMedian)]);
  rows.push([
    'HTTP server + request parse + result conversion (HTTP ADD - engine.add)',
    us(median(samples.http) - engineMedian),
  ]);
  rows.push(['HTTP ADD in-process, median', us(median(samples.http))]);
  rows.push([
    'exec of bin/plexus-cni + its socket round trip (shim ADD - HTTP ADD)',
    us(median(samples.shim) - median(samples.http)),
  ]);
  rows.push(['ADD through bin/plexus-cni, median', us(median(samples.shim))]);
  console.log(table(['part of a 1-interface ADD', 'µs (median)'], rows));
  if (values.json)
    writeFileSync(
      values.json,
      `${JSON.stringify({ runs, samples: { engine: summarize(samples.engine), http: summarize(samples.http), shim: summarize(samples.shim) }, parts: Object.fromEntries(keys.map((k) => [k, round(median(parts.map((p) => p.get(k) ?? 0)), 4)])) }, null, 2)}\n`,
    );
}

main().then(
  () => process.exit(0),
  (e: unknown) => {
    console.error(e instanceof Error ? (e.stack ?? e.message) : e);
    process.exit(1);
  },
);
