/**
 * How plexusd reaches the Kubernetes API: a kubeconfig file (--kubeconfig), else the pod's service account when it
 * runs in a cluster, else not at all (standalone: NADs from --networks-dir, annotations from the runtime).
 *
 * The kubeconfig is read here rather than by @kubernetes/client-node: loading that library costs the daemon about
 * 70 MiB of resident memory (its generated API models load with its KubeConfig), half of plexusd's budget. What is
 * supported: server, CA (file or data), insecure-skip-tls-verify, tls-server-name; client certificates (file or data),
 * token, tokenFile (re-read), exec credential plugins (client.authentication.k8s.io v1 and v1beta1, re-run when the
 * credential expires). Legacy auth-provider entries and HTTP proxies are refused with a message saying so.
 */
import { execFile } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { dirname, isAbsolute, join } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';
import { CniCode, CniError, err, ok, type Result } from '../cni/errors';
import { firstIssue } from '../common/schema-issues';
import { errorMessage } from '../common/error-message';
import { definedFields } from '../common/defined-fields';

const SERVICE_ACCOUNT_DIR = '/var/run/secrets/kubernetes.io/serviceaccount';
/** Token files (service-account tokens rotate) are read again after this long. */
const TOKEN_FILE_REFRESH_MS = 60_000;

/** TLS material for the connection to the API server. */
export interface ApiTls {
  readonly ca?: Buffer;
  readonly cert?: Buffer;
  readonly key?: Buffer;
  readonly rejectUnauthorized: boolean;
  readonly servername?: string;
}

/** What a request needs now: the TLS identity (a changed one means new connections) and headers. */
export interface ApiCredentials {
  readonly tls: ApiTls;
  readonly headers: Readonly<Record<string, string>>;
}

export interface ApiEndpoint {
  readonly server: URL;
  /** Where it came from, for messages: the kubeconfig path, or "in-cluster". */
  readonly source: string;
  /** Current credentials; tokens from files and exec plugins are refreshed as they need. */
  credentials(): Promise<Result<ApiCredentials, string>>;
}

const ExecSchema = z.object({
  apiVersion: z.string().optional(),
  command: z.string().min(1),
  args: z.array(z.string()).optional(),
  env: z.array(z.object({ name: z.string(), value: z.string() })).nullish(),
});
const KubeconfigSchema = z
  .object({
    'current-context': z.string().optional(),
    clusters: z
      .array(
        z.object({
          name: z.string(),
          cluster: z
            .object({
              server: z.string().url(),
              'certificate-authority': z.string().optional(),
              'certificate-authority-data': z.string().optional(),
              'insecure-skip-tls-verify': z.boolean().optional(),
              'tls-server-name': z.string().optional(),
              'proxy-url': z.string().optional(),
            })
            .passthrough(),
        }),
      )
      .min(1),
    users: z
      .array(
        z.object({
          name: z.string(),
          user: z
            .object({
              'client-certificate': z.string().optional(),
              'client-certificate-data': z.string().optional(),
              'client-key': z.string().optional(),
              'client-key-data': z.string().optional(),
              token: z.string().optional(),
              tokenFile: z.string().optional(),
              exec: ExecSchema.optional(),
              'auth-provider': z.unknown().optional(),
              username: z.string().optional(),
              password: z.string().optional(),
            })
            .passthrough()
            .nullish(),
        }),
      )
      .default([]),
    contexts: z
      .array(
        z.object({
          name: z.string(),
          context: z.object({ cluster: z.string(), user: z.string().optional() }).passthrough(),
        }),
      )
      .min(1),
  })
  .passthrough();

const invalid = (source: string, why: string): Result<never> =>
  err(new CniError(CniCode.InvalidNetworkConfig, `cannot use the kubeconfig ${source}: ${why}`));

/** The API endpoint: `path`, else the in-cluster service account, else none (a standalone node). */
export function loadKubeConfig(
  path: string | undefined,
  env: NodeJS.ProcessEnv = process.env,
): Result<ApiEndpoint | undefined> {
  if (path !== undefined) return fromFile(path);
  if (env.KUBERNETES_SERVICE_HOST && existsSync(join(SERVICE_ACCOUNT_DIR, 'token'))) return inCluster(env);
  return ok(undefined);
}

function inCluster(env: NodeJS.ProcessEnv): Result<ApiEndpoint> {
  const host = env.KUBERNETES_SERVICE_HOST ?? '';
  const server = new URL(`https://${host.includes(':') ? `[${host}]` : host}:${env.KUBERNETES_SERVICE_PORT ?? '443'}`);
  let ca: Buffer;
  try {
    ca = readFileSync(join(SERVICE_ACCOUNT_DIR, 'ca.crt'));
  } catch (e) {
    return invalid('(in-cluster)', `cannot read the service account's CA: ${errorMessage(e)}`);
  }
  const token = tokenFile(join(SERVICE_ACCOUNT_DIR, 'token'));
  return ok({
    server,
    source: 'in-cluster',
    credentials: () => {
      const t = token();
      const auth = t.ok
        ? ok({ tls: { ca, rejectUnauthorized: true }, headers: { Authorization: `Bearer ${t.value}` } })
        : t;
      return Promise.resolve(auth);
    },
  });
}

function fromFile(path: string): Result<ApiEndpoint> {
  let doc: unknown;
  try {
    doc = parseYaml(readFileSync(path, 'utf8'));
  } catch (e) {
    return invalid(path, errorMessage(e));
  }
  const parsed = KubeconfigSchema.safeParse(doc);
  if (!parsed.success) return invalid(path, firstIssue(parsed.error, '(document)'));
  const config = parsed.data;
  const contextName = config['current-context'] ?? config.contexts[0]!.name;
  const context = config.contexts.find((c) => c.name === contextName)?.context;
  if (!context) return invalid(path, `current-context "${contextName}" is not among its contexts`);
  const cluster = config.clusters.find((c) => c.name === context.cluster)?.cluster;
  if (!cluster)
    return invalid(path, `context "${contextName}" names cluster "${context.cluster}", which is not defined`);
  const user = context.user === undefined ? {} : config.users.find((u) => u.name === context.user)?.user;
  if (user === undefined)
    return invalid(path, `context "${contextName}" names user "${context.user}", which is not defined`);
  if (cluster['proxy-url'])
    return invalid(path, 'proxy-url is not supported; plexusd connects to the API server directly');
  if (user?.['auth-provider'] !== undefined)
    return invalid(path, 'auth-provider entries are not supported; use an exec credential plugin or a token');
  const base = dirname(path);
  const file = (p: string): string => (isAbsolute(p) ? p : join(base, p));
  const material = (
    data: string | undefined,
    filePath: string | undefined,
    what: string,
  ): Result<Buffer | undefined, string> => {
    try {
      if (data !== undefined) return ok(Buffer.from(data, 'base64'));
      if (filePath !== undefined) return ok(readFileSync(file(filePath)));
      return ok(undefined);
    } catch (e) {
      return err(`cannot read ${what}: ${errorMessage(e)}`);
    }
  };
  const ca = material(
    cluster['certificate-authority-data'],
    cluster['certificate-authority'],
    'the certificate authority',
  );
  const cert = material(user?.['client-certificate-data'], user?.['client-certificate'], 'the client certificate');
  const key = material(user?.['client-key-data'], user?.['client-key'], 'the client key');
  for (const m of [ca, cert, key]) if (!m.ok) return invalid(path, m.error);
  const tls: ApiTls = {
    ...(ca.ok && ca.value ? { ca: ca.value } : {}),
    ...(cert.ok && cert.value ? { cert: cert.value } : {}),
    ...(key.ok && key.value ? { key: key.value } : {}),
    rejectUnauthorized: cluster['insecure-skip-tls-verify'] !== true,
    ...(cluster['tls-server-name'] ? { servername: cluster['tls-server-name'] } : {}),
  };
  const server = new URL(cluster.server);
  if (server.protocol === 'http:' && tls.rejectUnauthorized)
    return invalid(path, `${cluster.server} is plain HTTP; set insecure-skip-tls-verify to allow that`);
  let headers: () => Promise<Result<Record<string, string>, string>> = () => Promise.resolve(ok({}));
  if (user?.token) {
    const value = user.token;
    headers = () => Promise.resolve(ok({ Authorization: `Bearer ${value}` }));
  } else if (user?.tokenFile) {
    const token = tokenFile(file(user.tokenFile));
    headers = () => {
      const t = token();
      return Promise.resolve(t.ok ? ok({ Authorization: `Bearer ${t.value}` }) : t);
    };
  } else if (user?.username !== undefined) {
    const basic = Buffer.from(`${user.username}:${user.password ?? ''}`).toString('base64');
    headers = () => Promise.resolve(ok({ Authorization: `Basic ${basic}` }));
  }
  if (user?.exec) {
    const exec = execCredential(user.exec, server.toString());
    return ok({
      server,
      source: path,
      credentials: async () => {
        const c = await exec();
        if (!c.ok) return c;
        const headers: Record<string, string> = c.value.token ? { Authorization: `Bearer ${c.value.token}` } : {};
        return ok({ tls: { ...tls, ...(c.value.cert ? { cert: c.value.cert, key: c.value.key } : {}) }, headers });
      },
    });
  }
  return ok({
    server,
    source: path,
    credentials: async () => {
      const h = await headers();
      return h.ok ? ok({ tls, headers: h.value }) : h;
    },
  });
}

/** A token file, read again every TOKEN_FILE_REFRESH_MS. */
function tokenFile(path: string): () => Result<string, string> {
  let cached: { token: string; at: number } | undefined;
  return () => {
    if (cached && Date.now() - cached.at < TOKEN_FILE_REFRESH_MS) return ok(cached.token);
    try {
      cached = { token: readFileSync(path, 'utf8').trim(), at: Date.now() };
      return ok(cached.token);
    } catch (e) {
      return err(`cannot read the token file ${path}: ${errorMessage(e)}`);
    }
  };
}

const ExecCredentialSchema = z.object({
  status: z.object({
    token: z.string().optional(),
    clientCertificateData: z.string().optional(),
    clientKeyData: z.string().optional(),
    expirationTimestamp: z.string().optional(),
  }),
});

/** An exec credential plugin: run when there is no credential or it has expired (a minute early). */
function execCredential(
  spec: z.infer<typeof ExecSchema>,
  server: string,
): () => Promise<Result<{ token?: string; cert?: Buffer; key?: Buffer }, string>> {
  let cached: { value: { token?: string; cert?: Buffer; key?: Buffer }; expires: number } | undefined;
  let running: Promise<Result<{ token?: string; cert?: Buffer; key?: Buffer }, string>> | undefined;
  const apiVersion = spec.apiVersion ?? 'client.authentication.k8s.io/v1';
  const run = (): Promise<Result<{ token?: string; cert?: Buffer; key?: Buffer }, string>> =>
    new Promise((resolve) => {
      const env = {
        ...process.env,
        ...Object.fromEntries((spec.env ?? []).map((e) => [e.name, e.value])),
        KUBERNETES_EXEC_INFO: JSON.stringify({
          apiVersion,
          kind: 'ExecCredential',
          spec: { interactive: false, cluster: { server } },
        }),
      };
      execFile(spec.command, spec.args ?? [], { env, timeout: 30_000, maxBuffer: 1 << 20 }, (e, stdout, stderr) => {
        if (e)
          return resolve(
            err(
              `the exec credential plugin ${spec.command} failed: ${e.message}${stderr ? `: ${stderr.trim().slice(0, 500)}` : ''}`,
            ),
          );
        let parsed;
        try {
          parsed = ExecCredentialSchema.safeParse(JSON.parse(stdout));
        } catch (x) {
          return resolve(err(`the exec credential plugin ${spec.command} printed no JSON: ${errorMessage(x)}`));
        }
        if (!parsed.success)
          return resolve(
            err(
              `the exec credential plugin ${spec.command} printed no ExecCredential: ${firstIssue(parsed.error, 'status')}`,
            ),
          );
        const s = parsed.data.status;
        const value = {
          ...definedFields({ token: s.token || undefined }),
          ...(s.clientCertificateData && s.clientKeyData
            ? { cert: Buffer.from(s.clientCertificateData), key: Buffer.from(s.clientKeyData) }
            : {}),
        };
        cached = {
          value,
          expires: s.expirationTimestamp ? Date.parse(s.expirationTimestamp) - 60_000 : Number.POSITIVE_INFINITY,
        };
        resolve(ok(value));
      });
    });
  return async () => {
    if (cached && Date.now() < cached.expires) return ok(cached.value);
    running ??= run().finally(() => {
      running = undefined;
    });
    return running;
  };
}

/** The node this daemon serves: --node-name, else NODE_NAME (the DaemonSet's downward API), else the host name. */
export const nodeNameOf = (flag: string | undefined, env: NodeJS.ProcessEnv = process.env): string =>
  flag ?? env.NODE_NAME ?? hostname();
