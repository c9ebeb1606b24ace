/**
 * The least a daemon behind plexus-cni can be, in Node.js (run by floor.ts as
 * `node dist/scripts/lib/bench/floor-daemon.js '<json settings>'`): it listens on the shim's unix socket and, for an
 * ADD, runs the floor's rtnetlink batch (floor-attach.ts) on its main thread and answers; nothing else: no HTTP
 * framework, no parsing beyond the request's length and its env, no journal, no IPAM, no planning. A DEL deletes the
 * host veth before answering (the bench does not time it). Prints "ready" once listening; ends on SIGTERM.
 *
 * The bench times ADDs through bin/plexus-cni against it: what the shim, its socket round trip, waking a Node.js
 * process and this batch cost together, so that plexusd's own work is plexus's ADD less that.
 */
import { unlinkSync } from 'node:fs';
import { createServer, type Socket } from 'node:net';
import { rememberHomeNetns } from '../../../src/kernel/netns';
import { receiveBuffer, RtnlSocket } from '../../../src/kernel/rtnetlink';
import { type AttachTarget, attachBridgePod, podAddress } from './floor-attach';

export interface FloorDaemonSettings extends AttachTarget {
  readonly socketPath: string;
  /** Host veths are named `${prefix}<n>`. */
  readonly prefix: string;
}

interface Call {
  readonly env: Record<string, string | undefined>;
}

const reply = (c: Socket, exitCode: number, body: string): void => {
  c.end(
    `HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-CNI-Exit-Code: ${exitCode}\r\n` +
      `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
  );
};

/** The request's body once it has all arrived (headers end, then Content-Length bytes), else undefined. */
function completeBody(buf: Buffer): Buffer | undefined {
  const end = buf.indexOf('\r\n\r\n');
  if (end < 0) return undefined;
  const length = /content-length:\s*(\d+)/i.exec(buf.subarray(0, end).toString('latin1'));
  const size = length ? Number(length[1]) : 0;
  return buf.length >= end + 4 + size ? buf.subarray(end + 4, end + 4 + size) : undefined;
}

function main(): void {
  const s = JSON.parse(process.argv[2] ?? '{}') as FloorDaemonSettings;
  rememberHomeNetns();
  const received = receiveBuffer();
  const host = RtnlSocket.open(received);
  const hostNames = new Map<string, string>();
  let next = 0;
  const handle = (call: Call): { exitCode: number; body: string } => {
    const { CNI_COMMAND: command, CNI_CONTAINERID: cid = '', CNI_NETNS: netns = '' } = call.env;
    if (command === 'ADD') {
      const i = next++;
      const hostName = `${s.prefix}${i}`;
      attachBridgePod(host, s, hostName, netns, i, received);
      hostNames.set(cid, hostName);
      const result = {
        cniVersion: '1.1.0',
        interfaces: [{ name: 'eth0', sandbox: netns }],
        ips: [{ address: `${podAddress(s, i)}/16`, gateway: `${s.net}.0.1`, interface: 0 }],
      };
      return { exitCode: 0, body: `${JSON.stringify(result)}\n` };
    }
    if (command === 'DEL') {
      const hostName = hostNames.get(cid);
      hostNames.delete(cid);
      if (hostName !== undefined) host.deleteLink(hostName);
    }
    return { exitCode: 0, body: '' };
  };
  try {
    unlinkSync(s.socketPath);
  } catch {
    // not there: nothing to clear
  }
  const server = createServer((c) => {
    let buf = Buffer.alloc(0);
    c.on('error', () => undefined);
    c.on('data', (d: Buffer) => {
      buf = Buffer.concat([buf, d]);
      const body = completeBody(buf);
      if (body === undefined) return;
      try {
        const answer = handle(JSON.parse(body.toString('utf8')) as Call);
        reply(c, answer.exitCode, answer.body);
      } catch (e) {
        reply(c, 1, `${JSON.stringify({ cniVersion: '1.1.0', code: 999, msg: String(e) })}\n`);
      }
    });
  });
  server.listen(s.socketPath, () => process.stdout.write('ready\n'));
  process.once('SIGTERM', () => {
    server.close();
    host.close();
    process.exit(0);
  });
}

main();
