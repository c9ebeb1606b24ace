/**
 * `npm run bench`: Plexus against the reference bridge plugin, through the real executables, in one
 * interleaved run so the ratios are honest. See docs/performance.md for what is measured and why.
 *
 *   node dist/scripts/bench.js [--iterations N] [--burst N] [--concurrency 1,4,16] [--json FILE]
 *        [--markdown FILE] [--subject name=/path/to/plugin:/path/to/config.json]... [--no-plexus]
 *        [--no-reference] [--no-multi] [--multi-concurrency N] [--state-sync true|false]
 */
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { CallsAborted, type Plugin, abortCalls } from './lib/cni';
import {
  createUplink,
  deleteLinkIfPresent,
  freeTenNet,
  hostLinks,
  linkExists,
  listNetns,
  machine,
  restoreForwardingOnTeardown,
  uniquePrefix,
} from './lib/host';
import { type MultiRuntime, plexusRuntime, referenceRuntime } from './lib/multinet';
import { Plexusd, hostLocalLeftovers, repoRoot, shimBinary, writeNetworkDefinition } from './lib/plexusd';
import { fmt, round } from './lib/stats';
import { type Subject, describeSubject, parseSubjectSpec } from './lib/subject';
import { Teardown } from './lib/teardown';
import { type MultiBurstFigures, type MultiVariant, measureMultiBurst, measureMultiLatency } from './lib/bench/multi';
import { type MultiReport, type Report, render } from './lib/bench/report';
import { type ShimFigures, measureShim } from './lib/bench/shim-cost';
import { type FloorFigures, floorReport, measureFloor } from './lib/bench/floor';
import { type SoakFigures, measureSoak } from './lib/bench/soak';
import {
  type BurstFigures,
  type LatencyFigures,
  WARMUP,
  hostLinksCreated,
  measureBurst,
  measureLatency,
} from './lib/bench/single';
import { AddressOverlapCheck } from './lib/bench/del-overlap';
import { teardownWaits, teardownsSettled } from './lib/bench/del-teardown';

const REFERENCE_DIR = '/usr/lib/cni';

interface Options {
  readonly iterations: number;
  readonly burst: number;
  readonly concurrency: readonly number[];
  readonly shimCalls: number;
  readonly json?: string;
  readonly markdown?: string;
  readonly extra: readonly string[];
  readonly plexus: boolean;
  readonly reference: boolean;
  readonly stateSync?: boolean;
  readonly stateParent?: string;
  readonly multi: boolean;
  readonly multiConcurrency: number;
  readonly soak: number;
  readonly floorRuns: number;
}

const USAGE = `usage: node dist/scripts/bench.js [options]
  --iterations N         ADD/DEL latency samples per subject (default 50)
  --state-parent DIR     where both subjects keep their state (default /var/lib, as on nodes)
  --burst N              pods per burst (default 110)
  --concurrency LIST     burst concurrency levels (default 1,4,16)
  --shim-calls N         VERSION calls for the shim overhead figures (default 50)
  --json FILE            also write every figure as JSON
  --markdown FILE        also write the result tables as Markdown
  --subject N=BIN:CONF   add a CNI plugin with its single-plugin config (repeatable)
  --no-plexus            leave Plexus out (e.g. before plexusd exists)
  --no-reference         leave the reference bridge plugin (and the reference runtime) out
  --no-multi             skip the multi-interface sections (4 and 5)
  --multi-concurrency N  concurrency of the multi-interface burst (default 16)
  --state-sync BOOL      pass --state-sync to plexusd (default: the daemon's default)
  --floor-runs N         runs of the floor's rtnetlink batch and exec (section 0, default 100; needs plexus)
  --soak N               ADD/DEL cycles of 2-network pods for plexusd's soak, RSS and fds per 1000 (default 3000; 0 skips)`;

const FLAGS = {
  iterations: { type: 'string' },
  'state-parent': { type: 'string' },
  burst: { type: 'string' },
  'shim-calls': { type: 'string' },
  concurrency: { type: 'string' },
  json: { type: 'string' },
  markdown: { type: 'string' },
  subject: { type: 'string', multiple: true },
  'no-plexus': { type: 'boolean' },
  'no-reference': { type: 'boolean' },
  'no-multi': { type: 'boolean' },
  'multi-concurrency': { type: 'string' },
  'state-sync': { type: 'string' },
  soak: { type: 'string' },
  'floor-runs': { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const;

function parseOptions(argv: readonly string[]): Options {
  let values;
  try {
    ({ values } = parseArgs({ args: [...argv], options: FLAGS, strict: true, allowPositionals: false }));
  } catch (e) {
    throw new Error(`${(e as Error).message}\n${USAGE}`, { cause: e });
  }
  if (values.help) {
    console.log(USAGE);
    process.exit(0);
  }
  const positive = (flag: string, v: string): number => {
    const n = Number(v);
    if (!Number.isInteger(n) || n < 1) throw new Error(`--${flag} needs a positive integer, got ${v}`);
    return n;
  };
  const count = (
    flag: 'iterations' | 'burst' | 'shim-calls' | 'multi-concurrency' | 'soak' | 'floor-runs',
    dflt: number,
  ): number => (values[flag] === undefined ? dflt : positive(flag, values[flag]));
  const stateSync = values['state-sync'];
  if (stateSync !== undefined && stateSync !== 'true' && stateSync !== 'false')
    throw new Error('--state-sync needs true or false');
  return {
    iterations: count('iterations', 50),
    burst: count('burst', 110),
    shimCalls: count('shim-calls', 50),
    multiConcurrency: count('multi-concurrency', 16),
    soak: values.soak === '0' ? 0 : count('soak', 3000),
    floorRuns: count('floor-runs', 100),
    concurrency:
      values.concurrency === undefined
        ? [1, 4, 16]
        : values.concurrency.split(',').map((c) => positive('concurrency', c)),
    extra: values.subject ?? [],
    plexus: !values['no-plexus'],
    reference: !values['no-reference'],
    multi: !values['no-multi'],
    ...(values.json !== undefined ? { json: values.json } : {}),
    ...(values.markdown !== undefined ? { markdown: values.markdown } : {}),
    ...(values['state-parent'] !== undefined ? { stateParent: values['state-parent'] } : {}),
    ...(stateSync !== undefined ? { stateSync: stateSync === 'true' } : {}),
  };
}

async function main(): Promise<number> {
  const options = parseOptions(process.argv.slice(2));
  const started = Date.now();
  const teardown = new Teardown();
  teardown.onSignal(abortCalls);
  const prefix = uniquePrefix('pxb');
  // State lives where nodes keep it (/var/lib: plexusd's --state-dir default, host-local's /var/lib/cni), for
  // both subjects alike: on some disks creating files in /tmp costs several times more than in /var/lib.
  const stateParent = options.stateParent ?? '/var/lib';
  await mkdir(stateParent, { recursive: true });
  const root = await mkdtemp(join(stateParent, `${prefix}-`));
  teardown.add(`remove ${root}`, () => rm(root, { recursive: true, force: true }));
  restoreForwardingOnTeardown(teardown);
  const problems: string[] = [];
  let exitCode = 0;
  try {
    const m = machine();
    console.log(`Plexus bench ${prefix}: ${m.cpus} CPUs (${m.cpuModel}), kernel ${m.kernel}, node ${m.node}`);
    const subjects: Subject[] = [];
    let daemon: Plexusd | undefined;
    let plexus: Subject | undefined;
    let reference: Subject | undefined;
    const taken: number[] = [];
    // Multi-interface sections: a veth standing in for a host uplink (the macvlan master), shared by both runtimes.
    const uplink = `${prefix}up`;
    if (options.multi && (options.plexus || options.reference)) createUplink(teardown, uplink, `${prefix}upp`);
    const plexusMulti: {
      plugin?: Plugin;
      bridges: string[];
      leftovers?: () => Promise<string[]>;
      settled?: () => Promise<unknown>;
      subnet?: number;
    } = { bridges: [] };
    const referenceMulti: {
      networks: Record<string, Plugin>;
      bridges: string[];
      leftovers?: () => Promise<string[]>;
      subnet?: number;
    } = { networks: {}, bridges: [] };
    if (options.plexus) {
      const second = freeTenNet(150, 199, taken);
      taken.push(second);
      const networksDir = join(root, 'networks');
      await mkdir(networksDir);
      const bridge = `${prefix}pb`;
      teardown.add(`delete bridge ${bridge}`, () => deleteLinkIfPresent(bridge));
      await writeNetworkDefinition(networksDir, 'default', 'podnet', {
        cniVersion: '1.1.0',
        name: 'podnet',
        type: 'bridge',
        bridge,
        isGateway: true,
        isDefaultGateway: true,
        ipMasq: false,
        ipam: { type: 'host-local', ranges: [[{ subnet: `10.${second}.0.0/16` }]] },
      });
      const pxHostLocal = join(root, 'px-host-local');
      if (options.multi) {
        const s2 = freeTenNet(150, 199, taken);
        taken.push(s2);
        plexusMulti.subnet = s2;
        const bridge2 = `${prefix}p2`;
        teardown.add(`delete bridge ${bridge2}`, () => deleteLinkIfPresent(bridge2));
        plexusMulti.bridges.push(bridge, bridge2);
        const ipam = (i: number, extra: Record<string, unknown> = {}): Record<string, unknown> => ({
          type: 'host-local',
          ranges: [[{ subnet: `10.${s2}.${i}.0/24` }]],
          ...extra,
        });
        await writeNetworkDefinition(networksDir, 'default', 'mv', {
          cniVersion: '1.1.0',
          name: 'mv',
          type: 'macvlan',
          master: uplink,
          mode: 'bridge',
          ipam: ipam(1),
        });
        await writeNetworkDefinition(networksDir, 'default', 'br2', {
          cniVersion: '1.1.0',
          name: 'br2',
          type: 'bridge',
          bridge: bridge2,
          isGateway: true,
          ipMasq: false,
          ipam: ipam(2),
        });
        await writeNetworkDefinition(networksDir, 'default', 'ptpnet', {
          cniVersion: '1.0.0',
          name: 'ptpnet',
          type: 'ptp',
          ipMasq: false,
          ipam: ipam(3),
        });
        // The same kind of network, forced to delegation: plexusd execs /usr/lib/cni/ptp (+ host-local) for it.
        await writeNetworkDefinition(
          networksDir,
          'default',
          'ptpdel',
          { cniVersion: '1.0.0', name: 'ptpdel', type: 'ptp', ipMasq: false, ipam: ipam(4, { dataDir: pxHostLocal }) },
          { 'plexus.io/delegate': 'true' },
        );
      }
      daemon = await Plexusd.start(teardown, {
        root: join(root, 'plexusd'),
        networksDir,
        defaultNetwork: 'default/podnet',
        cniBinDir: REFERENCE_DIR,
        logLevel: 'error',
        ...(options.stateSync !== undefined ? { stateSync: options.stateSync } : {}),
      });
      const d = daemon;
      plexus = {
        name: 'plexus',
        tag: 'px',
        plugin: {
          binary: shimBinary(),
          config: { cniVersion: '1.1.0', name: 'plexus', type: 'plexus-cni', socketPath: d.socket },
          env: { CNI_PATH: `${join(repoRoot(), 'bin')}:${REFERENCE_DIR}` },
        },
        bridge,
        leftovers: () => d.leftovers(),
        settled: () => teardownsSettled(d.stateDir),
      };
      subjects.push(plexus);
      plexusMulti.plugin = plexus.plugin;
      plexusMulti.settled = () => teardownsSettled(d.stateDir);
      plexusMulti.leftovers = async () => [
        ...(await d.leftovers()),
        ...(await hostLocalLeftovers(pxHostLocal, 'ptpdel')),
      ];
      console.log(`  plexus:    bin/plexus-cni -> plexusd pid ${d.pid}, bridge ${bridge}, 10.${second}.0.0/16`);
    }
    if (options.reference) {
      const second = freeTenNet(150, 199, taken);
      taken.push(second);
      const bridge = `${prefix}rb`;
      teardown.add(`delete bridge ${bridge}`, () => deleteLinkIfPresent(bridge));
      const dataDir = join(root, 'host-local');
      reference = describeSubject('reference', 'rf', {
        binary: join(REFERENCE_DIR, 'bridge'),
        // The Debian plugins (1.1.1) speak CNI up to 1.0.0.
        config: {
          cniVersion: '1.0.0',
          name: `${prefix}-ref`,
          type: 'bridge',
          bridge,
          isGateway: true,
          isDefaultGateway: true,
          ipMasq: false,
          ipam: { type: 'host-local', ranges: [[{ subnet: `10.${second}.0.0/16` }]], dataDir },
        },
        env: { CNI_PATH: REFERENCE_DIR },
      });
      subjects.push(reference);
      console.log(`  reference: ${REFERENCE_DIR}/bridge + host-local, bridge ${bridge}, 10.${second}.0.0/16`);
      if (options.multi) {
        const s2 = freeTenNet(150, 199, taken);
        taken.push(s2);
        referenceMulti.subnet = s2;
        const bridge2 = `${prefix}r2`;
        teardown.add(`delete bridge ${bridge2}`, () => deleteLinkIfPresent(bridge2));
        referenceMulti.bridges.push(bridge, bridge2);
        const ipam = (i: number): Record<string, unknown> => ({
          type: 'host-local',
          ranges: [[{ subnet: `10.${s2}.${i}.0/24` }]],
          dataDir,
        });
        const plugin = (type: string, name: string, config: Record<string, unknown>): Plugin => ({
          binary: join(REFERENCE_DIR, type),
          config: { cniVersion: '1.0.0', name, type, ...config },
          env: { CNI_PATH: REFERENCE_DIR },
        });
        referenceMulti.networks = {
          bridge: reference.plugin,
          mv: plugin('macvlan', `${prefix}-rmv`, { master: uplink, mode: 'bridge', ipam: ipam(1) }),
          br2: plugin('bridge', `${prefix}-rbr2`, { bridge: bridge2, isGateway: true, ipMasq: false, ipam: ipam(2) }),
          ptp: plugin('ptp', `${prefix}-rptp`, { ipMasq: false, ipam: ipam(3) }),
        };
        const names = Object.values(referenceMulti.networks).map((p) => String(p.config['name']));
        referenceMulti.leftovers = async () =>
          (await Promise.all(names.map((n) => hostLocalLeftovers(dataDir, n)))).flat();
      }
    }
    // The multi-interface variants: the same networks through Plexus (one call, annotation) and the reference runtime.
    const variants: MultiVariant[] = [];
    let burstRuntimes: MultiRuntime[] = [];
    if (options.multi) {
      const defs = [
        { key: '1', networks: 'bridge', selection: [] as string[], reference: ['bridge'] },
        { key: '2', networks: 'bridge + macvlan', selection: ['mv'], reference: ['bridge', 'mv'] },
        {
          key: '4',
          networks: 'bridge + macvlan + bridge2 + ptp (all native in plexus)',
          selection: ['mv', 'br2', 'ptpnet'],
          reference: ['bridge', 'mv', 'br2', 'ptp'],
        },
        {
          key: '4d',
          networks: 'bridge + macvlan + bridge2 + ptp (plexus delegates ptp)',
          selection: ['mv', 'br2', 'ptpdel'],
          reference: ['bridge', 'mv', 'br2', 'ptp'],
        },
        {
          key: 'burst',
          networks: 'bridge + macvlan + bridge2',
          selection: ['mv', 'br2'],
          reference: ['bridge', 'mv', 'br2'],
        },
      ];
      const build = (d: (typeof defs)[number]): MultiRuntime[] => {
        const out: MultiRuntime[] = [];
        if (plexusMulti.plugin !== undefined && plexusMulti.leftovers !== undefined) {
          out.push(
            plexusRuntime({
              name: 'plexus',
              tag: 'px',
              plugin: plexusMulti.plugin,
              selection: d.selection.join(', '),
              interfaces: d.reference.length,
              bridges: plexusMulti.bridges,
              leftovers: plexusMulti.leftovers,
              ...(plexusMulti.settled ? { settled: plexusMulti.settled } : {}),
            }),
          );
        }
        if (referenceMulti.leftovers !== undefined) {
          const networks = d.reference.map((k, i) => ({
            ifname: i === 0 ? 'eth0' : `net${i}`,
            plugin: referenceMulti.networks[k] as Plugin,
          }));
          out.push(
            referenceRuntime({
              name: 'reference',
              tag: 'rf',
              networks,
              bridges: referenceMulti.bridges,
              leftovers: referenceMulti.leftovers,
            }),
          );
        }
        return out;
      };
      for (const d of defs) {
        if (d.key === 'burst') burstRuntimes = build(d);
        else variants.push({ key: d.key, networks: d.networks, runtimes: build(d) });
      }
      if (variants.some((v) => v.runtimes.length > 0)) {
        console.log(
          `  multi-interface: uplink ${uplink} (veth); plexus networks mv, br2 (${prefix}p2), ptpnet (native), ptpdel (delegated) in 10.${String(plexusMulti.subnet ?? '-')}.0.0/16; ` +
            `reference runtime macvlan, bridge (${prefix}r2), ptp in 10.${String(referenceMulti.subnet ?? '-')}.0.0/16`,
        );
      }
    }
    for (const [i, spec] of options.extra.entries()) {
      const s = parseSubjectSpec(spec, `x${i}`);
      if (subjects.some((other) => other.name === s.name))
        throw new Error(`--subject ${s.name}: a subject with that name already exists`);
      subjects.push(s);
      // A bridge that did not exist before the run was made by the run: remove it afterwards.
      const b = s.bridge;
      if (b !== undefined && !linkExists(b)) teardown.add(`delete bridge ${b}`, () => deleteLinkIfPresent(b));
      console.log(`  ${s.name}: ${s.plugin.binary}${s.bridge !== undefined ? `, bridge ${s.bridge}` : ''}`);
    }
    if (subjects.length === 0) throw new Error('no subject to measure');
    teardown.add('delete host links the pods left', () => {
      const present = hostLinks();
      for (const links of hostLinksCreated.values()) for (const l of links) if (present.has(l)) deleteLinkIfPresent(l);
    });

    let floor: FloorFigures | undefined;
    if (plexus !== undefined) {
      console.log('\n0. the floor: rtnetlink batch and exec');
      floor = await measureFloor(teardown, prefix, root, shimBinary(), freeTenNet(150, 199, taken), options.floorRuns);
    }
    // While everything runs: no address may be on two interfaces (DEL answers before the links are gone).
    const overlapCheck = new AddressOverlapCheck(teardown, prefix);
    console.log('\n1. ADD/DEL latency');
    const latency = await measureLatency(teardown, prefix, subjects, options.iterations);
    console.log('1c. ADD/DEL latency in churn');
    const latencyChurn = await measureLatency(teardown, prefix, subjects, options.iterations, true);

    let shim: ShimFigures | undefined;
    if (plexus !== undefined && daemon !== undefined) {
      console.log('2. plexus-cni overhead');
      shim = await measureShim(teardown, prefix, plexus, daemon, reference, options.shimCalls);
    }

    console.log('3. bursts');
    const bursts: BurstFigures[] = [];
    for (const [level, c] of options.concurrency.entries()) {
      for (const [k] of subjects.entries()) {
        const subject = subjects[(k + level) % subjects.length] as Subject;
        const b = await measureBurst(teardown, prefix, subject, options.burst, c);
        bursts.push(b);
        console.log(
          `  ${subject.name} c=${c}: ${fmt(b.addPodsPerSecond)} pods/s, ${b.addFailures + b.delFailures} failures, ${b.duplicateIps.length} duplicate IPs, ${b.leaks.length} leaks`,
        );
      }
    }
    bursts.sort(
      (a, b) =>
        subjects.findIndex((s) => s.name === a.subject) - subjects.findIndex((s) => s.name === b.subject) ||
        a.concurrency - b.concurrency,
    );

    // VmHWM now covers sections 1-3; the multi-interface burst resets it to measure itself.
    const daemonPeak = daemon?.peakRssKiB();

    let multi: MultiReport | undefined;
    if (variants.some((v) => v.runtimes.length > 0)) {
      console.log('4. ADD/DEL latency with 1, 2 and 4 interfaces');
      const latencyMulti = await measureMultiLatency(teardown, prefix, variants, options.iterations);
      console.log(`5. burst of ${options.burst} pods with 3 networks, concurrency ${options.multiConcurrency}`);
      const burst: MultiBurstFigures[] = [];
      for (const r of burstRuntimes) {
        const b = await measureMultiBurst(
          teardown,
          prefix,
          r,
          options.burst,
          options.multiConcurrency,
          r.name === 'plexus' ? daemon : undefined,
        );
        burst.push(b);
        console.log(
          `  ${r.name}: ${fmt(b.addPodsPerSecond)} pods/s, ${b.addFailures + b.delFailures} failures, ${b.duplicateIps.length} duplicate IPs, ${b.leaks.length} leaks`,
        );
      }
      const ratiosMulti: MultiReport['ratios'] = {};
      for (const v of variants) {
        const px = latencyMulti.figures[v.key]?.['plexus'];
        const rf = latencyMulti.figures[v.key]?.['reference'];
        if (px !== undefined && rf !== undefined)
          ratiosMulti[v.key] = {
            addMedian: round(px.add.median / rf.add.median),
            delMedian: round(px.del.median / rf.del.median),
          };
      }
      const marginalAddMs: Record<string, number> = {};
      for (const name of ['plexus', 'reference']) {
        const one = latencyMulti.figures['1']?.[name];
        const four = latencyMulti.figures['4']?.[name];
        if (one !== undefined && four !== undefined)
          marginalAddMs[name] = round((four.add.median - one.add.median) / 3);
      }
      multi = {
        variants: variants.map((v) => ({
          key: v.key,
          interfaces: v.runtimes[0]?.interfaces ?? 0,
          networks: v.networks,
        })),
        latency: latencyMulti,
        ratios: ratiosMulti,
        marginalAddMs,
        burst,
      };
      for (const [key, row] of Object.entries(latencyMulti.figures)) {
        for (const [name, f] of Object.entries(row)) {
          for (const e of f.failures.slice(0, 5)) problems.push(`${name} ${key}-interface latency: ${e}`);
          for (const l of f.leaks) problems.push(`${name} ${key}-interface latency leak: ${l}`);
        }
      }
      for (const [name, leaks] of Object.entries(latencyMulti.sharedLeaks))
        for (const l of leaks) problems.push(`${name} multi-interface latency leak: ${l}`);
      for (const b of burst) {
        for (const e of b.errors) problems.push(`${b.subject} 3-network burst: ${e}`);
        for (const d of b.duplicateIps) problems.push(`${b.subject} 3-network burst: duplicate IP ${d}`);
        for (const l of b.leaks) problems.push(`${b.subject} 3-network burst leak: ${l}`);
      }
    }

    let soak: SoakFigures | undefined;
    const soakRuntime = variants.find((v) => v.key === '2')?.runtimes.find((r) => r.name === 'plexus');
    if (options.soak > 0 && soakRuntime !== undefined && daemon !== undefined) {
      console.log(`6. soak: ${options.soak} ADD/DEL cycles of 2-network pods`);
      soak = await measureSoak(teardown, prefix, soakRuntime, 'bridge + macvlan', daemon, options.soak);
      for (const e of soak.errors) problems.push(`soak: ${e}`);
      for (const l of soak.leaks) problems.push(`soak leak: ${l}`);
    }

    const daemonExit = daemon !== undefined ? await daemon.stop() : undefined;
    const overlap = await overlapCheck.stop();
    for (const e of overlap.examples) problems.push(`address on two interfaces: ${e}`);
    if (overlap.overlaps > overlap.examples.length)
      problems.push(`${overlap.overlaps} samples found an address on two interfaces`);

    for (const [section, figures] of [
      ['latency', latency],
      ['churn latency', latencyChurn],
    ] as const) {
      for (const [name, f] of figures) {
        for (const e of f.failures.slice(0, 5)) problems.push(`${name} ${section}: ${e}`);
        for (const l of f.leaks) problems.push(`${name} ${section} leak: ${l}`);
      }
    }
    for (const b of bursts) {
      for (const e of b.errors) problems.push(`${b.subject} c=${b.concurrency}: ${e}`);
      for (const d of b.duplicateIps) problems.push(`${b.subject} c=${b.concurrency}: duplicate IP ${d}`);
      for (const l of b.leaks) problems.push(`${b.subject} c=${b.concurrency} leak: ${l}`);
    }
    if (daemonExit !== undefined && daemonExit !== 0)
      problems.push(`plexusd exited with ${String(daemonExit)} on SIGTERM`);

    const ratiosOf = (figures: Map<string, LatencyFigures>): Report['ratios'] => {
      const ratios: Report['ratios'] = {};
      const ref = figures.get('reference');
      if (ref !== undefined) {
        for (const [name, f] of figures) {
          if (name !== 'reference')
            ratios[`${name}/reference`] = {
              addMedian: round(f.add.median / ref.add.median),
              delMedian: round(f.del.median / ref.del.median),
            };
        }
      }
      return ratios;
    };
    const ratios = ratiosOf(latency);
    const report: Report = {
      machine: m,
      command: `node dist/scripts/bench.js ${process.argv.slice(2).join(' ')}`.trim(),
      startedAt: new Date(started).toISOString(),
      durationSeconds: round((Date.now() - started) / 1000, 1),
      settings: {
        iterations: options.iterations,
        warmup: WARMUP,
        burst: options.burst,
        concurrency: options.concurrency,
        shimCalls: options.shimCalls,
      },
      subjects: subjects.map((s) => ({ name: s.name, binary: s.plugin.binary, config: s.plugin.config })),
      latency: Object.fromEntries(latency),
      ratios,
      latencyChurn: Object.fromEntries(latencyChurn),
      ratiosChurn: ratiosOf(latencyChurn),
      ...(shim !== undefined ? { shim } : {}),
      ...(floor !== undefined
        ? {
            floor: floorReport(floor, {
              interleaved: latency.get('plexus')?.add.median,
              churn: latencyChurn.get('plexus')?.add.median,
            }),
          }
        : {}),
      bursts,
      ...(multi !== undefined ? { multi } : {}),
      ...(soak !== undefined ? { soak } : {}),
      ...(daemon !== undefined
        ? { daemon: { ...(daemonPeak !== undefined ? { peakRssKiB: daemonPeak } : {}), exitCode: daemonExit ?? null } }
        : {}),
      del: { overlap, teardownWaitsMs: teardownWaits },
      problems,
    };
    console.log(render(report, false));
    if (options.json !== undefined) await writeFile(options.json, `${JSON.stringify(report, null, 2)}\n`);
    if (options.markdown !== undefined) await writeFile(options.markdown, `${render(report, true).trim()}\n`);
    if (problems.length > 0) {
      exitCode = 1;
      console.log(`\nProblems (${problems.length}):`);
      for (const p of problems.slice(0, 30)) console.log(`  - ${p}`);
    }
  } catch (thrown) {
    exitCode = 1;
    if (thrown instanceof CallsAborted) console.error('\nbench interrupted');
    else
      console.error(`\nbench failed: ${thrown instanceof Error ? (thrown.stack ?? thrown.message) : String(thrown)}`);
  } finally {
    const cleanup = await teardown.run();
    for (const c of cleanup) console.error(`cleanup: ${c}`);
    const leftNetns = listNetns(prefix);
    const leftLinks = [...hostLinks()].filter((l) => l.startsWith(prefix));
    if (cleanup.length > 0 || leftNetns.length > 0 || leftLinks.length > 0) {
      exitCode = 1;
      console.error(
        `cleanup incomplete: netns ${leftNetns.join(' ') || 'none'}; links ${leftLinks.join(' ') || 'none'}`,
      );
    } else {
      console.log(`\nCleaned up: no netns or links named ${prefix}* left, temp dir removed.`);
    }
  }
  return exitCode;
}

main().then(
  (code) => process.exit(code),
  (thrown: unknown) => {
    console.error(thrown instanceof Error ? thrown.message : thrown);
    process.exit(2);
  },
);
