/**
 * Run as a child of the bench (niced, so it takes only idle CPU): samples every bench netns for an address on two
 * interfaces, until SIGTERM; then prints one JSON line (OverlapFigures). A scan reads the netns one after another, so a
 * candidate (address X seen in A, then in B) is confirmed by reading B, then A, again: A cannot regain an address it
 * lost, so X in both on the second reads means both had it at once.
 *
 *   node del-overlap-sampler.js <netns name prefix> <interval ms>
 */
import { readdirSync } from 'node:fs';
import { Kernel } from '../../../src/kernel/kernel';

export interface OverlapFigures {
  readonly samples: number;
  /** Netns looked at in the largest sample. */
  readonly mostNetns: number;
  readonly overlaps: number;
  /** The first few, as `address on ns:link and ns:link`. */
  readonly examples: readonly string[];
}

const NETNS_DIR = '/var/run/netns';
const skipped = (ip: string): boolean => ip.startsWith('127.') || ip === '::1' || ip.toLowerCase().startsWith('fe80:');

async function addressesOf(kernel: Kernel, ns: string): Promise<Map<string, string> | undefined> {
  const r = await kernel.batch(`${NETNS_DIR}/${ns}`, [{ op: 'linkList' }, { op: 'addrList' }]);
  if (!r.ok) return undefined; // deleted meanwhile
  const [links, addrs] = r.value;
  const out = new Map<string, string>();
  for (const a of addrs) {
    const ip = a.address.split('/')[0] ?? '';
    if (!skipped(ip)) out.set(ip, links.find((l) => l.index === a.index)?.name ?? `#${a.index}`);
  }
  return out;
}

async function main(): Promise<void> {
  const [prefix = '', interval = '250'] = process.argv.slice(2);
  const kernel = new Kernel();
  let stopping = false;
  process.on('SIGTERM', () => (stopping = true));
  let samples = 0;
  let mostNetns = 0;
  let overlaps = 0;
  const examples: string[] = [];
  while (!stopping) {
    const names = readdirSync(NETNS_DIR).filter((n) => n.startsWith(prefix));
    mostNetns = Math.max(mostNetns, names.length);
    const seen = new Map<string, { ns: string; link: string }>();
    for (const ns of names) {
      for (const [ip, link] of (await addressesOf(kernel, ns)) ?? []) {
        const first = seen.get(ip);
        if (first === undefined) {
          seen.set(ip, { ns, link });
          continue;
        }
        const again = (await addressesOf(kernel, ns))?.has(ip) && (await addressesOf(kernel, first.ns))?.has(ip);
        if (!again) continue;
        overlaps++;
        if (examples.length < 10) examples.push(`${ip} on ${first.ns}:${first.link} and ${ns}:${link}`);
      }
    }
    samples++;
    await new Promise((r) => setTimeout(r, Number(interval)));
  }
  await kernel.close();
  const figures: OverlapFigures = { samples, mostNetns, overlaps, examples };
  process.stdout.write(`${JSON.stringify(figures)}\n`);
}

void main();
