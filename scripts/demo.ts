/**
 * `npm run demo`: a private plexusd, three pods added and deleted through bin/plexus-cni exactly as
 * containerd does it, pings between them, and proof that nothing is left afterwards.
 */
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type AddResult, CallsAborted, type Plugin, type Pod, abortCalls, addressesOf, describeFailure, hostSideLinksOf, invoke, newPod, parseAdd } from './lib/cni';
import { createNetns, deleteLinkIfPresent, deleteNetns, freeTenNet, hostLinks, ip, linkExists, linksOfBridge, listNetns, restoreForwardingOnTeardown, run, uniquePrefix } from './lib/host';
import { Plexusd, plexusLeftovers, repoRoot, shimBinary, writeNetworkDefinition } from './lib/plexusd';
import { Teardown } from './lib/teardown';

const color = process.stdout.isTTY && process.env['NO_COLOR'] === undefined;
const paint = (code: number, s: string): string => (color ? `\x1b[${code}m${s}\x1b[0m` : s);
const OK = paint(32, '✓');
const BAD = paint(31, '✗');
const dim = (s: string): string => paint(2, s);
const bold = (s: string): string => paint(1, s);

const failures: string[] = [];

/** Prints one checked fact; a false one counts as a failed step (the demo goes on, and exits non-zero). */
function check(ok: boolean, label: string, detail = ''): boolean {
  console.log(`  ${ok ? OK : BAD} ${label}${detail ? ` ${dim(detail)}` : ''}`);
  if (!ok) failures.push(label + (detail ? `: ${detail}` : ''));
  return ok;
}

const section = (title: string): void => console.log(`\n${bold(title)}`);

interface DemoPod {
  readonly label: string;
  readonly netnsName: string;
  readonly pod: Pod;
  result?: AddResult;
}

/** The CNI result in a few lines, in the shape the runtime receives it. */
function describeResult(result: AddResult): string[] {
  const interfaces = result.interfaces.map((i, n) => `[${n}] ${i.name}${i.sandbox ? ` (sandbox ${i.sandbox})` : ''}`);
  const ips = result.ips.map((a) => `${a.address}${a.gateway ? ` gw ${a.gateway}` : ''}${a.interface !== undefined ? ` on [${a.interface}]` : ''}`);
  const routes = result.routes.map((r) => `${r.dst}${r.gw ? ` via ${r.gw}` : ''}`);
  return [
    `interfaces ${interfaces.join('  ')}`,
    `ips        ${ips.join(', ') || 'none'}`,
    `routes     ${routes.join(', ') || 'none'}`,
  ];
}

function ping(from: DemoPod, to: DemoPod): void {
  const target = to.result !== undefined ? addressesOf(to.result)[0] : undefined;
  if (target === undefined) {
    check(false, `ping ${from.label} -> ${to.label}`, `(${to.label} has no address)`);
    return;
  }
  const r = run('ip', ['netns', 'exec', from.netnsName, 'ping', '-c', '1', '-W', '1', target]);
  const rtt = /time=([\d.]+ ms)/.exec(r.stdout)?.[1];
  if (r.status === null || /No such file|not found/i.test(r.stderr)) {
    check(false, `ping ${from.label} -> ${to.label} (${target})`, `ping is not installed (Debian: iputils-ping): ${r.stderr.trim()}`);
    return;
  }
  check(r.status === 0, `ping ${from.label} -> ${to.label} (${target})`, r.status === 0 ? (rtt ?? '') : r.stdout.trim().split('\n').pop() ?? r.stderr.trim());
}

async function main(): Promise<number> {
  const teardown = new Teardown();
  teardown.onSignal(abortCalls);
  const prefix = uniquePrefix('pxd');
  const root = await mkdtemp(join(tmpdir(), `${prefix}-`));
  teardown.add(`remove ${root}`, () => rm(root, { recursive: true, force: true }));
  restoreForwardingOnTeardown(teardown);
  const bridge = `${prefix}br`;
  teardown.add(`delete bridge ${bridge}`, () => deleteLinkIfPresent(bridge));
  const hostSide = new Set<string>();
  teardown.add('delete host links the pods left', () => {
    for (const l of hostSide) deleteLinkIfPresent(l);
  });
  const stateDir = join(root, 'plexusd', 'state');
  let daemon: Plexusd | undefined;
  const pods: DemoPod[] = [];
  try {
    section(`Plexus demo ${dim(`(prefix ${prefix}, temp dir ${root})`)}`);
    const subnet = `10.${freeTenNet(200, 250)}.0.0/24`;
    const networksDir = join(root, 'networks');
    await mkdir(networksDir);
    await writeNetworkDefinition(networksDir, 'default', 'podnet', {
      cniVersion: '1.1.0', name: 'podnet', type: 'bridge', bridge, isGateway: true, ipMasq: false,
      ipam: { type: 'host-local', ranges: [[{ subnet }]] },
    });
    console.log(`  network default/podnet: bridge ${bridge}, host-local ${subnet}, gateway on the bridge`);
    daemon = await Plexusd.start(teardown, { root: join(root, 'plexusd'), networksDir, defaultNetwork: 'default/podnet', cniBinDir: '/usr/lib/cni', logLevel: 'error' });
    check(true, `plexusd ready`, `(pid ${daemon.pid}, socket ${daemon.socket})`);

    // What containerd has in its CNI config dir for Plexus, and how it runs the executable.
    const plugin: Plugin = {
      binary: shimBinary(),
      config: { cniVersion: '1.1.0', name: 'plexus', type: 'plexus-cni', socketPath: daemon.socket },
      env: { CNI_PATH: `${join(repoRoot(), 'bin')}:/usr/lib/cni` },
    };
    const labels = ['pod1', 'pod2', 'pod3'];
    const netnsNames = labels.map((l) => `${prefix}-${l}`);
    const paths = createNetns(teardown, netnsNames);
    for (const [i, label] of labels.entries()) {
      pods.push({ label, netnsName: netnsNames[i] ?? '', pod: newPod('default', `demo-${label}`, paths[i] ?? '') });
    }

    section('ADD: RunPodSandbox, one call of bin/plexus-cni per pod');
    for (const p of pods) {
      const add = await invoke(plugin, 'ADD', p.pod);
      const parsed = parseAdd(add);
      const version = parsed.ok ? `, CNI ${parsed.result.cniVersion ?? '?'} result:` : '';
      if (!check(parsed.ok, `${p.label} (netns ${p.netnsName})`, `${add.ms.toFixed(1)} ms${version}`)) {
        console.log(`      ${parsed.ok ? '' : parsed.why}`);
        continue;
      }
      if (!parsed.ok) continue;
      p.result = parsed.result;
      for (const l of hostSideLinksOf(parsed.result, bridge)) hostSide.add(l);
      for (const line of describeResult(parsed.result)) console.log(`      ${line}`);
      const shown = run('ip', ['-br', '-n', p.netnsName, 'addr', 'show', 'eth0']);
      console.log(`      ${dim(`$ ip -br -n ${p.netnsName} addr show eth0`)}`);
      console.log(`      ${dim(shown.status === 0 ? shown.stdout.trim().replace(/\s+/g, ' ') : shown.stderr.trim())}`);
    }

    section('Traffic between the pods (over the bridge)');
    const [pod1, pod2, pod3] = pods as [DemoPod, DemoPod, DemoPod];
    ping(pod1, pod2);
    ping(pod1, pod3);
    ping(pod3, pod1);

    section('DEL: StopPodSandbox (netns + cached result), then RemovePodSandbox (CNI_NETNS="")');
    for (const p of pods) {
      const first = await invoke(plugin, 'DEL', p.pod, p.result !== undefined ? { prevResult: p.result } : {});
      const second = await invoke(plugin, 'DEL', p.pod, { netns: '' });
      const ok1 = first.exitCode === 0 && first.stdout.trim() === '';
      const ok2 = second.exitCode === 0 && second.stdout.trim() === '';
      check(ok1 && ok2, `${p.label}`,
        `stop ${ok1 ? `${first.ms.toFixed(1)} ms` : describeFailure(first)}, remove ${ok2 ? `${second.ms.toFixed(1)} ms` : describeFailure(second)}`);
    }
    const stillPlugged = [...linksOfBridge(bridge), ...[...hostSide].filter((l) => hostLinks().has(l))];
    check(stillPlugged.length === 0, 'no pod link left on the host', stillPlugged.length > 0 ? stillPlugged.join(' ') : '(host veths gone, bridge empty)');
    deleteNetns(netnsNames);
    check(listNetns(prefix).length === 0, 'pod network namespaces deleted', `(${netnsNames.join(', ')})`);

    section('Shutdown and what is left');
    const code = await daemon.stop();
    check(code === 0, 'plexusd stopped with SIGTERM', `(exit ${String(code)})`);
    const left = await plexusLeftovers(stateDir);
    check(left.filter((l) => l.startsWith('lease')).length === 0, 'no IP leases left', left.filter((l) => l.startsWith('lease')).join(' '));
    check(left.filter((l) => l.startsWith('journal')).length === 0, 'journal empty', left.filter((l) => l.startsWith('journal')).join(' '));
    // The bridge is shared infrastructure: Plexus keeps it for the next pod; the demo made it, so it removes it.
    if (linkExists(bridge)) ip('link', 'del', 'dev', bridge);
    const prefixed = [...hostLinks()].filter((l) => l.startsWith(prefix));
    check(prefixed.length === 0, `bridge ${bridge} deleted by the demo; no ${prefix}* link on the host`, prefixed.join(' '));
  } catch (thrown) {
    failures.push(thrown instanceof Error ? thrown.message : String(thrown));
    console.log(`\n${BAD} demo stopped: ${thrown instanceof Error ? thrown.message : String(thrown)}`);
    if (daemon !== undefined && !(thrown instanceof CallsAborted)) console.log(dim(await daemon.logTail()));
  } finally {
    const problems = await teardown.run();
    for (const p of problems) failures.push(`cleanup: ${p}`);
    for (const p of problems) console.log(`  ${BAD} cleanup: ${p}`);
    const leftNetns = listNetns(prefix);
    const leftLinks = [...hostLinks()].filter((l) => l.startsWith(prefix));
    if (leftNetns.length > 0 || leftLinks.length > 0) failures.push(`left behind: ${[...leftNetns, ...leftLinks].join(' ')}`);
  }
  console.log(failures.length === 0 ? `\n${OK} ${bold('demo passed')}: 3 pods added, pinged and deleted; nothing left behind.` : `\n${BAD} ${bold(`demo failed`)} (${failures.length}):\n${failures.map((f) => `    - ${f}`).join('\n')}`);
  return failures.length === 0 ? 0 : 1;
}

main().then(
  (code) => process.exit(code),
  (thrown: unknown) => {
    console.error(thrown instanceof Error ? thrown.message : thrown);
    process.exit(2);
  },
);
