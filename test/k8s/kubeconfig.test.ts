/**
 * plexusd's kubeconfig reader: the forms operators use (certificate files with relative paths, token files, exec
 * credential plugins), checked against a real API server where a request can prove them; refusals checked by message.
 */
import assert from 'node:assert/strict';
import { chmodSync, copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { KubeApiClient } from '../../src/k8s/api-client';
import { loadKubeConfig } from '../../src/k8s/kubeconfig';
import { k8sMissing, KubeApiFixture } from '../support/k8s';
import { expectedPrerequisites } from '../support/prerequisites';

const dir = mkdtempSync(join(tmpdir(), 'plexus-kubeconfig-'));
const write = (name: string, config: unknown): string => {
  const path = join(dir, name);
  writeFileSync(path, JSON.stringify(config));
  return path;
};
const kubeconfig = (cluster: Record<string, unknown>, user: Record<string, unknown>): Record<string, unknown> => ({
  apiVersion: 'v1',
  kind: 'Config',
  'current-context': 'c',
  clusters: [{ name: 'k', cluster }],
  users: [{ name: 'u', user }],
  contexts: [{ name: 'c', context: { cluster: 'k', user: 'u' } }],
});
const problem = (path: string): string => {
  const r = loadKubeConfig(path);
  return r.ok ? 'loaded' : r.error.message;
};

after(() => rmSync(dir, { recursive: true, force: true }));

describe('kubeconfig', () => {
  it('refuses what it cannot use, saying what and where', () => {
    assert.match(problem(join(dir, 'missing')), /cannot use the kubeconfig .*missing: ENOENT/);
    assert.match(
      problem(write('no-ctx.json', { ...kubeconfig({ server: 'https://127.0.0.1:1' }, {}), 'current-context': 'x' })),
      /current-context "x" is not among its contexts/,
    );
    assert.match(
      problem(write('bad-url.json', kubeconfig({ server: 'not a url' }, {}))),
      /clusters\[0\]\.cluster\.server/,
    );
    assert.match(
      problem(
        write(
          'auth-provider.json',
          kubeconfig({ server: 'https://127.0.0.1:1' }, { 'auth-provider': { name: 'gcp' } }),
        ),
      ),
      /auth-provider entries are not supported/,
    );
    assert.match(
      problem(write('proxy.json', kubeconfig({ server: 'https://127.0.0.1:1', 'proxy-url': 'http://p:3128' }, {}))),
      /proxy-url is not supported/,
    );
    assert.match(problem(write('http.json', kubeconfig({ server: 'http://127.0.0.1:1' }, {}))), /plain HTTP/);
    assert.match(
      problem(write('ca.json', kubeconfig({ server: 'https://127.0.0.1:1', 'certificate-authority': 'nope.crt' }, {}))),
      /cannot read the certificate authority: .*nope\.crt/,
    );
  });

  it('is not needed on a standalone node: no path and no service account means no API', () => {
    const r = loadKubeConfig(undefined, {});
    assert.ok(r.ok && r.value === undefined);
  });
});

describe('kubeconfig credentials on a real API server', { skip: expectedPrerequisites(k8sMissing()) }, () => {
  let api: KubeApiFixture;
  const clients: KubeApiClient[] = [];
  before(async () => {
    api = await KubeApiFixture.start();
  });
  after(async () => {
    for (const c of clients) c.close();
    await api?.stop();
  });
  const get = async (path: string): Promise<number> => {
    const endpoint = loadKubeConfig(path);
    assert.ok(endpoint.ok && endpoint.value, endpoint.ok ? 'no endpoint' : endpoint.error.message);
    const client = new KubeApiClient(endpoint.value, { qps: 50, burst: 100, timeoutMs: 5000 });
    clients.push(client);
    const r = await client.request('GET', '/api/v1/namespaces/default/serviceaccounts', 'serviceaccounts');
    return r.ok ? 200 : r.error.status;
  };
  const certs = (f: string): string => join(api.dir, 'certs', f);

  it('uses certificate and key files named relative to the kubeconfig', async () => {
    for (const f of ['ca.crt', 'admin.crt', 'admin.key']) copyFileSync(certs(f), join(dir, f));
    assert.equal(
      await get(
        write(
          'files.json',
          kubeconfig(
            { server: api.server, 'certificate-authority': 'ca.crt' },
            { 'client-certificate': 'admin.crt', 'client-key': 'admin.key' },
          ),
        ),
      ),
      200,
    );
  });

  it('runs an exec credential plugin and uses the certificate it prints; a failing plugin is a clear error', async () => {
    const plugin = join(dir, 'credential-plugin');
    const credential = {
      apiVersion: 'client.authentication.k8s.io/v1',
      kind: 'ExecCredential',
      status: {
        clientCertificateData: readFileSync(certs('admin.crt'), 'utf8'),
        clientKeyData: readFileSync(certs('admin.key'), 'utf8'),
      },
    };
    writeFileSync(join(dir, 'credential.json'), JSON.stringify(credential));
    writeFileSync(
      plugin,
      `#!/bin/sh\n[ -n "$KUBERNETES_EXEC_INFO" ] || exit 3\ncat "${join(dir, 'credential.json')}"\n`,
    );
    chmodSync(plugin, 0o755);
    const ca = readFileSync(certs('ca.crt')).toString('base64');
    assert.equal(
      await get(
        write(
          'exec.json',
          kubeconfig(
            { server: api.server, 'certificate-authority-data': ca },
            { exec: { apiVersion: 'client.authentication.k8s.io/v1', command: plugin } },
          ),
        ),
      ),
      200,
    );

    const failing = write(
      'exec-fails.json',
      kubeconfig({ server: api.server, 'certificate-authority-data': ca }, { exec: { command: '/bin/false' } }),
    );
    const endpoint = loadKubeConfig(failing);
    assert.ok(endpoint.ok && endpoint.value);
    const creds = await endpoint.value.credentials();
    assert.ok(!creds.ok && /the exec credential plugin \/bin\/false failed/.test(creds.error), JSON.stringify(creds));
  });

  it('sends a token from a token file, which the API server judges (unknown token: 401)', async () => {
    writeFileSync(join(dir, 'token'), 'not-a-real-token\n');
    const ca = readFileSync(certs('ca.crt')).toString('base64');
    assert.equal(
      await get(
        write(
          'token.json',
          kubeconfig({ server: api.server, 'certificate-authority-data': ca }, { tokenFile: 'token' }),
        ),
      ),
      401,
    );
  });
});
