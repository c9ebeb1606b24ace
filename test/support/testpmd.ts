/**
 * dpdk-testpmd as a memif client, driven at its interactive prompt: the stand-in for a pod's packet-processing
 * application. It runs without hugepages (--no-huge: its memory is ordinary, its packet buffers are the memif
 * regions it shares with the switch); the runtime directory DPDK still makes (/var/run/dpdk/<prefix>) goes at stop.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { rmSync } from 'node:fs';
import { uniquePrefix } from './netns';
import { stopProcess } from './processes';

export interface TestpmdOptions {
  readonly socket: string;
  readonly secret: string;
  /** Queues: receive must cover every transmit queue of the switch's port (its PMD threads + 1). */
  readonly rxq: number;
  readonly txq: number;
  /** testpmd's forwarding mode after start (rxonly counts what arrives). */
  readonly forwardMode?: 'rxonly' | 'txonly' | 'io';
  /** CPU list (the machine has 2 cores: testpmd needs a main and a forwarding lcore). */
  readonly lcores?: string;
  /** The lcore of testpmd's main thread (the other one in `lcores` forwards). */
  readonly mainLcore?: number;
  /** How long the memif link may take to come up (default 20 s). */
  readonly linkTimeoutMs?: number;
}

export class Testpmd {
  private output = '';

  private constructor(
    private readonly proc: ChildProcess,
    private readonly prefix: string,
  ) {
    proc.stdout?.on('data', (c: Buffer) => (this.output += c.toString()));
    proc.stderr?.on('data', (c: Buffer) => (this.output += c.toString()));
  }

  static async start(o: TestpmdOptions): Promise<Testpmd> {
    const vdev = `net_memif0,role=client,id=0,socket=${o.socket},socket-abstract=no,secret=${o.secret}`;
    const prefix = uniquePrefix('pxpmd');
    // stdbuf: testpmd's printf output is block-buffered on a pipe, and its answers must arrive before the next prompt.
    const proc = spawn(
      'stdbuf',
      [
        '-o0',
        '-e0',
        'dpdk-testpmd',
        '--no-huge',
        '-m',
        '256',
        '--no-pci',
        '--no-shconf',
        '--no-telemetry',
        `--file-prefix=${prefix}`,
        '-l',
        o.lcores ?? '0,1',
        ...(o.mainLcore !== undefined ? [`--main-lcore=${o.mainLcore}`] : []),
        `--vdev=${vdev}`,
        '--',
        '-i',
        `--forward-mode=${o.forwardMode ?? 'rxonly'}`,
        `--rxq=${o.rxq}`,
        `--txq=${o.txq}`,
        '--total-num-mbufs=4096',
      ],
      { stdio: ['pipe', 'pipe', 'pipe'] },
    );
    const t = new Testpmd(proc, prefix);
    try {
      await t.until(/testpmd> /, 20_000);
      await t.waitLinkUp(o.linkTimeoutMs ?? 20_000);
    } catch (e) {
      await t.stop();
      throw e;
    }
    return t;
  }

  get log(): string {
    return this.output;
  }

  /** Sends a command and waits for the next prompt; answers what it printed. */
  async command(cmd: string, timeoutMs = 10_000): Promise<string> {
    const from = this.output.length;
    this.proc.stdin?.write(`${cmd}\n`);
    await this.until(/testpmd> /, timeoutMs, from);
    return this.output.slice(from);
  }

  async waitLinkUp(timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      if (/Link status: up/.test(await this.command('show port info 0'))) return;
      if (Date.now() > deadline) throw new Error(`memif link did not come up: ${this.output.slice(-3000)}`);
      await new Promise((r) => setTimeout(r, 200));
    }
  }

  /** Port 0's packet counters. */
  async stats(): Promise<{ rx: number; tx: number }> {
    const out = await this.command('show port stats 0');
    const rx = /RX-packets:\s*(\d+)/.exec(out);
    const tx = /TX-packets:\s*(\d+)/.exec(out);
    if (!rx || !tx) throw new Error(`no port stats in: ${out}`);
    return { rx: Number(rx[1]), tx: Number(tx[1]) };
  }

  /** Quits (forwarding must be stopped first: DPDK 22.11's memif can crash the switch when a client leaves mid-traffic). */
  async stop(): Promise<void> {
    if (this.proc.exitCode === null && this.proc.signalCode === null) {
      this.proc.stdin?.write('stop\nquit\n');
      const exited = new Promise<void>((r) => this.proc.once('exit', () => r()));
      const timer = setTimeout(() => void stopProcess(this.proc, 'SIGTERM'), 10_000);
      await exited;
      clearTimeout(timer);
    }
    rmSync(`/var/run/dpdk/${this.prefix}`, { recursive: true, force: true });
  }

  private async until(pattern: RegExp, timeoutMs: number, from = 0): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!pattern.test(this.output.slice(from))) {
      if (this.proc.exitCode !== null || this.proc.signalCode !== null)
        throw new Error(`dpdk-testpmd exited: ${this.output.slice(-3000)}`);
      if (Date.now() > deadline)
        throw new Error(`dpdk-testpmd: timed out waiting for ${pattern}: ${this.output.slice(-3000)}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }
}
