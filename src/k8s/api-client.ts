/**
 * plexusd's client of the Kubernetes API: every request (the informers' lists and watches, a pod's GET, status
 * PATCHes, events) over keep-alive connections, through a client-side QPS/burst limit, with a timeout on each.
 * @kubernetes/client-node is not used: 1.x opens a new TLS connection for every request, and loading it costs the
 * daemon about 70 MiB of memory (see kubeconfig.ts).
 */
import { Agent as HttpAgent, request as httpRequest, type ClientRequest, type IncomingMessage } from 'node:http';
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https';
import type { ApiFailure } from '../common/api-object';
import { err, ok, type Result } from '../common/result';
import type { ApiEndpoint } from './kubeconfig';
import { RateLimiter } from './rate-limiter';
import { requestAttributes, type RequestAttributes } from './request-attributes';
import { definedFields } from '../common/defined-fields';

export interface ApiClientOptions {
  /** Requests per second once the burst is spent (--kube-api-qps). */
  readonly qps: number;
  /** Requests that may go at once (--kube-api-burst). */
  readonly burst: number;
  /** How long one request may take, connection included (--kube-api-timeout). */
  readonly timeoutMs: number;
  /** Told of every 403 and of every answer that is not one (rbac-refusals.ts reports them). */
  readonly permissions?: PermissionObserver;
}

/** A request the API server refused with 403: what RBAC did not grant, and whether serving depends on it. */
export interface RefusedRequest extends RequestAttributes {
  readonly path: string;
  readonly message: string;
  /** A cache plexusd serves from (a list or watch) or a request a CNI call waits for (`urgent`, `serving`). */
  readonly blocksServing: boolean;
}

/** The one place every API answer's permission outcome goes, whichever caller made the request. */
export interface PermissionObserver {
  refused(request: RefusedRequest): void;
  /** An answer other than 403 (a refusal of the same verb and resource has ended). */
  allowed(request: RequestAttributes): void;
}

export interface RequestOptions {
  readonly body?: unknown;
  readonly contentType?: string;
  /** A CNI call waits for it: it goes before background writes waiting for the rate limit. */
  readonly urgent?: boolean;
  /** Serving depends on it (a refusal shows on /readyz); default: urgent. */
  readonly serving?: boolean;
}

export class KubeApiClient {
  private readonly agent: HttpAgent;
  private readonly limiter: RateLimiter;
  private readonly base: URL;
  private readonly open = new Set<ClientRequest>();
  /** The watches under way, each a long-lived answer. */
  private readonly watches = new Set<IncomingMessage>();
  /** Requests sent, by "VERB resource" (for metrics and the API-cost benchmark). */
  readonly sent = new Map<string, number>();

  constructor(
    private readonly endpoint: ApiEndpoint,
    private readonly options: ApiClientOptions,
  ) {
    this.base = endpoint.server;
    this.agent =
      this.base.protocol === 'http:'
        ? new HttpAgent({ keepAlive: true, maxSockets: 16 })
        : new HttpsAgent({ keepAlive: true, maxSockets: 16 });
    this.limiter = new RateLimiter(options.qps, options.burst);
  }

  get server(): string {
    return this.base.toString();
  }

  /** Sends one request; a non-2xx answer is a failure carrying the status and the server's message. */
  async request(
    method: string,
    path: string,
    resource: string,
    options: RequestOptions = {},
  ): Promise<Result<unknown, ApiFailure>> {
    const started = await this.start(method, path, resource, options, this.options.timeoutMs);
    if (!started.ok) return started;
    const res = started.value;
    return new Promise((done) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('error', (e) => done(err({ status: 0, message: `${method} ${path}: ${e.message}` })));
      res.on('close', () => done(err({ status: 0, message: `${method} ${path}: the connection closed mid-answer` })));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        let parsed: unknown = text;
        try {
          parsed = text ? JSON.parse(text) : undefined;
        } catch {
          /* not JSON: kept as text */
        }
        const status = res.statusCode ?? 0;
        const message = (parsed as { message?: string } | undefined)?.message ?? `HTTP ${status}`;
        this.observe(method, path, status, message, options.serving ?? options.urgent ?? false);
        if (status >= 200 && status < 300) done(ok(parsed));
        else done(err({ status, message }));
      });
    });
  }

  /**
   * A watch: calls `onLine` with each line of the answer until the server ends it (ok), or it fails, stays silent
   * longer than `idleMs`, or `signal` aborts it (an error). close() ends every watch. A watch keeps a cache plexusd
   * serves from: a refusal of it blocks serving.
   */
  async stream(
    path: string,
    resource: string,
    idleMs: number,
    onLine: (line: string) => void,
    signal?: AbortSignal,
  ): Promise<Result<void, ApiFailure>> {
    const started = await this.start('GET', path, resource, definedFields({ signal }), idleMs);
    if (!started.ok) return started;
    const res = started.value;
    if ((res.statusCode ?? 0) >= 300) {
      const text = await new Promise<string>((r) => {
        let t = '';
        res.on('data', (c: Buffer) => (t += c.toString()));
        res.on('end', () => r(t));
        res.on('error', () => r(t));
      });
      let message = `HTTP ${res.statusCode}`;
      try {
        message = (JSON.parse(text) as { message?: string }).message ?? message;
      } catch {
        /* not JSON */
      }
      this.observe('GET', path, res.statusCode ?? 0, message, true);
      return err({ status: res.statusCode ?? 0, message });
    }
    this.observe('GET', path, res.statusCode ?? 0, '', true);
    this.watches.add(res);
    res.on('close', () => this.watches.delete(res));
    return new Promise((done) => {
      let rest = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => {
        const lines = (rest + c).split('\n');
        rest = lines.pop() ?? '';
        for (const line of lines) if (line.trim()) onLine(line);
      });
      res.on('end', () => done(ok(undefined)));
      res.on('error', (e) => done(err({ status: 0, message: `watch ${path}: ${e.message}` })));
      res.on('close', () => done(err({ status: 0, message: `watch ${path}: closed` })));
    });
  }

  /**
   * Ends the watches under way (their informers watch again at once) and closes the idle keep-alive connections, so
   * that what follows goes on new connections: after the node's address changed, those opened from the address that
   * went are dead, and a request sent on one waits out its timeout, a watch its silence limit (minutes).
   */
  reconnect(): void {
    for (const watch of this.watches) watch.destroy(new Error("reconnecting: this node's address changed"));
    for (const sockets of Object.values(this.agent.freeSockets)) for (const socket of sockets ?? []) socket.destroy();
  }

  /** Ends every request and watch under way, and closes idle connections (at shutdown). */
  close(): void {
    for (const req of this.open) req.destroy(new Error('the client is closing'));
    this.agent.destroy();
  }

  /** Tells the permission observer of an answer: a 403 is a refusal, any other answer an allowance. */
  private observe(method: string, path: string, status: number, message: string, blocksServing: boolean): void {
    const permissions = this.options.permissions;
    if (!permissions || status === 0) return;
    const attributes = requestAttributes(method, path);
    if (status === 403)
      permissions.refused({ ...attributes, path: path.split('?')[0] ?? path, message, blocksServing });
    else if (status !== 401) permissions.allowed(attributes); // 401: not authenticated, so RBAC was not asked
  }

  /** Sends the request and resolves with the response once its head has arrived. */
  private async start(
    method: string,
    path: string,
    resource: string,
    options: RequestOptions & { signal?: AbortSignal },
    timeoutMs: number,
  ): Promise<Result<IncomingMessage, ApiFailure>> {
    await this.limiter.take(options.urgent ?? false);
    if (options.signal?.aborted) return err({ status: 0, message: `${method} ${path}: aborted` });
    const key = `${method} ${resource}`;
    this.sent.set(key, (this.sent.get(key) ?? 0) + 1);
    const credentials = await this.endpoint.credentials();
    if (!credentials.ok) return err({ status: 0, message: credentials.error });
    const { tls, headers } = credentials.value;
    const payload = options.body === undefined ? undefined : JSON.stringify(options.body);
    const send = this.base.protocol === 'http:' ? httpRequest : httpsRequest;
    return new Promise((done) => {
      const req = send(
        {
          ...tls,
          agent: this.agent,
          protocol: this.base.protocol,
          hostname: this.base.hostname.replace(/^\[|\]$/g, ''),
          port: this.base.port,
          path: `${this.base.pathname.replace(/\/$/, '')}${path}`,
          method,
          headers: {
            ...headers,
            Accept: 'application/json',
            'User-Agent': 'plexusd',
            ...(payload !== undefined
              ? {
                  'Content-Type': options.contentType ?? 'application/json',
                  'Content-Length': Buffer.byteLength(payload),
                }
              : {}),
          },
          // Idle time on the socket: for a watch, the longest silence allowed.
          timeout: timeoutMs,
        },
        (res) => {
          clearTimeout(deadline);
          done(ok(res));
        },
      );
      this.open.add(req);
      const abort = (): void => void req.destroy(new Error('aborted'));
      options.signal?.addEventListener('abort', abort, { once: true });
      // Until the response's head arrives, the timeout bounds the whole request, not just idle socket time.
      const deadline = setTimeout(() => req.destroy(new Error(`no answer within ${timeoutMs} ms`)), timeoutMs);
      req.on('close', () => {
        clearTimeout(deadline);
        this.open.delete(req);
        options.signal?.removeEventListener('abort', abort);
      });
      req.on('timeout', () => req.destroy(new Error(`no answer within ${timeoutMs} ms`)));
      req.on('error', (e) => done(err({ status: 0, message: `${method} ${path}: ${e.message}` })));
      req.end(payload);
    });
  }
}
