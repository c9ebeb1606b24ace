/**
 * The requests plexusd makes on a pod's behalf (GET a pod, PATCH its status, POST events), over keep-alive
 * connections, through a client-side QPS/burst limit and with a timeout on every request.
 *
 * Why not @kubernetes/client-node's generated clients for these: 1.x builds a new https.Agent for every request, so
 * each one pays a TCP and TLS handshake; on the ADD path that is most of the cost of a GET. The library still loads
 * the kubeconfig (certificates, tokens, exec plugins) and runs the informers; this module only carries requests.
 */
import { Agent as HttpAgent, request as httpRequest, type IncomingMessage } from 'node:http';
import { Agent as HttpsAgent, request as httpsRequest, type RequestOptions } from 'node:https';
import type { KubeConfig } from '@kubernetes/client-node';
import { err, ok, type Result } from '../common/result';
import { RateLimiter } from './rate-limiter';

export interface ApiClientOptions {
  /** Requests per second once the burst is spent (--kube-api-qps). */
  readonly qps: number;
  /** Requests that may go at once (--kube-api-burst). */
  readonly burst: number;
  /** How long one request may take, connection included (--kube-api-timeout). */
  readonly timeoutMs: number;
}

/** Why a request failed: the HTTP status (0 when no answer came) and the server's or the socket's message. */
export interface ApiFailure {
  readonly status: number;
  readonly message: string;
}

/** Credentials are read again this often, so rotated service-account tokens are picked up. */
const AUTH_REFRESH_MS = 60_000;

export class KubeApiClient {
  private readonly agent: HttpAgent;
  private readonly limiter: RateLimiter;
  private readonly base: URL;
  private auth: { headers: Record<string, string>; tls: RequestOptions; at: number } | undefined;
  /** Requests sent, by "VERB resource" (for metrics and the API-cost benchmark). */
  readonly sent = new Map<string, number>();

  constructor(
    private readonly kubeconfig: KubeConfig,
    private readonly options: ApiClientOptions,
  ) {
    const server = kubeconfig.getCurrentCluster()?.server;
    if (!server) throw new Error('the kubeconfig names no server');
    this.base = new URL(server);
    this.agent = this.base.protocol === 'http:' ? new HttpAgent({ keepAlive: true, maxSockets: 16 }) : new HttpsAgent({ keepAlive: true, maxSockets: 16 });
    this.limiter = new RateLimiter(options.qps, options.burst);
  }

  /**
   * Sends one request; a non-2xx answer is a failure carrying the status and the server's message. `urgent`: a CNI
   * call waits for it, so it goes before background writes waiting for the rate limit.
   */
  async request(method: string, path: string, resource: string, options: { body?: unknown; contentType?: string; urgent?: boolean } = {}): Promise<Result<unknown, ApiFailure>> {
    const { body, contentType = 'application/json', urgent = false } = options;
    await this.limiter.take(urgent);
    const key = `${method} ${resource}`;
    this.sent.set(key, (this.sent.get(key) ?? 0) + 1);
    let auth;
    try {
      auth = await this.credentials();
    } catch (e) {
      return err({ status: 0, message: `cannot read the kubeconfig's credentials: ${(e as Error).message}` });
    }
    const payload = body === undefined ? undefined : JSON.stringify(body);
    const send = this.base.protocol === 'http:' ? httpRequest : httpsRequest;
    return new Promise((done) => {
      const req = send(
        {
          ...auth.tls, agent: this.agent, protocol: this.base.protocol, hostname: this.base.hostname, port: this.base.port,
          path: `${this.base.pathname.replace(/\/$/, '')}${path}`, method,
          headers: { ...auth.headers, Accept: 'application/json', 'User-Agent': 'plexusd', ...(payload !== undefined ? { 'Content-Type': contentType, 'Content-Length': Buffer.byteLength(payload) } : {}) },
          timeout: this.options.timeoutMs,
        },
        (res: IncomingMessage) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('error', (e) => done(err({ status: 0, message: e.message })));
          res.on('end', () => {
            const text = Buffer.concat(chunks).toString('utf8');
            let parsed: unknown = text;
            try {
              parsed = text ? JSON.parse(text) : undefined;
            } catch {
              /* not JSON: kept as text */
            }
            const status = res.statusCode ?? 0;
            if (status >= 200 && status < 300) done(ok(parsed));
            else done(err({ status, message: (parsed as { message?: string } | undefined)?.message ?? `HTTP ${status}` }));
          });
        },
      );
      // The timeout covers the whole request, not just idle socket time.
      const deadline = setTimeout(() => req.destroy(new Error(`no answer within ${this.options.timeoutMs} ms`)), this.options.timeoutMs);
      req.on('close', () => clearTimeout(deadline));
      req.on('timeout', () => req.destroy(new Error(`no answer within ${this.options.timeoutMs} ms`)));
      req.on('error', (e) => done(err({ status: 0, message: `${method} ${path}: ${e.message}` })));
      req.end(payload);
    });
  }

  /** Closes idle connections (at shutdown). */
  close(): void {
    this.agent.destroy();
  }

  private async credentials(): Promise<{ headers: Record<string, string>; tls: RequestOptions }> {
    if (this.auth && performance.now() - this.auth.at < AUTH_REFRESH_MS) return this.auth;
    const opts: RequestOptions & { headers?: Record<string, string> } = {};
    await this.kubeconfig.applyToHTTPSOptions(opts);
    const tls: RequestOptions = {};
    for (const k of ['ca', 'cert', 'key', 'rejectUnauthorized', 'servername', 'auth'] as const) if (opts[k] !== undefined) (tls as Record<string, unknown>)[k] = opts[k];
    this.auth = { headers: { ...(opts.headers ?? {}) }, tls, at: performance.now() };
    return this.auth;
  }
}

/** Percent-encodes one path segment (names are DNS labels, but a malformed CNI_ARGS value must not change the path). */
export const segment = (s: string): string => encodeURIComponent(s);
