/**
 * plexusctl: inspect what plexusd has attached, and collect what it should not have. Human-readable by default,
 * `-o json` for scripts.
 */
import { request } from 'node:http';
import { parseArgs } from 'node:util';
import {
  toWireAdoptedAttachment,
  type WireAdoptedAttachment,
  type WireAdoptedSandbox,
  type WireAttachment,
  type WireGcReport,
} from '../api/wire';
import type { NetworkDefinition } from '../networks/nad';
import { errorMessage } from '../common/error-message';

const USAGE = `usage: plexusctl [--socket PATH] [-o json] COMMAND
  attachments                 list attachments (container, interface, pod, IPs, state), then the sandboxes
                              Multus made that plexusd removes as Multus would (adopted)
  show CONTAINER [IFNAME]     one attachment: interfaces, IPs, routes and its transaction record
  networks                    list the networks plexusd knows, and invalid definitions
  gc [--keep ID[@IFNAME]]... [--dry-run]
                              remove attachments whose network namespace is gone; with --keep (repeatable,
                              or comma-separated IDs), remove every attachment except those kept, as a CNI GC
                              would; then release leases without an attachment. --dry-run only lists them.
                              Exit code 1 if anything could not be removed.
  --socket PATH               plexusd's socket (default /run/plexus/plexus.sock, or $PLEXUS_SOCKET)`;

function call(socketPath: string, path: string, body?: unknown): Promise<unknown> {
  return new Promise((resolve, reject) => {
    const payload = body === undefined ? undefined : JSON.stringify(body);
    const headers =
      payload === undefined ? {} : { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(payload) };
    const req = request({ socketPath, path, method: payload === undefined ? 'GET' : 'POST', headers }, (res) => {
      let body = '';
      res.on('data', (c: Buffer) => (body += c.toString()));
      res.on('end', () => {
        if ((res.statusCode ?? 500) >= 400) reject(new Error(`plexusd answered ${res.statusCode}: ${body}`));
        else resolve(JSON.parse(body));
      });
    });
    req.on('error', (e) => reject(new Error(`cannot reach plexusd at ${socketPath}: ${e.message}`)));
    req.end(payload);
  });
}

const podOf = (r: WireAttachment | WireAdoptedAttachment): string =>
  r.meta.pod.name ? `${r.meta.pod.namespace ?? ''}/${r.meta.pod.name}` : '-';
const ipsOf = (r: WireAttachment): string => r.result?.ips.map((i) => i.address).join(',') || '-';
const adoptedIpsOf = (a: WireAdoptedAttachment): string => a.interfaces.flatMap((i) => i.ips).join(',') || '-';

type CniInterface = NonNullable<WireAttachment['result']>['interfaces'][number];
/** Where an interface is: in a netns, a memif socket, or on the host. */
function whereIs(iface: CniInterface): string {
  if (iface.sandbox) return ` (in ${iface.sandbox})`;
  return iface.socketPath ? ` (memif socket ${iface.socketPath})` : ' (host)';
}

const leaseOwner = (l: WireGcReport['leases'][number]): string =>
  l.containerId ? `held for ${l.containerId} ${l.ifname}, which has no attachment` : 'no owner recorded';

function gcSummary(report: WireGcReport, dryRun: boolean): string {
  const removed = `${report.removed.length} ${dryRun ? 'to remove' : 'removed'}`;
  const leases = `${report.leases.length} orphaned lease(s) ${dryRun ? 'to release' : 'released'}`;
  return `${removed}, ${report.kept} kept, ${report.failures.length} failed, ${leases}`;
}

function table(rows: string[][]): string {
  const widths = rows[0]!.map((_, c) => Math.max(...rows.map((r) => (r[c] ?? '').length)));
  return rows
    .map((r) =>
      r
        .map((cell, c) => cell.padEnd(widths[c]!))
        .join('  ')
        .trimEnd(),
    )
    .join('\n');
}

const OPTIONS = {
  socket: { type: 'string' },
  output: { type: 'string', short: 'o' },
  help: { type: 'boolean', short: 'h' },
  keep: { type: 'string', multiple: true },
  'dry-run': { type: 'boolean' },
} as const;

export async function run(argv: string[], out: (s: string) => void): Promise<number> {
  let parsed;
  try {
    parsed = parseArgs({ args: argv, options: OPTIONS, allowPositionals: true, strict: true });
  } catch (e) {
    // Node names the word first, in quotes ("Unknown option '--x'", "Option '--socket <value>' argument missing").
    const word = /'([^' ]+)/.exec(errorMessage(e))?.[1] ?? '';
    const why =
      (e as NodeJS.ErrnoException).code === 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE'
        ? `${word} needs a value`
        : `unexpected argument ${word}`;
    out(`plexusctl: ${why}\n${USAGE}`);
    return 2;
  }
  const { values, positionals } = parsed;
  if (values.help) {
    out(USAGE);
    return 0;
  }
  const socket = values.socket ?? process.env.PLEXUS_SOCKET ?? '/run/plexus/plexus.sock';
  const json = values.output === 'json';
  const [command, ...args] = positionals;
  if (command !== 'gc' && (values.keep !== undefined || values['dry-run'] !== undefined)) {
    out(`plexusctl: --keep and --dry-run are options of gc\n${USAGE}`);
    return 2;
  }
  switch (command) {
    case 'attachments': {
      const records = (await call(socket, '/v1/attachments')) as WireAttachment[];
      // Sandboxes Multus made before Plexus took the node over: removed as Multus would, listed after Plexus's own.
      const adopted = ((await call(socket, '/v1/adopted')) as WireAdoptedSandbox[]).map(toWireAdoptedAttachment);
      if (json) out(JSON.stringify([...records, ...adopted], null, 2));
      else {
        const own = records.map((r) => [
          r.meta.containerId,
          r.meta.ifname,
          podOf(r),
          r.meta.networks.join(','),
          ipsOf(r),
          r.state,
        ]);
        const theirs = adopted.map((a) => [
          a.meta.containerId,
          a.interfaces.map((i) => i.ifname).join(','),
          podOf(a),
          a.meta.networks.join(','),
          adoptedIpsOf(a),
          `adopted (${a.maker})`,
        ]);
        out(table([['CONTAINER', 'IFNAME', 'POD', 'NETWORKS', 'IPS', 'STATE'], ...own, ...theirs]));
      }
      return 0;
    }
    case 'show': {
      const [cid, ifname] = args;
      if (!cid) break;
      const records = ((await call(socket, '/v1/attachments')) as WireAttachment[]).filter(
        (r) => r.meta.containerId === cid && (!ifname || r.meta.ifname === ifname),
      );
      if (records.length === 0) {
        out(`no attachment for container ${cid}${ifname ? ` and interface ${ifname}` : ''}`);
        return 1;
      }
      if (json) out(JSON.stringify(records, null, 2));
      else {
        for (const r of records) {
          out(`${r.meta.containerId} ${r.meta.ifname}  pod ${podOf(r)}  netns ${r.meta.netns}  ${r.state}`);
          for (const [i, iface] of (r.result?.interfaces ?? []).entries()) {
            out(`  interface ${i}: ${iface.name} ${iface.mac ?? ''}${whereIs(iface)}`);
          }
          for (const ip of r.result?.ips ?? [])
            out(`  ip ${ip.address}${ip.gateway ? ` gw ${ip.gateway}` : ''} on interface ${ip.interface ?? '-'}`);
          for (const rt of r.result?.routes ?? []) out(`  route ${rt.dst}${rt.gw ? ` via ${rt.gw}` : ''}`);
          out('  transaction:');
          for (const e of r.events) out(`    ${e.at}  ${e.what}${e.ms !== undefined ? ` (${e.ms} ms)` : ''}`);
          out(`  undo steps recorded: ${r.undo.length}`);
        }
      }
      return 0;
    }
    case 'networks': {
      const { networks, errors } = (await call(socket, '/v1/networks')) as {
        networks: NetworkDefinition[];
        errors: { msg: string }[];
      };
      if (json) out(JSON.stringify({ networks, errors }, null, 2));
      else {
        out(
          table([
            ['NETWORK', 'CNI NAME', 'VERSION', 'PLUGINS', 'SOURCE'],
            ...networks.map((n) => [n.key, n.cniName, n.cniVersion, n.plugins.map((p) => p.type).join(','), n.source]),
          ]),
        );
        for (const e of errors) out(`invalid: ${e.msg}`);
      }
      return 0;
    }
    case 'gc': {
      if (args.length) {
        out(`plexusctl gc: unexpected argument ${args[0]}\n${USAGE}`);
        return 2;
      }
      const keep = (values.keep ?? []).flatMap((k) => k.split(',').filter(Boolean));
      const dryRun = values['dry-run'] ?? false;
      const report = (await call(socket, '/v1/gc', { dryRun, ...(keep.length ? { keep } : {}) })) as WireGcReport;
      if (json) out(JSON.stringify(report, null, 2));
      else {
        for (const r of report.removed)
          out(`${dryRun ? 'would remove' : 'removed'} ${r.containerId} ${r.ifname}: ${r.reason}`);
        for (const l of report.leases) {
          out(`${dryRun ? 'would release' : 'released'} lease ${l.address} in network ${l.network}: ${leaseOwner(l)}`);
        }
        for (const f of report.failures) out(`failed ${f.containerId || '-'} ${f.ifname || '-'}: ${f.error}`);
        out(gcSummary(report, dryRun));
      }
      return report.failures.length ? 1 : 0;
    }
  }
  out(USAGE);
  return 2;
}

/**
 * plexusctl as a command: the exit code is set, never process.exit, which would end it before stdout drained into a
 * pipe (`| wc -l` would count a pipe-full or two of lines). With the socket closed, nothing else keeps it running.
 */
export function main(argv: string[] = process.argv.slice(2)): void {
  run(argv, (s) => process.stdout.write(`${s}\n`)).then(
    (code) => (process.exitCode = code),
    (e: unknown) => {
      process.stderr.write(`plexusctl: ${errorMessage(e)}\n`);
      process.exitCode = 1;
    },
  );
}

if (require.main === module) main();
