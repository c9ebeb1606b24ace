/**
 * Fuzzing through the real shim and daemon on real namespaces: hundreds of malformed or odd ADDs, each followed by the
 * DEL a runtime sends, from a seed (PLEXUS_FUZZ_SEED, PLEXUS_FUZZ_CASES to vary it). After every batch the daemon must
 * be alive and every reply a well-formed CNI result or error; at the end nothing may be left: no link in a pod or on the
 * host, no lease, no journal record.
 */
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, it } from 'node:test';
import fc from 'fast-check';
import { DaemonFixture, getJson, type ShimOutput } from '../support/daemon';
import { hostLinksWithPrefix, ip, NetnsFixture, podLinks, uniquePrefix } from '../support/netns';

const SEED = Number(process.env.PLEXUS_FUZZ_SEED ?? 20261123);
const CASES = Number(process.env.PLEXUS_FUZZ_CASES ?? 300);
const prefix = uniquePrefix('pz');
const fx = new NetnsFixture(prefix);
const o = 200 + Math.floor(Math.random() * 50);
const t = Math.floor(Math.random() * 200);
const daemon = new DaemonFixture('podnet');
const PODS = 12;
const pods: string[] = [];
let regularFile = '';
let linksBefore = new Set<string>();

const hostLinks = (): string[] => hostLinksWithPrefix('');

before(async () => {
  linksBefore = new Set(hostLinks());
  for (const [i, name] of ['podnet', 'sec', 'third'].entries()) {
    fx.trackHostLink(`${prefix}b${i}`);
    daemon.writeBridgeNetwork({
      name,
      bridge: `${prefix}b${i}`,
      subnet: `10.${o}.${t + i}.0/24`,
      cniVersion: '1.0.0',
      ...(name === 'sec' ? { extra: { capabilities: { ips: true, mac: true } } } : {}),
    });
  }
  for (let i = 0; i < PODS; i++) pods.push(fx.create(`p${i}`).path);
  regularFile = join(daemon.dir, 'not-a-netns');
  writeFileSync(regularFile, '');
  await daemon.start();
});
after(async () => {
  await daemon.stop();
  fx.cleanup();
});

const hostile = fc.constantFrom(
  '',
  ' ',
  '/',
  '@',
  ',',
  '\u0000',
  '\ud800',
  '\u{1F600}',
  'ä',
  '..',
  'x'.repeat(16),
  '$(reboot)',
  '"',
  '\\',
);
const word = fc.oneof(
  fc.constantFrom('podnet', 'sec', 'third', 'nope', 'default/sec', 'x/sec'),
  fc.stringMatching(/^[a-z0-9-]{1,12}$/),
  hostile,
);
const ifname = fc.oneof(
  fc.constantFrom('eth0', 'net1', 'data0', 'eth0'),
  fc.stringMatching(/^[a-z][a-z0-9]{0,14}$/),
  hostile,
);
const selection = fc.oneof(
  fc
    .array(
      fc.tuple(word, fc.option(ifname)).map(([w, i]) => (i === null ? w : `${w}@${i}`)),
      { maxLength: 5 },
    )
    .map((xs) => xs.join(',')),
  fc
    .array(
      fc.record(
        {
          name: word,
          interface: ifname,
          ips: fc.array(fc.oneof(fc.constant(`10.${o}.${t + 1}.77/24`), fc.constant('10.0.0.999'), word), {
            maxLength: 2,
          }),
          mac: fc.oneof(fc.constant('02:00:00:00:00:99'), word),
          'default-route': fc.array(fc.constant(`10.${o}.${t + 1}.1`), { maxLength: 1 }),
        },
        { requiredKeys: ['name'] },
      ),
      { maxLength: 4 },
    )
    .map((xs) => JSON.stringify(xs)),
  fc.string({ maxLength: 200 }),
  fc.constant('sec,'.repeat(40)),
);
interface Case {
  readonly cid: string;
  readonly ifname: string;
  readonly netns: 'pod' | 'self' | 'file' | 'missing' | 'host';
  readonly pod: number;
  readonly cniVersion: string;
  readonly annotation: string | undefined;
  readonly args: string;
}
const caseArb: fc.Arbitrary<Case> = fc.record({
  cid: fc.oneof(
    { weight: 8, arbitrary: fc.stringMatching(/^[a-f0-9]{8,16}$/) },
    { weight: 1, arbitrary: fc.string({ maxLength: 20 }) },
  ),
  ifname: fc.oneof({ weight: 6, arbitrary: fc.constant('eth0') }, { weight: 1, arbitrary: ifname }),
  netns: fc.oneof(
    { weight: 8, arbitrary: fc.constant('pod' as const) },
    { weight: 1, arbitrary: fc.constantFrom('self' as const, 'file' as const, 'missing' as const, 'host' as const) },
  ),
  pod: fc.integer({ min: 0, max: PODS - 1 }),
  cniVersion: fc.oneof(
    { weight: 6, arbitrary: fc.constantFrom('1.0.0', '0.4.0', '0.3.1') },
    { weight: 1, arbitrary: fc.constantFrom('1.1.0', '0.2.0', '9.9.9', '') },
  ),
  annotation: fc.option(selection, { nil: undefined }),
  args: fc.oneof(
    { weight: 6, arbitrary: fc.constant('') },
    {
      weight: 1,
      arbitrary: fc.constantFrom(
        'IgnoreUnknown=1;IP=10.0.0.999',
        `IP=10.${o}.${t}.66`,
        'FOO=bar',
        'K8S_POD_NAMESPACE=../../etc',
        'MAC=02:00:00:00:00:42',
        'garbage',
      ),
    },
  ),
});

/** A reply is either a CNI result (cniVersion plus interfaces) or a CNI error (code and msg), and the exit code agrees. */
function assertWellFormed(what: string, out: ShimOutput): void {
  const json = out.json as { cniVersion?: unknown; code?: unknown; msg?: unknown; interfaces?: unknown } | undefined;
  if (out.code === 0) {
    if (out.stdout === '') return; // DEL answers nothing
    assert.ok(
      json && typeof json.cniVersion === 'string' && Array.isArray(json.interfaces),
      `${what}: a CNI result: ${out.stdout.slice(0, 300)}`,
    );
  } else {
    assert.equal(out.code, 1, `${what}: exit 1 with an error: ${out.stdout.slice(0, 300)} ${out.stderr.slice(0, 300)}`);
    assert.ok(
      json && typeof json.code === 'number' && typeof json.msg === 'string' && json.msg !== '',
      `${what}: a CNI error: ${out.stdout.slice(0, 300)}`,
    );
  }
}

it(`${CASES} fuzzed ADDs, each followed by its DEL, through the real shim and daemon (seed ${SEED}): well-formed replies, a live daemon, nothing left`, async () => {
  const cases = fc.sample(caseArb, { seed: SEED, numRuns: CASES });
  const netnsOf = (c: Case): string =>
    ({
      pod: pods[c.pod]!,
      self: '/proc/self/ns/net',
      host: '/proc/1/ns/net',
      file: regularFile,
      missing: `/var/run/netns/${prefix}-none`,
    })[c.netns];
  const config = (c: Case): Record<string, unknown> => ({
    cniVersion: c.cniVersion,
    name: 'plexus',
    type: 'plexus-cni',
    socketPath: daemon.socket,
    daemonWaitSeconds: 2,
    ...(c.annotation !== undefined
      ? { runtimeConfig: { 'io.kubernetes.cri.pod-annotations': { 'k8s.v1.cni.cncf.io/networks': c.annotation } } }
      : {}),
  });
  // The pods' namespaces are shared between cases: one case at a time per pod, as a runtime has one sandbox per netns.
  const byPod = new Map<number, Case[]>();
  for (const c of cases) byPod.set(c.pod, [...(byPod.get(c.pod) ?? []), c]);
  let added = 0;
  await Promise.all(
    [...byPod.values()].map(async (mine) => {
      for (const c of mine) {
        // An environment variable is a C string: no runtime can pass a NUL in one (the config can, as a JSON escape).
        const env = (v: string): string => v.replaceAll('\u0000', '');
        const call = {
          containerId: env(c.cid),
          netns: netnsOf(c),
          ifname: env(c.ifname),
          args: env(c.args),
          config: config(c),
        };
        const add = await daemon.cni({ command: 'ADD', ...call });
        assert.ok(daemon.alive, `the daemon died on ADD ${JSON.stringify(c)}: ${daemon.stderr.slice(-3000)}`);
        assertWellFormed(`ADD ${JSON.stringify(c)}`, add);
        if (add.code === 0) added++;
        const del = await daemon.cni({ command: 'DEL', ...call });
        assert.ok(daemon.alive, `the daemon died on DEL ${JSON.stringify(c)}: ${daemon.stderr.slice(-3000)}`);
        assertWellFormed(`DEL ${JSON.stringify(c)}`, del);
        // A DEL of what ADD attached must work; one with an ID or name no ADD could take may be refused as such.
        if (add.code === 0) assert.equal(del.code, 0, `DEL after a successful ADD: ${del.stdout}`);
      }
    }),
  );
  assert.equal((await getJson(daemon.socket, '/readyz')).status, 200, 'the daemon is alive');
  assert.ok(added > CASES / 10, `some ADDs succeeded (${added}): the fuzz reaches the drivers`);
  console.log(`# fuzz: ${CASES} cases, ${added} ADDs succeeded, seed ${SEED}`);

  // Nothing is left: records, leases, links in the pods, host veths, bridge ports.
  assert.deepEqual(daemon.journalFiles(), []);
  assert.deepEqual([...daemon.leases('podnet'), ...daemon.leases('sec'), ...daemon.leases('third')], []);
  for (const p of pods) assert.deepEqual(podLinks(p.split('/').pop()!), [], `nothing in ${p}`);
  const newLinks = hostLinks().filter((l) => !linksBefore.has(l) && !l.startsWith(prefix));
  assert.deepEqual(newLinks, [], "no host link but the test's bridges");
  // A bridge exists once a pod was attached to its network; none may keep a port.
  for (let i = 0; i < 3; i++)
    if (hostLinks().includes(`${prefix}b${i}`))
      assert.equal(ip('link', 'show', 'master', `${prefix}b${i}`).trim(), '', `no port left on bridge ${i}`);
});
