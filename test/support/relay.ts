/**
 * A byte relay between a TCP address and a unix socket, in its own process: what lets a process inside a network
 * namespace reach a server on the host's 127.0.0.1 without an address or route in either namespace, because a
 * filesystem socket is reachable from every network namespace. Nothing is parsed: TLS passes through untouched, so a
 * client checks the server's certificate for whatever address it dialled (127.0.0.1 on both sides).
 *
 * As a script: `node relay.js <listen> <target>`, each endpoint `unix:/path` or `tcp:127.0.0.1:port` (port 0: any
 * free one); it prints one JSON line `{"listening": "<endpoint>"}` once it accepts connections, and exits at SIGTERM or
 * when its stdin ends (the test that started it is gone).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { connect, createServer, type Socket } from 'node:net';

export type Endpoint = { readonly path: string } | { readonly host: string; readonly port: number };

const format = (e: Endpoint): string => ('path' in e ? `unix:${e.path}` : `tcp:${e.host}:${e.port}`);

function parse(text: string): Endpoint {
  if (text.startsWith('unix:')) return { path: text.slice(5) };
  const tcp = /^tcp:(.+):(\d+)$/.exec(text);
  if (!tcp) throw new Error(`not an endpoint: ${JSON.stringify(text)} (unix:/path or tcp:host:port)`);
  return { host: tcp[1]!, port: Number(tcp[2]) };
}

/** Pipes every connection accepted on `listen` to a new connection to `target`, both ways; either end closing closes both. */
function serve(listen: Endpoint, target: Endpoint): void {
  const server = createServer((inbound: Socket) => {
    const outbound = 'path' in target ? connect(target.path) : connect(target.port, target.host);
    const close = (): void => {
      inbound.destroy();
      outbound.destroy();
    };
    inbound.on('error', close).on('close', close);
    outbound.on('error', close).on('close', close);
    inbound.pipe(outbound);
    outbound.pipe(inbound);
  });
  server.on('error', (e) => {
    process.stderr.write(`relay ${format(listen)}: ${e.message}\n`);
    process.exit(1);
  });
  const ready = (): void => {
    const address = server.address();
    const bound =
      typeof address === 'string' || address === null ? listen : { host: address.address, port: address.port };
    process.stdout.write(`${JSON.stringify({ listening: format(bound) })}\n`);
  };
  if ('path' in listen) server.listen(listen.path, ready);
  else server.listen(listen.port, listen.host, ready);
  process.on('SIGTERM', () => process.exit(0));
  // Its stdin is a pipe from the test that started it: when that process is gone, so is the relay.
  process.stdin.on('end', () => process.exit(0)).resume();
}

/** A relay process this test started; stop() ends it by its PID. */
export class Relay {
  private constructor(
    private readonly proc: ChildProcess,
    /** Where it listens, with the port it was given when asked for port 0. */
    readonly listening: Endpoint,
  ) {}

  /**
   * Starts a relay, inside the network namespace `netns` (a name under /var/run/netns) if given, and resolves once it
   * listens. `ip netns exec` execs the relay, so the PID kept is the relay's own.
   */
  static start(listen: Endpoint, target: Endpoint, netns?: string): Promise<Relay> {
    const command = [
      ...(netns ? ['ip', 'netns', 'exec', netns] : []),
      process.execPath,
      __filename,
      format(listen),
      format(target),
    ];
    const proc = spawn(command[0]!, command.slice(1), { stdio: ['pipe', 'pipe', 'pipe'] });
    let stderr = '';
    proc.stderr?.on('data', (d: Buffer) => (stderr += d.toString()));
    return new Promise((done, fail) => {
      let stdout = '';
      const onData = (d: Buffer): void => {
        stdout += d.toString();
        const line = stdout.split('\n')[0];
        if (stdout.includes('\n') && line) {
          proc.stdout?.off('data', onData);
          proc.off('exit', onExit);
          done(new Relay(proc, parse((JSON.parse(line) as { listening: string }).listening)));
        }
      };
      const onExit = (code: number | null): void =>
        fail(new Error(`relay ${format(listen)} → ${format(target)} exited with ${code}: ${stderr}`));
      proc.stdout?.on('data', onData);
      proc.once('exit', onExit);
      proc.once('error', fail);
    });
  }

  get pid(): number | undefined {
    return this.proc.pid;
  }

  /** SIGTERM to the relay; resolves when it has exited. */
  async stop(): Promise<void> {
    if (this.proc.exitCode !== null || this.proc.signalCode !== null) return;
    const exited = new Promise<void>((r) => this.proc.once('exit', () => r()));
    this.proc.kill('SIGTERM');
    await exited;
  }
}

if (require.main === module) {
  const [listen, target] = process.argv.slice(2);
  if (!listen || !target) {
    process.stderr.write('usage: relay.js <unix:/path | tcp:host:port> <unix:/path | tcp:host:port>\n');
    process.exit(2);
  }
  serve(parse(listen), parse(target));
}
