/**
 * The optional TCP listener (--metrics-address host:port): /metrics for Prometheus, and /healthz and /readyz for
 * probes and load balancers that cannot reach a unix socket. It serves nothing else: the CNI and plexusctl API stays
 * on the socket (mode 0600).
 */
import { createServer, type Server } from 'node:http';
import type { DaemonHealth, HealthReport } from './health';
import type { DaemonMetrics } from './metrics';
import { errorMessage } from '../common/error-message';

export interface TcpListener {
  readonly address: string;
  close(): Promise<void>;
}

/** Splits "host:port" and "[v6]:port". */
export function splitHostPort(address: string): { host: string; port: number } {
  const i = address.lastIndexOf(':');
  const host = address.slice(0, i).replace(/^\[(.*)\]$/, '$1');
  return { host, port: Number(address.slice(i + 1)) };
}

export async function listenMetrics(
  address: string,
  metrics: DaemonMetrics,
  health: DaemonHealth,
): Promise<TcpListener> {
  const server: Server = createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0];
    const reply = (status: number, body: string, type = 'application/json'): void => {
      res.writeHead(status, { 'Content-Type': type, 'Content-Length': Buffer.byteLength(body) });
      res.end(body);
    };
    if (req.method !== 'GET') return reply(405, '{"error":"GET only"}');
    const probe = (report: Promise<HealthReport>): void => {
      report.then(
        (r) => reply(r.ok ? 200 : 503, JSON.stringify(r)),
        (e: unknown) => reply(503, JSON.stringify({ ok: false, checks: { probe: errorMessage(e) } })),
      );
    };
    if (path === '/healthz') return probe(health.live());
    if (path === '/readyz') return probe(health.ready());
    if (path === '/metrics') {
      metrics.render().then(
        (text) => reply(200, text, metrics.contentType),
        (e: unknown) => reply(500, JSON.stringify({ error: errorMessage(e) })),
      );
      return;
    }
    reply(404, JSON.stringify({ error: `no route ${path}` }));
  });
  server.keepAliveTimeout = 5000;
  const { host, port } = splitHostPort(address);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve());
  });
  const bound = server.address();
  const actual =
    typeof bound === 'object' && bound
      ? `${bound.family === 'IPv6' ? `[${bound.address}]` : bound.address}:${bound.port}`
      : address;
  return {
    address: actual,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
