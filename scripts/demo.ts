/**
 * `npm run demo`: a private plexusd, three pods with four networks each (native bridge, macvlan and vxlan, and
 * Debian's reference ptp plugin by delegation), added and deleted through bin/plexus-cni exactly as containerd does
 * it, traffic over every network, and proof that nothing is left afterwards.
 */
import { execFile } from 'node:child_process';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import {
  type AddResult,
  CallsAborted,
  type Plugin,
  type Pod,
  SELECTION_ANNOTATION,
  abortCalls,
  addressesByInterface,
  describeFailure,
  hostSideLinksOf,
  invoke,
  newPod,
  parseAdd,
  withPodAnnotations,
} from './lib/cni';
import {
  createNetns,
  createUplink,
  deleteLinkIfPresent,
  deleteNetns,
  deleteVtepIfOurs,
  freeTenNet,
  freeVxlan,
  hostLinks,
  ip,
  linkExists,
  linksOfBridge,
  listNetns,
  podLinks,
  restoreForwardingOnTeardown,
  run,
  uniquePrefix,
} from './lib/host';
import {
  Plexusd,
  hostLocalLeftovers,
  plexusLeftovers,
  repoRoot,
  shimBinary,
  writeNetworkDefinition,
} from './lib/plexusd';
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

/** One ping from a pod, out of the given interface; prints the check. */
function ping(from: DemoPod, ifname: string, target: string | undefined, label: string): void {
  if (target === undefined) {
    check(false, label, '(no address to ping)');
    return;
  }
  const r = run('ip', ['netns', 'exec', from.netnsName, 'ping', '-c', '1', '-W', '2', '-I', ifname, target]);
  if (r.status === null || /No such file|not found/i.test(r.stderr)) {
    check(false, label, `ping is not installed (Debian: iputils-ping): ${r.stderr.trim()}`);
    return;
  }
  const rtt = /time=([\d.]+ ms)/.exec(r.stdout)?.[1];
  check(
    r.status === 0,
    `${label} (${target})`,
    r.status === 0 ? (rtt ?? '') : (r.stdout.trim().split('\n').pop() ?? r.stderr.trim()),
  );
}

interface StatusEntry {
  readonly name: string;
  readonly interface: string;
  readonly ips: readonly string[];
  readonly mac?: string;
  readonly default: boolean;
}

interface ShownRecord {
  readonly meta: { readonly ifname: string };
  readonly details?: {
    readonly networkStatus: readonly StatusEntry[];
    readonly attachments: readonly { readonly network: string; readonly ifname: string; readonly driver: string }[];
  };
}

async function main(): Promise<number> {
  const teardown = new Teardown();
  teardown.onSignal(abortCalls);
  const prefix = uniquePrefix('pxd');
  const vxlan = freeVxlan();
  const root = await mkdtemp(join(tmpdir(), `${prefix}-`));
  teardown.add(`remove ${root}`, () => rm(root, { recursive: true, force: true }));
  restoreForwardingOnTeardown(teardown);
  const bridge = `${prefix}br0`;
  const overlayBridge = `${prefix}br1`;
  const uplink = `${prefix}up`;
  const uplinkPeer = `${prefix}upp`;
  teardown.add(`delete bridge ${bridge}`, () => deleteLinkIfPresent(bridge));
  teardown.add(`delete bridge ${overlayBridge}`, () => deleteLinkIfPresent(overlayBridge));
  teardown.add(`delete VTEP ${vxlan.vtep}`, () => void deleteVtepIfOurs(vxlan.vtep, vxlan.vni, vxlan.port));
  const hostSide = new Set<string>();
  teardown.add('delete host links the pods left', () => {
    const present = hostLinks();
    for (const l of hostSide) if (present.has(l)) deleteLinkIfPresent(l);
  });
  const stateDir = join(root, 'plexusd', 'state');
  const ptpDataDir = join(root, 'host-local');
  let daemon: Plexusd | undefined;
  const pods: DemoPod[] = [];
  try {
    section(`Plexus demo ${dim(`(prefix ${prefix}, temp dir ${root})`)}`);
    const second = freeTenNet(200, 250);
    const subnet = (i: number): string => `10.${second}.${i}.0/24`;
    createUplink(teardown, uplink, uplinkPeer);
    const networksDir = join(root, 'networks');
    await mkdir(networksDir);
    const hostLocal = (i: number, extra: Record<string, unknown> = {}): Record<string, unknown> => ({
      type: 'host-local',
      ranges: [[{ subnet: subnet(i) }]],
      ...extra,
    });
    await writeNetworkDefinition(networksDir, 'default', 'podnet', {
      cniVersion: '1.1.0',
      name: 'podnet',
      type: 'bridge',
      bridge,
      isGateway: true,
      ipMasq: false,
      ipam: hostLocal(0),
    });
    await writeNetworkDefinition(networksDir, 'default', 'lan', {
      cniVersion: '1.1.0',
      name: 'lan',
      type: 'macvlan',
      master: uplink,
      mode: 'bridge',
      ipam: hostLocal(1),
    });
    // No remotes: every pod is on this node, so the VTEP has nobody to flood to and no packet is ever encapsulated.
    await writeNetworkDefinition(networksDir, 'default', 'overlay', {
      cniVersion: '1.1.0',
      name: 'overlay',
      type: 'vxlan',
      vni: vxlan.vni,
      port: vxlan.port,
      remotes: [],
      bridge: overlayBridge,
      ipam: hostLocal(2),
    });
    // plexusd runs ptp natively too; the annotation makes it exec /usr/lib/cni/ptp (+ host-local) instead, to show
    // delegation. Debian's plugins speak CNI <= 1.0.0.
    await writeNetworkDefinition(
      networksDir,
      'default',
      'ptpnet',
      {
        cniVersion: '1.0.0',
        name: 'ptpnet',
        type: 'ptp',
        ipMasq: false,
        ipam: hostLocal(3, { dataDir: ptpDataDir }),
      },
      { 'plexus.io/delegate': 'true' },
    );
    console.log(`  eth0  default/podnet   bridge ${bridge}, ${subnet(0)} (the default network)`);
    console.log(
      `  net1  default/lan      macvlan mode bridge on ${uplink} (a veth standing in for an uplink; peer ${uplinkPeer}), ${subnet(1)}`,
    );
    console.log(
      `  net2  default/overlay  vxlan vni ${vxlan.vni} port ${vxlan.port}, bridge ${overlayBridge}, no remotes (single node: nothing leaves the host), ${subnet(2)}`,
    );
    console.log(
      `  net3  default/ptpnet   delegated (plexus.io/delegate: "true"): /usr/lib/cni/ptp + host-local (dataDir ${ptpDataDir}), ${subnet(3)}`,
    );
    daemon = await Plexusd.start(teardown, {
      root: join(root, 'plexusd'),
      networksDir,
      defaultNetwork: 'default/podnet',
      cniBinDir: '/usr/lib/cni',
      logLevel: 'error',
    });
    check(true, 'plexusd ready', `(pid ${daemon.pid}, socket ${daemon.socket})`);

    // What containerd has in its CNI config dir for Plexus; the pod's annotations reach it as runtimeConfig.
    const selection = 'lan, overlay, ptpnet';
    const plugin: Plugin = withPodAnnotations(
      {
        binary: shimBinary(),
        config: { cniVersion: '1.1.0', name: 'plexus', type: 'plexus-cni', socketPath: daemon.socket },
        env: { CNI_PATH: `${join(repoRoot(), 'bin')}:/usr/lib/cni` },
      },
      { [SELECTION_ANNOTATION]: selection },
    );
    console.log(
      `  pods are annotated ${SELECTION_ANNOTATION}: "${selection}" ${dim('(containerd passes it as runtimeConfig["io.kubernetes.cri.pod-annotations"])')}`,
    );
    const labels = ['pod1', 'pod2', 'pod3'];
    const netnsNames = labels.map((l) => `${prefix}-${l}`);
    const paths = createNetns(teardown, netnsNames);
    for (const [i, label] of labels.entries())
      pods.push({ label, netnsName: netnsNames[i] ?? '', pod: newPod('default', `demo-${label}`, paths[i] ?? '') });
    const bridges = [bridge, overlayBridge];

    section('ADD: RunPodSandbox, one call of bin/plexus-cni per pod');
    for (const p of pods) {
      const add = await invoke(plugin, 'ADD', p.pod);
      const parsed = parseAdd(add);
      if (!parsed.ok) {
        check(false, `${p.label} (netns ${p.netnsName})`, parsed.why);
        continue;
      }
      p.result = parsed.result;
      for (const l of hostSideLinksOf(parsed.result, bridges)) hostSide.add(l);
      const podIfs = parsed.result.interfaces.filter((i) => i.sandbox).map((i) => i.name);
      const want = ['eth0', 'net1', 'net2', 'net3'];
      check(
        want.every((w) => podIfs.includes(w)),
        `${p.label} (netns ${p.netnsName})`,
        `${add.ms.toFixed(1)} ms, CNI ${parsed.result.cniVersion ?? '?'} result: ${podIfs.join(', ')}; ${parsed.result.ips.length} IPs`,
      );
      console.log(`      ${dim(`$ ip -br -n ${p.netnsName} addr`)}`);
      const shown = run('ip', ['-br', '-n', p.netnsName, 'addr']);
      for (const line of (shown.status === 0 ? shown.stdout : shown.stderr).trim().split('\n')) {
        if (!line.startsWith('lo ')) console.log(`      ${dim(line.trim().replace(/\s+/g, ' '))}`);
      }
    }

    section('Traffic over every network');
    const [pod1, pod2] = pods as [DemoPod, DemoPod, DemoPod];
    const peer =
      pod2.result !== undefined
        ? addressesByInterface(pod2.result)
        : new Map<string, { address: string; gateway?: string }[]>();
    const own =
      pod1.result !== undefined
        ? addressesByInterface(pod1.result)
        : new Map<string, { address: string; gateway?: string }[]>();
    ping(pod1, 'eth0', peer.get('eth0')?.[0]?.address, 'pod1 -> pod2 over eth0 (bridge)');
    ping(pod1, 'net1', peer.get('net1')?.[0]?.address, 'pod1 -> pod2 over net1 (macvlan)');
    ping(pod1, 'net2', peer.get('net2')?.[0]?.address, 'pod1 -> pod2 over net2 (vxlan overlay bridge)');
    const ptp = own.get('net3')?.[0];
    ping(
      pod1,
      'net3',
      ptp?.gateway ?? ptp?.address.replace(/\.\d+$/, '.1'),
      'pod1 -> its ptp gateway (the host end) over net3',
    );
    console.log(
      `      ${dim('ptp links each pod to the host only; pod to pod over ptp would need host forwarding, so the host end is the peer.')}`,
    );

    section(
      `Network status of pod1 ${dim(`(plexusctl --socket … -o json show ${pod1.pod.containerId.slice(0, 12)}…)`)}`,
    );
    const ctl = await promisify(execFile)(join(repoRoot(), 'bin', 'plexusctl'), [
      '--socket',
      daemon.socket,
      '-o',
      'json',
      'show',
      pod1.pod.containerId,
    ]).catch((e: Error) => ({ stdout: '', stderr: e.message }));
    let records: ShownRecord[] = [];
    try {
      records = JSON.parse(ctl.stdout) as ShownRecord[];
    } catch {
      check(false, 'plexusctl show', ctl.stderr.trim() || ctl.stdout.slice(0, 200));
    }
    const details = records.find((r) => r.details !== undefined)?.details;
    if (details !== undefined) {
      const driverOf = new Map(details.attachments.map((a) => [a.ifname, a.driver]));
      for (const s of details.networkStatus) {
        console.log(
          `      ${s.interface.padEnd(5)} ${s.name.padEnd(16)} ${(driverOf.get(s.interface) ?? '?').padEnd(9)} ${s.ips.join(',').padEnd(12)} ${s.mac ?? ''}${s.default ? '  default' : ''}`,
        );
      }
      const names = details.networkStatus.map((s) => `${s.interface}=${s.name}`).join(' ');
      check(
        names === 'eth0=default/podnet net1=default/lan net2=default/overlay net3=default/ptpnet' &&
          details.networkStatus.filter((s) => s.default).length === 1,
        'network-status: four entries in order, exactly one default',
      );
      check(
        details.attachments.map((a) => a.driver).join(',') === 'bridge,macvlan,vxlan,delegate',
        'drivers: bridge, macvlan, vxlan native; ptp delegated',
        `(${details.attachments.map((a) => a.driver).join(', ')})`,
      );
    } else if (records.length > 0) {
      check(false, 'plexusctl show has details.networkStatus');
    }

    section('DEL: StopPodSandbox (netns + cached result), then RemovePodSandbox (CNI_NETNS="")');
    for (const p of pods) {
      const first = await invoke(plugin, 'DEL', p.pod, p.result !== undefined ? { prevResult: p.result } : {});
      const second = await invoke(plugin, 'DEL', p.pod, { netns: '' });
      const ok1 = first.exitCode === 0 && first.stdout.trim() === '';
      const ok2 = second.exitCode === 0 && second.stdout.trim() === '';
      check(
        ok1 && ok2,
        `${p.label}`,
        `stop ${ok1 ? `${first.ms.toFixed(1)} ms` : describeFailure(first)}, remove ${ok2 ? `${second.ms.toFixed(1)} ms` : describeFailure(second)}`,
      );
    }
    const inPods = pods.flatMap((p) => podLinks(p.netnsName).map((l) => `${p.label}:${l}`));
    check(inPods.length === 0, 'pods have only lo left', inPods.join(' '));
    const present = hostLinks();
    const stillPlugged = [
      ...linksOfBridge(bridge),
      ...linksOfBridge(overlayBridge).filter((l) => l !== vxlan.vtep),
      ...[...hostSide].filter((l) => present.has(l)),
    ];
    check(
      stillPlugged.length === 0,
      'no pod link left on the host',
      stillPlugged.length > 0
        ? stillPlugged.join(' ')
        : `(${hostSide.size} host veths gone, both bridges hold no pod port)`,
    );
    const ptpLeases = await hostLocalLeftovers(ptpDataDir, 'ptpnet');
    check(
      ptpLeases.length === 0,
      'no host-local lease left by the delegated ptp',
      ptpLeases.join(' ') || `(${join(ptpDataDir, 'ptpnet')})`,
    );
    deleteNetns(netnsNames);
    check(listNetns(prefix).length === 0, 'pod network namespaces deleted', `(${netnsNames.join(', ')})`);

    section('Shutdown and what is left');
    const code = await daemon.stop();
    check(code === 0, 'plexusd stopped with SIGTERM', `(exit ${String(code)})`);
    const left = await plexusLeftovers(stateDir);
    check(
      left.filter((l) => l.startsWith('lease')).length === 0,
      'no plexus IP leases left',
      left.filter((l) => l.startsWith('lease')).join(' '),
    );
    check(
      left.filter((l) => l.startsWith('journal')).length === 0,
      'journal empty',
      left.filter((l) => l.startsWith('journal')).join(' '),
    );
    // Bridges and the VTEP are shared infrastructure Plexus keeps for the next pod; the demo caused them, so it removes them.
    for (const b of bridges) if (linkExists(b)) ip('link', 'del', 'dev', b);
    const vtepDeleted = deleteVtepIfOurs(vxlan.vtep, vxlan.vni, vxlan.port);
    deleteLinkIfPresent(uplink);
    deleteLinkIfPresent(uplinkPeer);
    const after = hostLinks();
    const prefixed = [...after].filter((l) => l.startsWith(prefix));
    check(
      prefixed.length === 0 && !after.has(vxlan.vtep),
      `demo deleted bridges ${bridges.join(', ')}, VTEP ${vxlan.vtep}${vtepDeleted ? '' : ' (already gone)'}, uplink ${uplink}/${uplinkPeer}; no ${prefix}* link left`,
      [...prefixed, ...(after.has(vxlan.vtep) ? [vxlan.vtep] : [])].join(' '),
    );
  } catch (thrown) {
    failures.push(thrown instanceof Error ? thrown.message : String(thrown));
    console.log(`\n${BAD} demo stopped: ${thrown instanceof Error ? thrown.message : String(thrown)}`);
    if (daemon !== undefined && !(thrown instanceof CallsAborted)) console.log(dim(await daemon.logTail()));
  } finally {
    const problems = await teardown.run();
    for (const p of problems) failures.push(`cleanup: ${p}`);
    for (const p of problems) console.log(`  ${BAD} cleanup: ${p}`);
    const leftNetns = listNetns(prefix);
    const leftLinks = [...hostLinks()].filter((l) => l.startsWith(prefix) || l === vxlan.vtep);
    if (leftNetns.length > 0 || leftLinks.length > 0)
      failures.push(`left behind: ${[...leftNetns, ...leftLinks].join(' ')}`);
  }
  console.log(
    failures.length === 0
      ? `\n${OK} ${bold('demo passed')}: 3 pods with 4 networks each added, pinged and deleted; nothing left behind.`
      : `\n${BAD} ${bold('demo failed')} (${failures.length}):\n${failures.map((f) => `    - ${f}`).join('\n')}`,
  );
  return failures.length === 0 ? 0 : 1;
}

main().then(
  (code) => process.exit(code),
  (thrown: unknown) => {
    console.error(thrown instanceof Error ? thrown.message : thrown);
    process.exit(2);
  },
);
