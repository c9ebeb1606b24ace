/**
 * The daemon's API on a socket of its own, in front of a FakeEngineVerbs: what a test posts goes through the real
 * DaemonServer (body limits, UTF-8, parsing, call slots, routes) and reaches only the fake. `close()` removes all.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { DaemonServer } from '../../src/api/server';
import { CallSlots } from '../../src/common/call-slots';
import { FakeEngineVerbs } from './fake-engine-verbs';

export interface ApiAnswer {
  readonly status: number;
  /** X-CNI-Exit-Code, on answers to /v1/cni. */
  readonly exitCode: string | undefined;
  readonly body: string;
}

export class ApiBed {
  private constructor(
    private readonly dir: string,
    readonly server: DaemonServer,
    readonly engine: FakeEngineVerbs,
    /** The server's readiness: a test sets `ready` false for the time before recovery. */
    readonly state: { ready: boolean },
  ) {}

  /** The API with `limit` call slots and `maxQueued` waiting places. */
  static async start(limit = 4, maxQueued = 4): Promise<ApiBed> {
    const dir = mkdtempSync(join(tmpdir(), 'plexus-api-'));
    const engine = new FakeEngineVerbs();
    const state = { ready: true };
    const options = { socketPath: join(dir, 'plexus.sock'), slots: new CallSlots(limit, maxQueued) };
    const server = new DaemonServer(options, engine, state, pino({ level: 'silent' }));
    const listening = await server.listen();
    if (!listening.ok) {
      rmSync(dir, { recursive: true, force: true });
      throw new Error(listening.error);
    }
    return new ApiBed(dir, server, engine, state);
  }

  get socketPath(): string {
    return join(this.dir, 'plexus.sock');
  }

  send(method: 'GET' | 'POST', path: string, body?: string | Buffer): Promise<ApiAnswer> {
    return new Promise((resolve, reject) => {
      const req = request({ socketPath: this.socketPath, method, path }, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () =>
          resolve({
            status: res.statusCode ?? 0,
            exitCode: res.headers['x-cni-exit-code'] as string | undefined,
            body: Buffer.concat(chunks).toString('utf8'),
          }),
        );
      });
      req.on('error', reject);
      req.end(body);
    });
  }

  /** A CNI call as plexus-cni forwards it: the CNI_* environment and stdin. */
  cni(env: Record<string, string>, stdin: unknown): Promise<ApiAnswer> {
    const text = typeof stdin === 'string' ? stdin : JSON.stringify(stdin);
    return this.send('POST', '/v1/cni', JSON.stringify({ env, stdin: text }));
  }

  async close(): Promise<void> {
    await this.server.close(0);
    rmSync(this.dir, { recursive: true, force: true });
  }
}
