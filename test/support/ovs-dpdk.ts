/**
 * A private Open vSwitch with DPDK for tests: its own database, ovs-vswitchd-dpdk (Debian's openvswitch-switch-dpdk)
 * in a network namespace of its own (the netdev datapath makes tap devices, which must not land on the host), 2 MB
 * hugepages reserved on top of what the machine had and given back afterwards, on a hugetlbfs mounted in the test's
 * directory. Everything it starts it stops by PID; everything it makes it removes, even when a test fails.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import {
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmdirSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { uniquePrefix } from './netns';
import { stopProcess } from './processes';

export const OVS_VSWITCHD_DPDK = '/usr/lib/openvswitch-switch-dpdk/ovs-vswitchd-dpdk';
const NR_HUGEPAGES = '/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages';
const FREE_HUGEPAGES = '/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages';
const SCHEMA = '/usr/share/openvswitch/vswitch.ovsschema';
const MEMIF_PMD = '/usr/lib/x86_64-linux-gnu/librte_net_memif.so.23';
/** The switch's DPDK memory (MB), in 2 MB pages, plus a margin. */
const SOCKET_MEM_MB = 256;
const PAGES = SOCKET_MEM_MB / 2 + 16;

const which = (cmd: string): boolean => {
  try {
    execFileSync('sh', ['-c', `command -v ${cmd}`], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
};

/** Why a private OVS-DPDK cannot run here, or undefined when it can. */
export function ovsDpdkMissing(): string | undefined {
  for (const [path, pkg] of [
    [OVS_VSWITCHD_DPDK, 'openvswitch-switch-dpdk'],
    [SCHEMA, 'openvswitch-common'],
    [MEMIF_PMD, 'librte-net-memif23'],
  ] as const) {
    if (!existsSync(path)) return `${path} is missing (Debian package ${pkg}; scripts/setup.sh installs it)`;
  }
  for (const cmd of ['ovsdb-server', 'ovsdb-tool', 'ovs-vsctl', 'ovs-ofctl', 'dpdk-testpmd'])
    if (!which(cmd)) return `${cmd} is not installed (scripts/setup.sh installs it)`;
  if (process.getuid?.() !== 0) return 'hugepages and the switch need root';
  try {
    const nr = Number(readFileSync(NR_HUGEPAGES, 'utf8'));
    writeFileSync(NR_HUGEPAGES, String(nr));
  } catch (e) {
    return `2 MB hugepages cannot be set here (${(e as Error).message})`;
  }
  return undefined;
}

export class OvsDpdkFixture {
  readonly dir: string;
  readonly dbSocket: string;
  readonly netns: string;
  private readonly runDir: string;
  private readonly hugeDir: string;
  private readonly filePrefix: string;
  private ovsdb: ChildProcess | undefined;
  private vswitchd: ChildProcess | undefined;
  private pagesBefore: number | undefined;
  private mounted = false;
  private dpdkRunDirExisted = existsSync('/var/run/dpdk');
  log = '';

  private constructor() {
    this.dir = mkdtempSync(join(tmpdir(), 'plexus-ovs-'));
    this.runDir = join(this.dir, 'run');
    this.hugeDir = join(this.dir, 'huge');
    this.dbSocket = join(this.runDir, 'db.sock');
    this.filePrefix = uniquePrefix('pxovs');
    this.netns = this.filePrefix;
  }

  /** Reserves hugepages, starts the database and the switch, and answers once the switch has initialised DPDK. */
  static async start(): Promise<OvsDpdkFixture> {
    const fx = new OvsDpdkFixture();
    try {
      await fx.setUp();
      return fx;
    } catch (e) {
      await fx.stop();
      throw e;
    }
  }

  private async setUp(): Promise<void> {
    mkdirSync(this.runDir, { recursive: true });
    mkdirSync(this.hugeDir, { recursive: true });
    this.pagesBefore = Number(readFileSync(NR_HUGEPAGES, 'utf8'));
    const freeBefore = Number(readFileSync(FREE_HUGEPAGES, 'utf8'));
    writeFileSync(NR_HUGEPAGES, String(this.pagesBefore + PAGES));
    const free = Number(readFileSync(FREE_HUGEPAGES, 'utf8'));
    if (free - freeBefore < PAGES)
      throw new Error(`the kernel gave ${free - freeBefore} of ${PAGES} 2 MB hugepages (memory too fragmented?)`);
    execFileSync('mount', ['-t', 'hugetlbfs', '-o', 'pagesize=2M', 'none', this.hugeDir]);
    this.mounted = true;
    execFileSync('ip', ['netns', 'add', this.netns]);
    await this.startDatabase(true);
    this.vsctl('--no-wait', 'init');
    this.vsctl('--no-wait', 'set', 'Open_vSwitch', '.', ...this.vsctlSettings());
    await this.startSwitch();
  }

  private async startDatabase(fresh: boolean): Promise<void> {
    const db = join(this.dir, 'conf.db');
    if (fresh) {
      rmSync(db, { force: true });
      execFileSync('ovsdb-tool', ['create', db, SCHEMA]);
    }
    this.ovsdb = this.spawnLogged('ovsdb-server', [
      db,
      `--remote=punix:${this.dbSocket}`,
      `--unixctl=${join(this.runDir, 'ovsdb.ctl')}`,
      '--log-file=' + join(this.dir, 'ovsdb.log'),
    ]);
    await this.waitFor(
      () => existsSync(this.dbSocket) && this.tryVsctl('--no-wait', 'show') !== false,
      'ovsdb-server to listen',
    );
  }

  private async startSwitch(): Promise<void> {
    this.vswitchd = this.spawnLogged(
      'ip',
      [
        'netns',
        'exec',
        this.netns,
        OVS_VSWITCHD_DPDK,
        `unix:${this.dbSocket}`,
        `--unixctl=${join(this.runDir, 'vswitchd.ctl')}`,
        '--log-file=' + join(this.dir, 'vswitchd.log'),
      ],
      { OVS_RUNDIR: this.runDir },
    );
    // Its control socket answers once this process runs (a killed one's is refused); dpdk_initialized once EAL is up.
    await this.waitFor(
      () => this.appctl('version') !== false && this.appctl('dpif/show') !== false,
      'ovs-vswitchd to answer',
    );
    await this.waitFor(
      () => this.tryVsctl('--no-wait', 'get', 'Open_vSwitch', '.', 'dpdk_initialized') === 'true',
      'ovs-vswitchd to initialise DPDK',
    );
  }

  private spawnLogged(cmd: string, args: string[], env: Record<string, string> = {}): ChildProcess {
    const p = spawn(cmd, args, {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, OVS_RUNDIR: this.runDir, OVS_DBDIR: this.dir, OVS_LOGDIR: this.dir, ...env },
    });
    p.stdout?.on('data', (c: Buffer) => (this.log += c.toString()));
    p.stderr?.on('data', (c: Buffer) => (this.log += c.toString()));
    return p;
  }

  private async waitFor(done: () => boolean, what: string, timeoutMs = 30_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!done()) {
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}: ${this.log.slice(-2000)}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  vsctl(...args: string[]): string {
    return execFileSync('ovs-vsctl', [`--db=unix:${this.dbSocket}`, '--timeout=20', ...args], {
      encoding: 'utf8',
    }).trim();
  }

  /** The switch's interfaces plexusd made for a node (external_ids plexus-owner is the node's name). */
  portsOwnedBy(nodeName: string): string[] {
    return this.vsctl('--bare', '--columns=name', 'find', 'Interface', `external_ids:plexus-owner="${nodeName}"`)
      .split('\n')
      .map((l) => l.trim())
      .filter(Boolean);
  }

  private tryVsctl(...args: string[]): string | false {
    try {
      return this.vsctl(...args);
    } catch {
      return false;
    }
  }

  private appctl(...args: string[]): string | false {
    try {
      return execFileSync('ovs-appctl', ['-t', join(this.runDir, 'vswitchd.ctl'), '--timeout=5', ...args], {
        encoding: 'utf8',
        stdio: ['ignore', 'pipe', 'ignore'],
      }).trim();
    } catch {
      return false;
    }
  }

  ofctl(bridge: string, ...args: string[]): string {
    return execFileSync(
      'ovs-ofctl',
      [...args.slice(0, 1), `unix:${join(this.runDir, `${bridge}.mgmt`)}`, ...args.slice(1)],
      { encoding: 'utf8' },
    ).trim();
  }

  /** A userspace bridge (datapath_type netdev), as an operator makes one for memif networks. */
  addBridge(name: string): void {
    this.vsctl('add-br', name, '--', 'set', 'bridge', name, 'datapath_type=netdev');
  }

  /** The names of the ports on a bridge. */
  ports(bridge: string): string[] {
    const out = this.vsctl('list-ports', bridge);
    return out ? out.split('\n') : [];
  }

  /** A port's packet counters as the switch has them now (the database's statistics lag by seconds). */
  portPackets(bridge: string, port: string): { rx: number; tx: number } {
    const out = this.ofctl(bridge, 'dump-ports', port);
    const rx = /rx pkts=(\d+)/.exec(out);
    const tx = /tx pkts=(\d+)/.exec(out);
    if (!rx || !tx) throw new Error(`no counters for ${port} in: ${out}`);
    return { rx: Number(rx[1]), tx: Number(tx[1]) };
  }

  /** kill -9 of ovs-vswitchd and a new one on the same database (ports kept in the database come back by themselves). */
  async crashSwitch(): Promise<void> {
    await stopProcess(this.vswitchd, 'SIGKILL');
    await this.startSwitch();
  }

  /** Stops the switch and its database, and starts both on a new, empty database with only `bridges`: every port lost. */
  async restartEmpty(bridges: readonly string[]): Promise<void> {
    await stopProcess(this.vswitchd, 'SIGTERM');
    await stopProcess(this.ovsdb, 'SIGTERM');
    rmSync(this.dbSocket, { force: true });
    await this.startDatabase(true);
    this.vsctl('--no-wait', 'init');
    this.vsctl('--no-wait', 'set', 'Open_vSwitch', '.', ...this.vsctlSettings());
    await this.startSwitch();
    for (const b of bridges) this.addBridge(b);
  }

  /**
   * DPDK on, its memory from the test's hugetlbfs, one PMD thread on the second core and the main thread on the first.
   * The PMD thread sleeps when idle (pmd-maxsleep): polling flat out beside a kubelet and containerd on 2 cores, the
   * switch's main thread hung after its first port in 2 of 5 runs of the kubelet test, and never in 5 runs with it.
   */
  private vsctlSettings(): string[] {
    return [
      'other_config:dpdk-init=true',
      `other_config:dpdk-socket-mem=${SOCKET_MEM_MB}`,
      `other_config:dpdk-extra=--no-pci --no-telemetry --huge-dir=${this.hugeDir} --file-prefix=${this.filePrefix}`,
      'other_config:dpdk-lcore-mask=0x1',
      'other_config:pmd-cpu-mask=0x2',
      'other_config:pmd-maxsleep=500',
    ];
  }

  async stop(): Promise<void> {
    await stopProcess(this.vswitchd, 'SIGTERM');
    await stopProcess(this.ovsdb, 'SIGTERM');
    try {
      execFileSync('ip', ['netns', 'del', this.netns], { stdio: 'ignore' });
    } catch {
      /* not made */
    }
    if (this.mounted) execFileSync('umount', [this.hugeDir]);
    // Give back what this fixture added, not the count it saw: another run's fixture may have added pages since.
    if (this.pagesBefore !== undefined)
      writeFileSync(NR_HUGEPAGES, String(Math.max(0, Number(readFileSync(NR_HUGEPAGES, 'utf8')) - PAGES)));
    rmSync(join('/var/run/dpdk', this.filePrefix), { recursive: true, force: true });
    if (!this.dpdkRunDirExisted) rmdirQuietly('/var/run/dpdk');
    // PLEXUS_KEEP_OVS_LOG=FILE keeps the switch's log of a run (to see why a port or a client failed).
    if (process.env.PLEXUS_KEEP_OVS_LOG) {
      try {
        copyFileSync(join(this.dir, 'vswitchd.log'), process.env.PLEXUS_KEEP_OVS_LOG);
      } catch {
        /* none */
      }
    }
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** Removes a directory if it is empty (another run may still use it). */
function rmdirQuietly(path: string): void {
  try {
    rmdirSync(path);
  } catch {
    /* not empty, or gone */
  }
}

/** A value ovs-vsctl printed, without the quotes it puts around strings. */
export const unquote = (s: string): string => (s.startsWith('"') ? (JSON.parse(s) as string) : s);

/** One key's value in an interface's options:dpdk-devargs (`net_memif0,socket=...,secret=...`). */
export const devarg = (devargs: string, key: string): string | undefined =>
  new RegExp(`(?:^|,)${key}=([^,]*)`).exec(devargs)?.[1];
