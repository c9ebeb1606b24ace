/**
 * The rtnetlink floor of a 1-interface bridge ADD, measured in a process that does nothing else (run by floor.ts as
 * `node dist/scripts/lib/bench/floor-batch.js '<json settings>'`). It sends the very requests plexusd's kernel worker
 * sends for one bridge attachment (src/drivers/common/bridge-port.ts, pod-interface.ts), through the same
 * src/kernel code, on the main thread: no worker hop, no journal, no IPAM, no HTTP. Prints one JSON line of samples.
 *
 * Per run, timed: a veth with its host end on the bridge (IFLA_MASTER), up, and its peer born in the pod's netns as
 * eth0 (IFLA_NET_NS_FD); an rtnetlink socket opened in the pod's netns; eth0 up, its address, the default route;
 * eth0 read back. Untimed: the host veth deleted afterwards, as a DEL would; in churn mode the namespace is made just
 * before and deleted just after, as section 1c of the bench does.
 */
import { spawnSync } from 'node:child_process';
import { rememberHomeNetns } from '../../../src/kernel/netns';
import { receiveBuffer, RtnlSocket } from '../../../src/kernel/rtnetlink';
import { type AttachTarget, attachBridgePod } from './floor-attach';

export interface FloorBatchSettings extends AttachTarget {
  readonly runs: number;
  readonly warmup: number;
  /** Namespaces are named `${prefix}<i>` (i from 0 to warmup + runs - 1). */
  readonly prefix: string;
  readonly churn: boolean;
}

function ip(args: readonly string[]): void {
  const r = spawnSync('ip', args, { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`ip ${args.join(' ')}: ${r.stderr.trim()}`);
}

function main(): void {
  const s = JSON.parse(process.argv[2] ?? '{}') as FloorBatchSettings;
  rememberHomeNetns();
  const received = receiveBuffer(); // one per thread, as the kernel worker has
  const host = RtnlSocket.open(received);
  const samples: number[] = [];
  const total = s.warmup + s.runs;
  if (!s.churn) for (let i = 0; i < total; i++) ip(['netns', 'add', `${s.prefix}${i}`]);
  try {
    for (let i = 0; i < total; i++) {
      const name = `${s.prefix}${i}`;
      if (s.churn) ip(['netns', 'add', name]);
      const t0 = process.hrtime.bigint();
      attachBridgePod(host, s, `${s.prefix}v${i}`, `/var/run/netns/${name}`, i, received);
      const ms = Number(process.hrtime.bigint() - t0) / 1e6;
      if (i >= s.warmup) samples.push(ms);
      host.deleteLink(`${s.prefix}v${i}`);
      if (s.churn) ip(['netns', 'del', name]);
    }
  } finally {
    if (!s.churn) for (let i = 0; i < total; i++) spawnSync('ip', ['netns', 'del', `${s.prefix}${i}`]);
    host.close();
  }
  process.stdout.write(`${JSON.stringify({ samples })}\n`);
}

main();
