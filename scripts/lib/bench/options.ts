/** The options of `npm run bench` (scripts/bench.ts): flags, defaults and their checks. */
import { parseArgs } from 'node:util';

export interface Options {
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

export function parseOptions(argv: readonly string[]): Options {
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
