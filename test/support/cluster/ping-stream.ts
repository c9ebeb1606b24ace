/**
 * Traffic that runs while a test changes the cluster: a continuous ping from a placed pod to an address, one echo
 * every 200 ms, whose replies say afterwards whether the traffic ever stopped and for how long.
 */
import type { ChildProcess } from 'node:child_process';
import { stopProcess } from '../processes';
import type { PlacedPod } from './placed';

export const PING_INTERVAL_MS = 200;

/** What one stream saw: echoes sent, replies, and the longest run of echoes in a row without a reply. */
export interface PingTally {
  readonly what: string;
  readonly sent: number;
  readonly answered: number;
  /** The longest run of consecutive echoes unanswered (the last echo, in flight when stopped, left out). */
  readonly longestGap: number;
  /** The end of what ping printed, to tell why when it sent nothing. */
  readonly said: string;
}

export class PingStream {
  private out = '';

  private constructor(
    readonly what: string,
    private readonly proc: ChildProcess,
  ) {
    proc.stdout?.on('data', (d: Buffer) => (this.out += d.toString()));
    proc.stderr?.on('data', (d: Buffer) => (this.out += d.toString()));
  }

  /** Starts pinging `to` from the pod `from`; stop() ends it. */
  static start(from: PlacedPod, to: string): PingStream {
    const interval = String(PING_INTERVAL_MS / 1000);
    // Line-buffered: what it printed survives a SIGKILL on a machine too loaded for it to exit on SIGINT in time.
    const proc = from.node.spawnInPod(from.netns, ['stdbuf', '-oL', 'ping', '-n', '-i', interval, to]);
    return new PingStream(`${from.node.name} → ${to}`, proc);
  }

  /** Stops the ping (SIGINT, after which it prints its summary) and answers its tally. */
  async stop(): Promise<PingTally> {
    await stopProcess(this.proc, 'SIGINT', 10000);
    const answered = new Set([...this.out.matchAll(/bytes from .* icmp_seq=(\d+)/g)].map((m) => Number(m[1])));
    // Without its summary (killed), the last echo answered bounds what was sent.
    const sent = Number(/(\d+) packets transmitted/.exec(this.out)?.[1] ?? Math.max(0, ...answered) + 1);
    let longestGap = 0;
    let gap = 0;
    for (let seq = 1; seq < sent; seq++) {
      gap = answered.has(seq) ? 0 : gap + 1;
      longestGap = Math.max(longestGap, gap);
    }
    return { what: this.what, sent, answered: answered.size, longestGap, said: this.out.slice(-300) };
  }
}

/** Stops every stream, each even when another's stop fails; answers their tallies. */
export async function stopAll(streams: readonly PingStream[]): Promise<PingTally[]> {
  const settled = await Promise.allSettled(streams.map((s) => s.stop()));
  return settled.map((r, i) =>
    r.status === 'fulfilled'
      ? r.value
      : { what: streams[i]!.what, sent: NaN, answered: 0, longestGap: Infinity, said: String(r.reason) },
  );
}
