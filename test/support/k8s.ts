/**
 * A real Kubernetes control plane for tests: Debian's etcd and the kube-apiserver of ../shared/k8s, on 127.0.0.1 and
 * free ports, with a private CA made by openssl (../shared/k8s/NOTES.md has the flags and quirks). k8s-binaries.ts
 * says which Kubernetes (v1.36 by default; $PLEXUS_STACK, $PLEXUS_K8S_VERSION, $PLEXUS_K8S_BIN). Suites pass `k8sMissing()`'s reason
 * to prerequisites.ts, which skips them (or fails them in CI) where any part is absent. Everything a fixture starts is
 * stopped by PID, and its directory removed, in stop().
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseAllDocuments } from 'yaml';
import { KubeApiClient } from '../../src/k8s/api-client';
import { loadKubeConfig } from '../../src/k8s/kubeconfig';
import { ROOT } from './daemon';
import { k8sBinary, k8sBinaryMissing } from './k8s-binaries';
import { stopProcess } from './processes';
import { type CertAuthority, issueCert, makeCa, writeKubeconfig } from './certs';

export { k8sBinary, k8sBinaryMissing, k8sOlderThan, k8sVersion, kubectlBinary } from './k8s-binaries';

/** The client-certificate user a test's plexusd runs as, with exactly the RBAC of deploy/10-rbac.yaml. */
export const PLEXUS_USER = 'plexus';

const onPath = (name: string): string | undefined =>
  (process.env.PATH ?? '')
    .split(delimiter)
    .map((d) => join(d, name))
    .find((p) => existsSync(p));

/** Why the API server tests cannot run here, or undefined when they can. */
export function k8sMissing(): string | undefined {
  const tools = ['etcd', 'openssl', 'xz'].filter((b) => !onPath(b));
  if (tools.length)
    return `not installed: ${tools.join(', ')} (bash scripts/setup.sh installs etcd-server, openssl and xz-utils)`;
  return k8sBinaryMissing('kube-apiserver');
}

const freePort = (): Promise<number> =>
  new Promise((done, fail) => {
    const s = createServer();
    s.once('error', fail);
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => done(port));
    });
  });

export interface KubeApiOptions {
  /** Log every request (metadata only) to auditLog, to count what a client sends. */
  readonly audit?: boolean;
  /** More names the serving certificate carries (`IP:10.1.2.1`): where else clients dial the server (a relay). */
  readonly extraSans?: readonly string[];
  /** How the API server dials a kubelet (`--kubelet-preferred-address-types`); its default starts with Hostname. */
  readonly kubeletAddressTypes?: readonly ('InternalIP' | 'Hostname' | 'ExternalIP')[];
}

export interface ApiReply {
  readonly status: number;
  readonly body: unknown;
}

export class KubeApiFixture {
  private readonly procs: { name: string; proc: ChildProcess }[] = [];
  private apiArgs: string[] = [];
  private agent: HttpsAgent | undefined;
  readonly logs: Record<string, string> = {};
  apiPort = 0;

  private constructor(readonly dir: string) {}

  get server(): string {
    return `https://127.0.0.1:${this.apiPort}`;
  }

  /** A kubeconfig with the admin (system:masters) identity, for clients under test. */
  get kubeconfig(): string {
    return join(this.dir, 'admin.kubeconfig');
  }

  static async start(options: KubeApiOptions = {}): Promise<KubeApiFixture> {
    const fx = new KubeApiFixture(mkdtempSync(join(tmpdir(), 'plexus-k8s-')));
    try {
      fx.makeCerts(options.extraSans ?? []);
      const [etcdClient, etcdPeer, api] = [await freePort(), await freePort(), await freePort()];
      fx.apiPort = api;
      fx.spawn('etcd', onPath('etcd')!, [
        '--name',
        't',
        '--data-dir',
        join(fx.dir, 'etcd'),
        '--listen-client-urls',
        `http://127.0.0.1:${etcdClient}`,
        '--advertise-client-urls',
        `http://127.0.0.1:${etcdClient}`,
        '--listen-peer-urls',
        `http://127.0.0.1:${etcdPeer}`,
        '--initial-advertise-peer-urls',
        `http://127.0.0.1:${etcdPeer}`,
        '--initial-cluster',
        `t=http://127.0.0.1:${etcdPeer}`,
        '--initial-cluster-state',
        'new',
        '--quota-backend-bytes',
        '2147483648',
      ]);
      await fx.waitFor(
        'etcd',
        async () =>
          await fetch(`http://127.0.0.1:${etcdClient}/health`)
            .then((r) => r.ok)
            .catch(() => false),
        20000,
      );
      const c = (f: string): string => join(fx.dir, 'certs', f);
      fx.apiArgs = [
        '--bind-address=127.0.0.1',
        '--advertise-address=127.0.0.1',
        `--secure-port=${api}`,
        '--endpoint-reconciler-type=none',
        `--etcd-servers=http://127.0.0.1:${etcdClient}`,
        `--cert-dir=${join(fx.dir, 'apiserver')}`,
        '--service-cluster-ip-range=10.244.240.0/20',
        `--tls-cert-file=${c('apiserver.crt')}`,
        `--tls-private-key-file=${c('apiserver.key')}`,
        `--client-ca-file=${c('ca.crt')}`,
        `--service-account-key-file=${c('sa.pub')}`,
        `--service-account-signing-key-file=${c('sa.key')}`,
        '--service-account-issuer=https://kubernetes.default.svc.cluster.local',
        '--authorization-mode=Node,RBAC',
        '--enable-admission-plugins=NodeRestriction',
        '--allow-privileged=true',
        '--profiling=false',
        // `kubectl exec` and `logs` go from the API server to a kubelet, which lets in the admin (system:masters).
        `--kubelet-client-certificate=${c('admin.crt')}`,
        `--kubelet-client-key=${c('admin.key')}`,
        ...(options.kubeletAddressTypes
          ? [`--kubelet-preferred-address-types=${options.kubeletAddressTypes.join(',')}`]
          : []),
        ...(options.audit
          ? [
              `--audit-policy-file=${fx.writeAuditPolicy()}`,
              `--audit-log-path=${fx.auditLog}`,
              '--audit-log-format=json',
            ]
          : []),
      ];
      await fx.startApiServer();
      fx.writeKubeconfig();
      return fx;
    } catch (e) {
      await fx.stop();
      throw e;
    }
  }

  /** The audit log (JSON lines) when started with `audit`. */
  get auditLog(): string {
    return join(this.dir, 'audit.log');
  }

  private writeAuditPolicy(): string {
    const path = join(this.dir, 'audit-policy.yaml');
    writeFileSync(
      path,
      JSON.stringify({
        apiVersion: 'audit.k8s.io/v1',
        kind: 'Policy',
        omitStages: ['RequestReceived'],
        rules: [{ level: 'Metadata' }],
      }),
    );
    return path;
  }

  /** Audit events (stage ResponseComplete) of requests made by `user`, e.g. "plexus". */
  auditEvents(
    user: string,
  ): { verb: string; resource: string; name?: string; namespace?: string; code: number; userAgent: string }[] {
    let text: string;
    try {
      text = readFileSync(this.auditLog, 'utf8');
    } catch {
      return [];
    }
    return text
      .split('\n')
      .filter(Boolean)
      .flatMap((line) => {
        const e = JSON.parse(line) as {
          stage: string;
          verb: string;
          user: { username: string };
          userAgent?: string;
          objectRef?: { resource?: string; name?: string; namespace?: string };
          responseStatus?: { code?: number };
        };
        if (e.stage !== 'ResponseComplete' || e.user.username !== user) return [];
        return [
          {
            verb: e.verb,
            resource: e.objectRef?.resource ?? '',
            ...(e.objectRef?.name ? { name: e.objectRef.name } : {}),
            ...(e.objectRef?.namespace ? { namespace: e.objectRef.namespace } : {}),
            code: e.responseStatus?.code ?? 0,
            userAgent: e.userAgent ?? '',
          },
        ];
      });
  }

  /** Starts kube-apiserver (again, after stopApiServer: same port, same etcd) and waits for /readyz. */
  async startApiServer(): Promise<void> {
    if (this.procs.some((p) => p.name === 'kube-apiserver' && p.proc.exitCode === null && p.proc.signalCode === null))
      return;
    this.spawn('kube-apiserver', k8sBinary('kube-apiserver')!, this.apiArgs);
    await this.waitFor(
      'kube-apiserver',
      async () =>
        await this.request('GET', '/readyz')
          .then((r) => r.status === 200)
          .catch(() => false),
      60000,
    );
  }

  /** Stops kube-apiserver alone (by its PID), leaving etcd and the data: the API is down until startApiServer. */
  async stopApiServer(): Promise<void> {
    const i = this.procs.findIndex((p) => p.name === 'kube-apiserver');
    if (i < 0) return;
    const [stopped] = this.procs.splice(i, 1);
    if (stopped) await stopProcess(stopped.proc);
  }

  /**
   * A kubeconfig for a client-certificate identity `user` in `groups` (no groups: RBAC grants it nothing until a
   * binding does), signed by the fixture's CA.
   */
  userKubeconfig(user: string, groups: readonly string[] = []): string {
    const name = `user-${user.replace(/[^a-z0-9-]/gi, '_')}`;
    issueCert(this.certs, this.ca, name, `${groups.map((g) => `/O=${g}`).join('')}/CN=${user}`, 'clientAuth');
    const path = join(this.dir, `${name}.kubeconfig`);
    this.writeKubeconfigFor(path, name);
    return path;
  }

  private get certs(): string {
    return join(this.dir, 'certs');
  }

  private get ca(): CertAuthority {
    return { cert: join(this.certs, 'ca.crt'), key: join(this.certs, 'ca.key') };
  }

  private makeCerts(extraSans: readonly string[]): void {
    mkdirSync(this.certs);
    makeCa(this.certs, 'plexus-test-ca');
    const sans = [
      'IP:127.0.0.1',
      'IP:10.244.240.1',
      'DNS:localhost',
      'DNS:kubernetes',
      'DNS:kubernetes.default',
      'DNS:kubernetes.default.svc',
      ...extraSans,
    ];
    issueCert(this.certs, this.ca, 'apiserver', '/CN=kube-apiserver', 'serverAuth', sans.join(','));
    issueCert(this.certs, this.ca, 'admin', '/O=system:masters/CN=admin', 'clientAuth');
    execFileSync('openssl', ['genrsa', '-out', 'sa.key', '2048'], { cwd: this.certs, stdio: 'ignore' });
    execFileSync('openssl', ['rsa', '-in', 'sa.key', '-pubout', '-out', 'sa.pub'], {
      cwd: this.certs,
      stdio: 'ignore',
    });
  }

  private writeKubeconfig(): void {
    this.writeKubeconfigFor(this.kubeconfig, 'admin');
  }

  /** A kubeconfig at `path` as the client certificate `name` (name.crt, name.key) of the fixture's CA. */
  private writeKubeconfigFor(path: string, name: string): void {
    const cert = (f: string): string => join(this.certs, f);
    writeKubeconfig(path, this.server, cert('ca.crt'), cert(`${name}.crt`), cert(`${name}.key`));
  }

  private spawn(name: string, bin: string, args: string[]): void {
    const proc = spawn(bin, args, { stdio: ['ignore', 'ignore', 'pipe'] });
    this.logs[name] = '';
    proc.stderr?.on('data', (d: Buffer) => {
      this.logs[name] = (this.logs[name]! + d.toString()).slice(-20000);
    });
    this.procs.push({ name, proc });
  }

  private async waitFor(name: string, ready: () => Promise<boolean>, timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    const { proc } = [...this.procs].reverse().find((p) => p.name === name)!;
    while (!(await ready())) {
      if (proc.exitCode !== null || Date.now() > deadline)
        throw new Error(`${name} did not become ready: ${(this.logs[name] ?? '').slice(-3000)}`);
      await sleep(200);
    }
  }

  /**
   * A request to the API server as the admin over kept-alive connections (many pods at once); the body is sent and
   * answered as JSON (plain text, such as /readyz's, is kept as text).
   */
  request(
    method: string,
    path: string,
    body?: unknown,
    contentType = 'application/json',
    timeoutMs = 30000,
  ): Promise<ApiReply> {
    const certs = join(this.dir, 'certs');
    this.agent ??= new HttpsAgent({
      keepAlive: true,
      maxSockets: 16,
      ca: readFileSync(join(certs, 'ca.crt')),
      cert: readFileSync(join(certs, 'admin.crt')),
      key: readFileSync(join(certs, 'admin.key')),
    });
    const payload = body === undefined ? undefined : JSON.stringify(body);
    return new Promise((done, fail) => {
      const req = httpsRequest(
        {
          host: '127.0.0.1',
          port: this.apiPort,
          path,
          method,
          agent: this.agent,
          headers: {
            Accept: 'application/json',
            ...(payload !== undefined
              ? { 'Content-Type': contentType, 'Content-Length': Buffer.byteLength(payload) }
              : {}),
          },
          timeout: timeoutMs,
        },
        (res) => {
          let text = '';
          res.setEncoding('utf8').on('data', (c: string) => (text += c));
          res.on('end', () => {
            let parsed: unknown = text;
            try {
              parsed = text ? JSON.parse(text) : undefined;
            } catch {
              /* plain text */
            }
            done({ status: res.statusCode ?? 0, body: parsed });
          });
        },
      );
      req.on('timeout', () => req.destroy(new Error(`${method} ${path}: no answer in ${timeoutMs / 1000} s`)));
      req.on('error', fail);
      req.end(payload);
    });
  }

  /**
   * An API server as a cluster with Plexus installed has it: every CRD of deploy/crds/ (NADs, IPAM pools and blocks,
   * IPAMClaims) served, and plexusd's RBAC (deploy/10-rbac.yaml) bound to the user `plexus`, whose kubeconfig is
   * userKubeconfig(PLEXUS_USER).
   */
  static async startForPlexus(options: KubeApiOptions = {}): Promise<KubeApiFixture> {
    const api = await KubeApiFixture.start(options);
    try {
      await api.installPlexus();
    } catch (e) {
      await api.stop();
      throw e;
    }
    return api;
  }

  /** On a running server (a kubelet node's): every CRD of deploy/crds/ and plexusd's RBAC for PLEXUS_USER. */
  async installPlexus(): Promise<void> {
    for (const file of readdirSync(join(ROOT, 'deploy/crds'))
      .filter((f) => f.endsWith('.yaml'))
      .sort())
      await this.installCrds(`deploy/crds/${file}`);
    await this.grantPlexusRbac(PLEXUS_USER);
  }

  /** Creates a Node object (a simulated node: no kubelet behind it). */
  async createNode(name: string): Promise<void> {
    const r = await this.request('POST', '/api/v1/nodes', { apiVersion: 'v1', kind: 'Node', metadata: { name } });
    if (r.status !== 201) throw new Error(`creating node ${name}: ${r.status} ${JSON.stringify(r.body)}`);
  }

  /** Installs the NetworkAttachmentDefinition CRD from deploy/ and waits until the server serves it. */
  installNadCrd(): Promise<void> {
    return this.installCrds('deploy/crds/00-crd-network-attachment-definition.yaml');
  }

  /** Installs every CRD of a deploy/ file and waits until the server serves each. */
  async installCrds(file: string): Promise<void> {
    for (const doc of parseAllDocuments(readFileSync(join(ROOT, file), 'utf8'))) {
      const crd = doc.toJSON() as { metadata: { name: string } };
      const created = await this.request('POST', '/apis/apiextensions.k8s.io/v1/customresourcedefinitions', crd);
      if (created.status !== 201)
        throw new Error(`creating CRD ${crd.metadata.name}: ${created.status} ${JSON.stringify(created.body)}`);
      await this.waitEstablished(crd.metadata.name);
    }
  }

  private async waitEstablished(name: string): Promise<void> {
    for (let i = 0; i < 100; i++) {
      const got = await this.request('GET', `/apis/apiextensions.k8s.io/v1/customresourcedefinitions/${name}`);
      const conditions =
        (got.body as { status?: { conditions?: { type: string; status: string }[] } }).status?.conditions ?? [];
      if (conditions.some((c) => c.type === 'Established' && c.status === 'True')) return;
      await sleep(200);
    }
    throw new Error(`the CRD ${name} was not established within 20 s`);
  }

  /** Creates (POST) a NetworkAttachmentDefinition with this CNI config text. */
  createNad(
    namespace: string,
    name: string,
    config: string,
    annotations: Record<string, string> = {},
  ): Promise<ApiReply> {
    return this.request('POST', `/apis/k8s.cni.cncf.io/v1/namespaces/${namespace}/network-attachment-definitions`, {
      apiVersion: 'k8s.cni.cncf.io/v1',
      kind: 'NetworkAttachmentDefinition',
      metadata: { name, namespace, annotations },
      spec: { config },
    });
  }

  /**
   * Creates a pod object (no controller-manager runs, so the namespace's default ServiceAccount is made here first, as
   * NOTES.md says); answers the API's reply. The pod runs nowhere unless a kubelet serves its node.
   */
  async createPod(
    namespace: string,
    name: string,
    extra: { annotations?: Record<string, string>; nodeName?: string } = {},
  ): Promise<ApiReply> {
    await this.ensureNamespace(namespace);
    const sa = await this.request('POST', `/api/v1/namespaces/${namespace}/serviceaccounts`, {
      apiVersion: 'v1',
      kind: 'ServiceAccount',
      metadata: { name: 'default' },
    });
    if (sa.status !== 201 && sa.status !== 409)
      throw new Error(`creating sa/default in ${namespace}: ${sa.status} ${JSON.stringify(sa.body)}`);
    return this.request('POST', `/api/v1/namespaces/${namespace}/pods`, {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name, ...(extra.annotations ? { annotations: extra.annotations } : {}) },
      spec: { nodeName: extra.nodeName ?? 'nowhere', containers: [{ name: 'c', image: 'local.test/pause:1' }] },
    });
  }

  /** The PID of the running `etcd` or `kube-apiserver` (for benchmarks reading its CPU and memory in /proc). */
  pidOf(name: 'etcd' | 'kube-apiserver'): number | undefined {
    return [...this.procs].reverse().find((p) => p.name === name)?.proc.pid;
  }

  /** Creates a namespace unless it exists. */
  async ensureNamespace(namespace: string): Promise<void> {
    if (namespace === 'default') return;
    const r = await this.request('POST', '/api/v1/namespaces', {
      apiVersion: 'v1',
      kind: 'Namespace',
      metadata: { name: namespace },
    });
    if (r.status !== 201 && r.status !== 409)
      throw new Error(`creating namespace ${namespace}: ${r.status} ${JSON.stringify(r.body)}`);
  }

  /**
   * Applies deploy/10-rbac.yaml (plexusd's ClusterRole) and binds it to the client-certificate user `user` as well as
   * to the manifest's service account, so a test's plexusd runs with exactly the documented permissions.
   */
  async grantPlexusRbac(user: string): Promise<void> {
    const docs = parseAllDocuments(readFileSync(join(ROOT, 'deploy/10-rbac.yaml'), 'utf8')).map(
      (d) => d.toJSON() as { kind: string; metadata: { namespace?: string } },
    );
    const paths: Record<string, (ns?: string) => string> = {
      ClusterRole: () => '/apis/rbac.authorization.k8s.io/v1/clusterroles',
      ClusterRoleBinding: () => '/apis/rbac.authorization.k8s.io/v1/clusterrolebindings',
      ServiceAccount: (ns) => `/api/v1/namespaces/${ns}/serviceaccounts`,
      Role: (ns) => `/apis/rbac.authorization.k8s.io/v1/namespaces/${ns}/roles`,
      RoleBinding: (ns) => `/apis/rbac.authorization.k8s.io/v1/namespaces/${ns}/rolebindings`,
    };
    for (const doc of docs) {
      const path = paths[doc.kind];
      if (!path) throw new Error(`deploy/10-rbac.yaml: no path for kind ${doc.kind}`);
      const r = await this.request('POST', path(doc.metadata.namespace), doc);
      if (r.status !== 201 && r.status !== 409)
        throw new Error(`applying ${doc.kind}: ${r.status} ${JSON.stringify(r.body)}`);
    }
    const bound = await this.request('POST', '/apis/rbac.authorization.k8s.io/v1/clusterrolebindings', {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRoleBinding',
      metadata: { name: `plexus-user-${user}` },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'plexus' },
      subjects: [{ apiGroup: 'rbac.authorization.k8s.io', kind: 'User', name: user }],
    });
    if (bound.status !== 201 && bound.status !== 409)
      throw new Error(`binding plexus to ${user}: ${bound.status} ${JSON.stringify(bound.body)}`);
    // The node lease's Role (kube-system, where plexusd runs and keeps it).
    const leaseBound = await this.request(
      'POST',
      '/apis/rbac.authorization.k8s.io/v1/namespaces/kube-system/rolebindings',
      {
        apiVersion: 'rbac.authorization.k8s.io/v1',
        kind: 'RoleBinding',
        metadata: { name: `plexus-user-${user}` },
        roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: 'plexus' },
        subjects: [{ apiGroup: 'rbac.authorization.k8s.io', kind: 'User', name: user }],
      },
    );
    if (leaseBound.status !== 201 && leaseBound.status !== 409)
      throw new Error(`binding the lease Role to ${user}: ${leaseBound.status} ${JSON.stringify(leaseBound.body)}`);
  }

  /** Stops the API server, then etcd, each by its PID (SIGTERM, then SIGKILL after 10 s), and removes the directory. */
  async stop(): Promise<void> {
    this.agent?.destroy();
    for (const { proc } of this.procs.splice(0).reverse()) await stopProcess(proc);
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** The NAD config of a test node's default network: a bridge that is the pods' gateway, host-local on one subnet. */
export const podnetBridge = (bridge: string, subnet: string): string =>
  JSON.stringify({
    cniVersion: '1.0.0',
    name: 'podnet',
    type: 'bridge',
    bridge,
    isGateway: true,
    ipam: { type: 'host-local', ranges: [[{ subnet }]] },
  });

/** plexusd's API client for a kubeconfig file (the limits plexusd has by default). */
export function apiClientFor(kubeconfig: string): KubeApiClient {
  const endpoint = loadKubeConfig(kubeconfig);
  if (!endpoint.ok || !endpoint.value)
    throw new Error(`${kubeconfig}: ${endpoint.ok ? 'no endpoint' : endpoint.error.message}`);
  return new KubeApiClient(endpoint.value, { qps: 50, burst: 100, timeoutMs: 5000 });
}
