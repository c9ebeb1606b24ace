/**
 * plexusd on a real API server whose RBAC lacks one permission of deploy/10-rbac.yaml at a time: the refusal is
 * logged at once at error level naming the verb and resource, counted in plexus_api_forbidden_total, shown on /readyz
 * (failing it only where serving depends on the permission), and not retried in silence.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { request } from 'node:http';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { parseAllDocuments } from 'yaml';
import { DaemonFixture, podMaker, ROOT } from '../support/daemon';
import type { DaemonSettings } from '../support/daemon-flags';
import { apiPodCall, ApiPods } from '../support/api-pods';
import { restoreForwardingAfterwards } from '../support/forwarding';
import { k8sMissing, KubeApiFixture } from '../support/k8s';
import { NetnsFixture, uniquePrefix } from '../support/netns';
import { answerWithin } from '../support/until';
import { expectedPrerequisites } from '../support/prerequisites';

const skip = expectedPrerequisites(k8sMissing());
const prefix = uniquePrefix('rb');
const subnet = `10.${200 + Math.floor(Math.random() * 50)}.${Math.floor(Math.random() * 250)}.0/24`;

interface Rule {
  apiGroups: string[];
  resources: string[];
  verbs: string[];
}

/** deploy/10-rbac.yaml's rules without `verb` on `resource` (of the core group), the other rules untouched. */
function rulesWithout(verb: string, resource: string): Rule[] {
  const docs = parseAllDocuments(readFileSync(join(ROOT, 'deploy/10-rbac.yaml'), 'utf8')).map(
    (d) => d.toJSON() as { kind: string; rules?: Rule[] },
  );
  const rules = docs.find((d) => d.kind === 'ClusterRole')!.rules!;
  return rules.flatMap((r) => {
    if (!r.apiGroups.includes('') || !r.resources.includes(resource) || !r.verbs.includes(verb)) return [r];
    const others = r.resources.filter((x) => x !== resource);
    const verbs = r.verbs.filter((v) => v !== verb);
    return [
      ...(others.length ? [{ ...r, resources: others }] : []),
      ...(verbs.length ? [{ ...r, resources: [resource], verbs }] : []),
    ];
  });
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

const httpGet = (port: number, path: string): Promise<{ status: number; body: string }> =>
  new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path, timeout: 5000 }, (res) => {
      let body = '';
      res.on('data', (c: Buffer) => (body += c.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('error', reject);
    req.end();
  });

interface LogLine {
  level: number;
  msg: string;
  verb?: string;
  resource?: string;
}
const logLines = (daemon: DaemonFixture): LogLine[] =>
  daemon.stderr.split('\n').flatMap((l) => {
    try {
      return [JSON.parse(l) as LogLine];
    } catch {
      return [];
    }
  });

/** A plexusd of its own node with the TCP probes, whose user RBAC grants deploy/10-rbac.yaml minus `verb resource`. */
class RefusedDaemon {
  readonly daemon: DaemonFixture;
  readonly node: string;

  private constructor(
    daemon: DaemonFixture,
    node: string,
    readonly port: number,
  ) {
    this.daemon = daemon;
    this.node = node;
  }

  static async make(
    api: KubeApiFixture,
    verb: string,
    resource: string,
    extra: DaemonSettings = {},
  ): Promise<RefusedDaemon> {
    const user = `${prefix}-no-${verb}-${resource}`;
    const role = await api.request('POST', '/apis/rbac.authorization.k8s.io/v1/clusterroles', {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRole',
      metadata: { name: user },
      rules: rulesWithout(verb, resource),
    });
    assert.equal(role.status, 201, JSON.stringify(role.body));
    const binding = await api.request('POST', '/apis/rbac.authorization.k8s.io/v1/clusterrolebindings', {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRoleBinding',
      metadata: { name: user },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: user },
      subjects: [{ apiGroup: 'rbac.authorization.k8s.io', kind: 'User', name: user }],
    });
    assert.equal(binding.status, 201, JSON.stringify(binding.body));
    // deploy/10-rbac.yaml's Role (its node's Lease in kube-system), granted whole.
    const leaseRole = parseAllDocuments(readFileSync(join(ROOT, 'deploy/10-rbac.yaml'), 'utf8'))
      .map((d) => d.toJSON() as { kind: string })
      .find((d) => d.kind === 'Role');
    const roleMade = await api.request(
      'POST',
      '/apis/rbac.authorization.k8s.io/v1/namespaces/kube-system/roles',
      leaseRole,
    );
    assert.ok(roleMade.status === 201 || roleMade.status === 409, JSON.stringify(roleMade.body));
    const roleBinding = await api.request(
      'POST',
      '/apis/rbac.authorization.k8s.io/v1/namespaces/kube-system/rolebindings',
      {
        apiVersion: 'rbac.authorization.k8s.io/v1',
        kind: 'RoleBinding',
        metadata: { name: user, namespace: 'kube-system' },
        roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: 'plexus' },
        subjects: [{ apiGroup: 'rbac.authorization.k8s.io', kind: 'User', name: user }],
      },
    );
    assert.equal(roleBinding.status, 201, JSON.stringify(roleBinding.body));
    const port = await freePort();
    const node = `${prefix}-${verb}-${resource}`;
    const settings = { kubeconfig: api.userKubeconfig(user), nodeName: node, metricsAddress: `127.0.0.1:${port}` };
    return new RefusedDaemon(new DaemonFixture('podnet', { ...settings, ...extra }), node, port);
  }

  /** The error line naming `verb resource`, once it is logged (or undefined after `ms`). */
  async errorLine(verb: string, resource: string, ms = 5000): Promise<LogLine | undefined> {
    const named = (l: LogLine): boolean => l.level === 50 && l.verb === verb && l.resource === resource;
    return answerWithin(() => logLines(this.daemon).find(named), ms, 50);
  }

  async forbiddenCount(verb: string, resource: string): Promise<number> {
    const metrics = await httpGet(this.port, '/metrics');
    const m = new RegExp(`^plexus_api_forbidden_total\\{verb="${verb}",resource="${resource}"\\} (\\d+)$`, 'm').exec(
      metrics.body,
    );
    return m ? Number(m[1]) : 0;
  }

  async readyz(): Promise<{
    status: number;
    report: { ok: boolean; checks: Record<string, string>; warnings?: Record<string, string> };
  }> {
    const r = await httpGet(this.port, '/readyz');
    return {
      status: r.status,
      report: JSON.parse(r.body) as { ok: boolean; checks: Record<string, string>; warnings?: Record<string, string> },
    };
  }
}

describe('plexusd when RBAC refuses it a permission', { skip }, () => {
  const fx = new NetnsFixture(prefix);
  const newPod = podMaker(fx, prefix, ['eth0']);
  let api: KubeApiFixture;
  const daemons: DaemonFixture[] = [];
  restoreForwardingAfterwards();

  before(async () => {
    fx.trackHostLink(`${prefix}b0`);
    api = await KubeApiFixture.startForPlexus();
    const config = {
      cniVersion: '1.0.0',
      name: 'podnet',
      type: 'bridge',
      bridge: `${prefix}b0`,
      isGateway: true,
      ipam: { type: 'host-local', ranges: [[{ subnet }]] },
    };
    assert.equal((await api.createNad('default', 'podnet', JSON.stringify(config))).status, 201);
  });
  after(async () => {
    for (const d of daemons) await d.stop();
    await api?.stop();
    fx.cleanup();
  });

  const started = async (verb: string, resource: string, extra: DaemonSettings = {}): Promise<RefusedDaemon> => {
    const d = await RefusedDaemon.make(api, verb, resource, extra);
    daemons.push(d.daemon);
    await d.daemon.start(30000);
    return d;
  };
  /** An ADD of a new pod of the daemon's node, which succeeds; then its DEL. */
  const addAndDelete = async (d: RefusedDaemon, name: string): Promise<void> => {
    const p = await new ApiPods(api, d.node, newPod).create(name, {});
    const call = (command: 'ADD' | 'DEL'): Promise<{ code: number | null; stdout: string }> =>
      apiPodCall(d.daemon, command, p);
    const added = await call('ADD');
    assert.equal(added.code, 0, added.stdout);
    assert.equal((await call('DEL')).code, 0);
  };

  it('without patch on pods: network-status refused is an error naming patch pods at once, counted, a warning on /readyz', async () => {
    const d = await started('patch', 'pods');
    const before = Date.now();
    await addAndDelete(d, 'status');
    const line = await d.errorLine('patch', 'pods');
    assert.ok(line, `no error line for patch pods in:\n${d.daemon.stderr}`);
    assert.ok(Date.now() - before < 5000, 'reported at once');
    assert.match(line.msg, /"patch pods" \(HTTP 403 Forbidden\)/);
    assert.ok((await d.forbiddenCount('patch', 'pods')) >= 1);
    const ready = await d.readyz();
    assert.equal(ready.status, 200, 'the pod is attached; only its status is not written');
    assert.match(ready.report.warnings?.rbac ?? '', /refuses patch pods/);
  });

  it('without create on events: the refused event is an error naming create events, counted, a warning on /readyz', async () => {
    const d = await started('create', 'events');
    await addAndDelete(d, 'events');
    const line = await d.errorLine('create', 'events');
    assert.ok(line, `no error line for create events in:\n${d.daemon.stderr}`);
    assert.ok((await d.forbiddenCount('create', 'events')) >= 1);
    const ready = await d.readyz();
    assert.equal(ready.status, 200);
    assert.match(ready.report.warnings?.rbac ?? '', /refuses create events/);
  });

  it("without list on nodes: the cluster-IPAM reconciler's refusal is an error naming list nodes, counted, a warning on /readyz", async () => {
    const d = await started('list', 'nodes', { ipamReconcileSeconds: 1 });
    const line = await d.errorLine('list', 'nodes');
    assert.ok(line, `no error line for list nodes in:\n${d.daemon.stderr}`);
    assert.ok((await d.forbiddenCount('list', 'nodes')) >= 1);
    const ready = await d.readyz();
    assert.equal(ready.status, 200);
    assert.match(ready.report.warnings?.rbac ?? '', /refuses list nodes/);
  });

  it('without list on pods: not ready, and /readyz says the API refuses list pods', async () => {
    const d = await RefusedDaemon.make(api, 'list', 'pods');
    daemons.push(d.daemon);
    const starting = d.daemon.start(60000).catch((e: unknown) => e);
    try {
      const line = await d.errorLine('list', 'pods', 15000);
      assert.ok(line, `no error line for list pods in:\n${d.daemon.stderr}`);
      const ready = await d.readyz();
      assert.equal(ready.status, 503);
      assert.match(ready.report.checks.rbac ?? '', /refuses list pods: plexusd cannot serve/);
      assert.ok((await d.forbiddenCount('list', 'pods')) >= 1);
    } finally {
      await d.daemon.kill();
      await starting;
    }
  });
});
