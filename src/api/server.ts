/**
 * The daemon's API: HTTP/JSON on a unix socket (mode 0600). plexus-cni posts CNI calls to /v1/cni;
 * /healthz and /readyz are for probes; /v1/attachments, /v1/networks and /v1/gc are for plexusctl.
 */
import { isUtf8 } from 'node:buffer';
import { chmodSync, unlinkSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { connect } from 'node:net';
import type { Logger } from 'pino';
import { err } from '../cni/errors';
import { ForwardedCallSchema } from '../cni/request';
import type { CallSlots } from '../common/call-slots';
import type { EngineVerbs } from './engine-port';
import { type CniReply, errorReply, handleCniCall, internalErrorReply } from './cni-handler';
import { apiErrors } from './errors';
import { parseOperatorGc, staleReason } from './operator-gc';
import { ok, type Result } from '../common/result';
import { removeStale, socketPathState } from './socket-dir';
import { toWireAdoptedSandbox, toWireAttachment, toWireGcReport } from './wire';
import type { CniCallObserver } from '../metrics/metrics';
import { errorMessage } from '../common/error-message';

const MAX_BODY = 4 * 1024 * 1024;
const RUNTIME_LEFT = 'the runtime closed its connection before the answer (it gave up on the call)';

export interface ServerState {
  ready: boolean;
}

/**
 * The request body, or undefined when it is over MAX_BODY. An oversized body is read to its end and dropped, so the
 * caller can answer with an error: a connection closed before any reply would make plexus-cni replay the call. Only
 * a body over twice the limit (no shim sends one) gets the connection closed.
 */
function readBody(req: IncomingMessage): Promise<Buffer | undefined> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (c: Buffer) => {
      size += c.length;
      if (size > 2 * MAX_BODY) {
        resolve(undefined);
        req.destroy();
      } else if (size > MAX_BODY) chunks.length = 0;
      else chunks.push(c);
    });
    req.on('end', () => resolve(size > MAX_BODY ? undefined : Buffer.concat(chunks)));
    req.on('error', reject);
  });
}

const send = (res: ServerResponse, status: number, body: string, headers: Record<string, string> = {}): void => {
  res.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body), ...headers });
  res.end(body);
};
const sendCni = (res: ServerResponse, reply: CniReply): void =>
  send(res, 200, reply.stdout, { 'X-CNI-Exit-Code': String(reply.exitCode) });

export interface ServerOptions {
  readonly socketPath: string;
  /** The node-wide bound on CNI calls at once (--max-concurrent, --max-queued). */
  readonly slots: CallSlots;
  /** Told of every CNI call once answered (metrics). */
  readonly observer?: CniCallObserver;
  /** Served on GET /metrics (Prometheus text format). */
  readonly metrics?: { readonly contentType: string; render(): Promise<string> };
}

export class DaemonServer {
  private readonly server: Server;
  private readonly limiter: CallSlots;
  private inFlight = 0;
  private closing = false;

  constructor(
    private readonly options: ServerOptions,
    private readonly engine: EngineVerbs,
    readonly state: ServerState,
    private readonly log: Logger,
  ) {
    this.limiter = options.slots;
    this.server = createServer((req, res) => {
      this.inFlight++;
      res.once('close', () => this.inFlight--);
      // While draining, a connection closes after its reply: nothing new may arrive on it.
      if (this.closing) res.setHeader('Connection', 'close');
      this.route(req, res).catch((e: unknown) => {
        this.log.error({ err: e }, 'request failed');
        if (!res.headersSent) send(res, 500, JSON.stringify({ error: String(e) }));
      });
    });
    this.server.keepAliveTimeout = 1000;
  }

  /** CNI calls being handled and waiting (plexus_cni_calls_in_flight, plexus_cni_calls_queued). */
  get calls(): { readonly inFlight: number; readonly queued: number } {
    return { inFlight: this.limiter.inFlight, queued: this.limiter.queued };
  }

  private async route(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://plexusd');
    if (req.method === 'GET' && url.pathname === '/healthz') return send(res, 200, '{"status":"ok"}');
    if (req.method === 'GET' && url.pathname === '/readyz')
      return send(
        res,
        this.state.ready ? 200 : 503,
        JSON.stringify({
          ready: this.state.ready,
          pid: process.pid,
          inFlight: this.limiter.inFlight,
          queued: this.limiter.queued,
        }),
      );
    if (req.method === 'GET' && url.pathname === '/v1/attachments')
      return send(res, 200, JSON.stringify((await this.engine.records()).map(toWireAttachment)));
    if (req.method === 'GET' && url.pathname === '/v1/adopted')
      return send(res, 200, JSON.stringify(this.engine.adopted({ addresses: true }).map(toWireAdoptedSandbox)));
    if (req.method === 'GET' && url.pathname === '/v1/networks') {
      const { networks, errors } = this.engine.listNetworks();
      return send(
        res,
        200,
        JSON.stringify({ networks, errors: errors.map((e) => ({ code: e.code, msg: e.message, details: e.details })) }),
      );
    }
    if (req.method === 'GET' && url.pathname === '/metrics' && this.options.metrics) {
      const text = await this.options.metrics.render();
      return send(res, 200, text, { 'Content-Type': this.options.metrics.contentType });
    }
    if (req.method === 'POST' && url.pathname === '/v1/cni') return this.cni(req, res);
    if (req.method === 'POST' && url.pathname === '/v1/gc') return this.gc(req, res);
    send(res, 404, JSON.stringify({ error: `no route ${req.method} ${url.pathname}` }));
  }

  private async cni(req: IncomingMessage, res: ServerResponse): Promise<void> {
    // Until recovery has reconciled the journal, 503 tells plexus-cni to wait and retry.
    if (!this.state.ready) return send(res, 503, '{"error":"plexusd is starting"}');
    const started = process.hrtime.bigint();
    const body = await readBody(req);
    if (body === undefined) return sendCni(res, errorReply('1.1.0', apiErrors.tooLarge('CNI request', MAX_BODY)));
    // Decoding would turn invalid bytes into U+FFFD: an interface or container named by the runtime could not be named again.
    if (!isUtf8(body)) return sendCni(res, errorReply('1.1.0', apiErrors.notUtf8()));
    let call;
    try {
      call = ForwardedCallSchema.parse(JSON.parse(body.toString('utf8')));
    } catch (e) {
      return sendCni(res, errorReply('1.1.0', apiErrors.malformed(errorMessage(e))));
    }
    // A runtime that gives up (its deadline: containerd kills plexus-cni) closes the connection before the answer.
    const runtime = new AbortController();
    res.once('close', () => {
      if (!res.writableEnded) runtime.abort(RUNTIME_LEFT);
    });
    const ran = await this.limiter.run(async () => {
      try {
        return await handleCniCall(call, { engine: this.engine, log: this.log, signal: runtime.signal });
      } catch (e) {
        this.log.error({ err: e }, 'CNI call crashed');
        return internalErrorReply(call.stdin, e);
      }
    });
    if (!ran) {
      const busy = apiErrors.busy(this.limiter.inFlight, this.limiter.queued);
      const seconds = Number(process.hrtime.bigint() - started) / 1e9;
      const command = call.env.CNI_COMMAND ?? '';
      const { CNI_CONTAINERID: containerId, CNI_IFNAME: ifname } = call.env;
      this.options.observer?.observe({ command, containerId, ifname, code: busy.code, seconds });
      return sendCni(res, errorReply('1.1.0', busy));
    }
    sendCni(res, ran.value);
    this.options.observer?.observe({
      command: call.env.CNI_COMMAND ?? '',
      containerId: call.env.CNI_CONTAINERID,
      ifname: call.env.CNI_IFNAME,
      code: replyCode(ran.value),
      seconds: Number(process.hrtime.bigint() - started) / 1e9,
    });
  }

  private async gc(req: IncomingMessage, res: ServerResponse): Promise<void> {
    if (!this.state.ready) return send(res, 503, '{"error":"plexusd is starting"}');
    const body = await readBody(req);
    const parsed =
      body === undefined ? err(apiErrors.tooLarge('GC request', MAX_BODY)) : parseOperatorGc(body.toString('utf8'));
    if (!parsed.ok)
      return send(res, 400, JSON.stringify({ error: parsed.error.message, details: parsed.error.details }));
    const report = toWireGcReport(await this.engine.sweep(staleReason(parsed.value), { dryRun: parsed.value.dryRun }));
    send(res, 200, JSON.stringify(report));
  }

  /** Listens on the socket, in a directory prepareSocketDir has checked; what stands in the way, as a message. */
  async listen(): Promise<Result<void, string>> {
    const path = this.options.socketPath;
    const cleared = await this.clearSocketPath(path);
    if (!cleared.ok) return cleared;
    const oldMask = process.umask(0o177); // the socket is born 0600: no window where others can connect
    try {
      await new Promise<void>((resolve, reject) => {
        this.server.once('error', reject);
        this.server.listen(path, () => resolve());
      });
    } finally {
      process.umask(oldMask);
    }
    chmodSync(path, 0o600);
    return ok(undefined);
  }

  private async clearSocketPath(path: string): Promise<Result<void, string>> {
    const found = socketPathState(path);
    switch (found.kind) {
      case 'free':
        return ok(undefined);
      case 'other':
        return err(found.problem);
      case 'symlink':
        removeStale(path);
        this.log.warn({ path, target: found.target }, 'removed a symbolic link at the socket path');
        return ok(undefined);
      case 'socket':
        if (await socketAnswers(path)) return err(`another plexusd is already listening on ${path}`);
        removeStale(path);
        return ok(undefined);
    }
  }

  /**
   * Graceful stop: accept no more connections and remove the socket at once (plexus-cni then retries until a
   * replacement daemon listens), let every call already accepted finish, then close. Calls still running after
   * `drainMs` are cut off; their shims see a reset before any reply byte and retry them on the replacement, which
   * is safe because every CNI verb is idempotent here. Returns the number of connections cut off.
   */
  async close(drainMs = 0): Promise<number> {
    this.closing = true;
    const drained = new Promise<void>((resolve) => this.server.close(() => resolve()));
    try {
      unlinkSync(this.options.socketPath);
    } catch {
      /* already gone */
    }
    this.server.closeIdleConnections();
    let timer: NodeJS.Timeout | undefined;
    const timedOut = await Promise.race([
      drained.then(() => false),
      new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(true), drainMs))),
    ]);
    clearTimeout(timer);
    const cut = timedOut ? this.inFlight : 0;
    this.server.closeAllConnections();
    return cut;
  }
}

/** The CNI error code of a reply, 0 for success. */
function replyCode(reply: CniReply): number {
  if (reply.exitCode === 0) return 0;
  try {
    const code = (JSON.parse(reply.stdout) as { code?: unknown }).code;
    return typeof code === 'number' ? code : reply.exitCode;
  } catch {
    return reply.exitCode;
  }
}

function socketAnswers(path: string): Promise<boolean> {
  return new Promise((resolve) => {
    const s = connect(path);
    s.once('connect', () => {
      s.destroy();
      resolve(true);
    });
    s.once('error', () => resolve(false));
  });
}
