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
import { CallsAborted, abortCalls } from './lib/cni';
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
import { shimBinary } from './lib/plexusd';
import { fmt, round } from './lib/stats';
import { type Subject, parseSubjectSpec } from './lib/subject';
import { Teardown } from './lib/teardown';
import { describePair, runPair } from './lib/pair';
import { type MultiBurstFigures, measureMultiBurst, measureMultiLatency } from './lib/bench/multi';
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
import { teardownWaits } from './lib/bench/del-teardown';
import { parseOptions } from './lib/bench/options';
import { type SetupContext, multiVariants, setUpPlexus, setUpReference } from './lib/bench/subjects-setup';

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
    const pair = runPair();
    console.log(`Plexus bench ${prefix}: ${m.cpus} CPUs (${m.cpuModel}), kernel ${m.kernel}, node ${m.node}`);
    console.log(describePair(pair));
    // Multi-interface sections: a veth standing in for a host uplink (the macvlan master), shared by both runtimes.
    const uplink = `${prefix}up`;
    if (options.multi && (options.plexus || options.reference)) createUplink(teardown, uplink, `${prefix}upp`);
    const setup: SetupContext = { teardown, prefix, root, uplink, taken: [], multi: options.multi };
    const plexusSetup = options.plexus ? await setUpPlexus(setup, options.stateSync) : undefined;
    const referenceSetup = options.reference ? setUpReference(setup) : undefined;
    const daemon = plexusSetup?.daemon;
    const plexus = plexusSetup?.subject;
    const reference = referenceSetup?.subject;
    const subjects: Subject[] = [plexus, reference].filter((s): s is Subject => s !== undefined);
    const { variants, burstRuntimes } = multiVariants(setup, plexusSetup, referenceSetup);
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
      floor = await measureFloor(
        teardown,
        prefix,
        root,
        shimBinary(),
        freeTenNet(150, 199, setup.taken),
        options.floorRuns,
      );
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
      pair,
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
