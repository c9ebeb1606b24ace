/** Which network is a pod's default: the override annotation, the configured NAD, or a CNI config file on the node. */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { ok, err, CniCode, CniError } from '../../src/cni/errors';
import { chooseDefaultNetwork, DEFAULT_NETWORK_ANNOTATION } from '../../src/networks/default-network';
import { isolationProblem } from '../../src/networks/isolation';
import type { NetworkDefinition } from '../../src/networks/nad';
import type { NetworkSource } from '../../src/networks/source';

const def = (namespace: string, name: string): NetworkDefinition => ({
  namespace,
  name,
  key: `${namespace}/${name}`,
  annotations: {},
  cniVersion: '1.0.0',
  cniName: name,
  plugins: [{ type: 'bridge', name, cniVersion: '1.0.0' }],
  source: 'test',
});
const known = new Map([
  ['default/podnet', def('default', 'podnet')],
  ['team-a/alt', def('team-a', 'alt')],
  ['team-b/far', def('team-b', 'far')],
]);
const networks: NetworkSource = {
  get: (ns, name) =>
    known.get(`${ns}/${name}`)
      ? ok(known.get(`${ns}/${name}`)!)
      : err(new CniError(CniCode.InvalidNetworkConfig, `network ${ns}/${name} is not defined`)),
  list: () => ({ networks: [...known.values()], errors: [] }),
};
const choose = (configured: string | undefined, annotations: Record<string, string> = {}, isolation = {}) =>
  chooseDefaultNetwork({ configured, annotations, podNamespace: 'team-a', networks, isolation });

describe('the default network', () => {
  const dir = mkdtempSync(join(tmpdir(), 'plexus-defnet-'));
  after(() => rmSync(dir, { recursive: true, force: true }));

  it("is the configured NAD unless the pod's annotation names another, resolved in the pod's namespace", () => {
    const configured = choose('podnet');
    assert.ok(configured.ok && configured.value.key === 'default/podnet');
    const overridden = choose('podnet', { [DEFAULT_NETWORK_ANNOTATION]: 'alt' });
    assert.ok(overridden.ok && overridden.value.key === 'team-a/alt');
    const json = choose('podnet', { [DEFAULT_NETWORK_ANNOTATION]: '[{"name":"far","namespace":"team-b"}]' });
    assert.ok(json.ok && json.value.key === 'team-b/far');
  });

  it('takes the override in each documented form: name, namespace/name, a JSON list of one, one JSON object', () => {
    const forms: [string, string][] = [
      ['alt', 'team-a/alt'],
      [' team-b/far ', 'team-b/far'],
      ['[{"name":"far","namespace":"team-b"}]', 'team-b/far'],
      ['[{"name":"alt"}]', 'team-a/alt'],
      ['{"name":"far","namespace":"team-b"}', 'team-b/far'],
      [' { "name": "alt" } ', 'team-a/alt'],
    ];
    for (const [annotation, key] of forms) {
      const r = choose('podnet', { [DEFAULT_NETWORK_ANNOTATION]: annotation });
      assert.equal(r.ok ? r.value.key : r.error.message, key, annotation);
    }
  });

  it('refuses an override that names several networks, asks for more than the network, or crosses isolation', () => {
    const message = (r: ReturnType<typeof choose>): string => (r.ok ? 'ok' : r.error.message);
    assert.match(
      message(choose('podnet', { [DEFAULT_NETWORK_ANNOTATION]: 'alt,podnet' })),
      /must name exactly one network, not 2/,
    );
    assert.match(
      message(choose('podnet', { [DEFAULT_NETWORK_ANNOTATION]: 'alt@eth9' })),
      /only selects the network; interface cannot be set here/,
    );
    assert.match(
      message(choose('podnet', { [DEFAULT_NETWORK_ANNOTATION]: '{"name":"alt","ips":["10.0.0.9/24"]}' })),
      /only selects the network; ips cannot be set here/,
    );
    assert.match(
      message(choose('podnet', { [DEFAULT_NETWORK_ANNOTATION]: '' })),
      /must name exactly one network, not 0/,
    );
    assert.match(message(choose('podnet', { [DEFAULT_NETWORK_ANNOTATION]: '{"name":"alt"' })), /not valid JSON/);
    assert.match(message(choose('podnet', { [DEFAULT_NETWORK_ANNOTATION]: 'nope' })), /team-a\/nope is not defined/);
    assert.match(
      message(choose('podnet', { [DEFAULT_NETWORK_ANNOTATION]: 'team-b/far' }, { namespaceIsolation: true })),
      /namespace isolation is on/,
    );
    assert.equal(
      message(
        choose(
          'podnet',
          { [DEFAULT_NETWORK_ANNOTATION]: 'team-b/far' },
          { namespaceIsolation: true, globalNamespaces: ['team-b'] },
        ),
      ),
      'ok',
    );
  });

  it('may be a CNI config file on the node, read at each use and named by its CNI name', () => {
    const path = join(dir, '10-flannel.conflist');
    writeFileSync(path, JSON.stringify({ cniVersion: '1.0.0', name: 'cbr0', plugins: [{ type: 'bridge' }] }));
    const r = choose(path);
    assert.ok(r.ok, r.ok ? '' : r.error.message);
    assert.equal(r.value.key, 'cbr0');
    assert.equal(r.value.plugins[0]?.type, 'bridge');
    writeFileSync(path, JSON.stringify({ cniVersion: '1.0.0', name: 'plexus', plugins: [{ type: 'plexus-cni' }] }));
    assert.match((choose(path) as { error: Error }).error.message, /Plexus's own config/);
    assert.match((choose(join(dir, 'missing.conf')) as { error: Error }).error.message, /cannot be read/);
  });
});

describe('namespace isolation', () => {
  it('is off by default; when on, allows the pod\'s namespace, "default" and the global namespaces only', () => {
    const net = (namespace: string) => ({ namespace, name: 'n' });
    assert.equal(isolationProblem({}, 'a', net('b'), 'x'), undefined);
    const on = { namespaceIsolation: true, globalNamespaces: ['g'] };
    assert.equal(isolationProblem(on, 'a', net('a'), 'x'), undefined);
    assert.equal(isolationProblem(on, 'a', net('default'), 'x'), undefined);
    assert.equal(isolationProblem(on, 'a', net('g'), 'x'), undefined);
    const refused = isolationProblem(on, 'a', net('b'), 'element 1');
    assert.equal(refused?.code, 7);
    assert.match(refused.message, /^element 1: network b\/n is in namespace b/);
    assert.match(refused.details, /add b to --global-namespaces/);
  });
});
