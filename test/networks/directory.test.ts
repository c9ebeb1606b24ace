import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CniCode } from '../../src/cni/errors';
import { NetworkDirectory } from '../../src/networks/directory';
import { unwrap, errorOf } from '../support/result';

/** A fresh networks directory, removed even when the test fails. */
function withDir(body: (dir: string) => void): void {
  const dir = mkdtempSync(join(tmpdir(), 'plexus-networks-'));
  try {
    body(dir);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const config = (name: string, bridge = `br-${name}`): string =>
  JSON.stringify({ cniVersion: '1.0.0', name, type: 'bridge', bridge });

const yamlNad = (name: string, namespace = 'default', bridge?: string): string => `apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata:
  name: ${name}
  namespace: ${namespace}
spec:
  config: '${config(name, bridge)}'
`;

const jsonNad = (name: string, namespace = 'default'): Record<string, unknown> => ({
  apiVersion: 'k8s.cni.cncf.io/v1',
  kind: 'NetworkAttachmentDefinition',
  metadata: { name, namespace },
  spec: { config: config(name) },
});

test('a NAD in a .yaml file is found by namespace and name', () => {
  withDir((dir) => {
    writeFileSync(join(dir, 'blue.yaml'), yamlNad('blue', 'team-a'));
    const def = unwrap(new NetworkDirectory(dir).get('team-a', 'blue'));
    assert.deepEqual([def.key, def.source, def.plugins[0]?.bridge], ['team-a/blue', join(dir, 'blue.yaml'), 'br-blue']);
  });
});

test('.yml and .json files are read too', () => {
  withDir((dir) => {
    writeFileSync(join(dir, 'green.yml'), yamlNad('green'));
    writeFileSync(join(dir, 'red.json'), JSON.stringify(jsonNad('red')));
    const networks = new NetworkDirectory(dir);
    assert.equal(unwrap(networks.get('default', 'green')).name, 'green');
    assert.equal(unwrap(networks.get('default', 'red')).name, 'red');
  });
});

test('files with other extensions are ignored', () => {
  withDir((dir) => {
    writeFileSync(join(dir, 'blue.yaml.bak'), yamlNad('blue'));
    writeFileSync(join(dir, 'README'), 'not a network');
    assert.deepEqual(new NetworkDirectory(dir).list(), { networks: [], errors: [] });
  });
});

test('every document of a multi-document YAML file is read', () => {
  withDir((dir) => {
    writeFileSync(join(dir, 'all.yaml'), `${yamlNad('blue')}---\n${yamlNad('green', 'team-b')}---\n`);
    assert.deepEqual(
      new NetworkDirectory(dir)
        .list()
        .networks.map((n) => n.key)
        .sort(),
      ['default/blue', 'team-b/green'],
    );
  });
});

test('a kind: List document contributes each of its items', () => {
  withDir((dir) => {
    writeFileSync(
      join(dir, 'list.json'),
      JSON.stringify({ apiVersion: 'v1', kind: 'List', items: [jsonNad('blue'), jsonNad('green', 'team-b')] }),
    );
    const { networks, errors } = new NetworkDirectory(dir).list();
    assert.deepEqual(errors, []);
    assert.deepEqual(networks.map((n) => n.key).sort(), ['default/blue', 'team-b/green']);
  });
});

test('an unknown network is an invalid network config (7) naming the network and the directory', () => {
  withDir((dir) => {
    writeFileSync(join(dir, 'blue.yaml'), yamlNad('blue'));
    const error = errorOf(new NetworkDirectory(dir).get('default', 'green'));
    assert.equal(error.code, CniCode.InvalidNetworkConfig);
    assert.equal(error.message, `network default/green is not defined in ${dir}`);
  });
});

test('a network is looked up in its own namespace only', () => {
  withDir((dir) => {
    writeFileSync(join(dir, 'blue.yaml'), yamlNad('blue', 'team-a'));
    assert.equal(errorOf(new NetworkDirectory(dir).get('default', 'blue')).code, CniCode.InvalidNetworkConfig);
  });
});

test('a broken file does not hide valid ones, and a lookup that fails mentions it', () => {
  withDir((dir) => {
    writeFileSync(join(dir, 'a-broken.yaml'), 'apiVersion: [unclosed\n');
    writeFileSync(join(dir, 'b-invalid.yaml'), yamlNad('Not_Valid'));
    writeFileSync(join(dir, 'c-blue.yaml'), yamlNad('blue'));
    const networks = new NetworkDirectory(dir);
    assert.equal(unwrap(networks.get('default', 'blue')).name, 'blue');
    const error = errorOf(networks.get('default', 'green'));
    assert.equal(error.code, CniCode.InvalidNetworkConfig);
    assert.ok(
      error.message.startsWith(`network default/green is not defined in ${dir} (problems reading definitions: `),
      error.message,
    );
    assert.ok(error.message.includes(join(dir, 'a-broken.yaml')), error.message);
    assert.ok(error.message.includes(join(dir, 'b-invalid.yaml')), error.message);
  });
});

test('list reports YAML errors as decode failures (6) and invalid NADs as invalid network configs (7)', () => {
  withDir((dir) => {
    writeFileSync(join(dir, 'a-broken.yaml'), 'apiVersion: [unclosed\n');
    writeFileSync(join(dir, 'b-invalid.yaml'), `${yamlNad('blue')}---\n${yamlNad('Not_Valid')}`);
    const { networks, errors } = new NetworkDirectory(dir).list();
    assert.deepEqual(
      networks.map((n) => n.key),
      ['default/blue'],
    );
    assert.deepEqual(
      errors.map((e) => e.code),
      [CniCode.DecodeFailure, CniCode.InvalidNetworkConfig],
    );
    assert.ok(errors[1]?.message.startsWith(`${join(dir, 'b-invalid.yaml')} (document 2): `), errors[1]?.message);
  });
});

test('a changed file is read again', () => {
  withDir((dir) => {
    const path = join(dir, 'net.yaml');
    writeFileSync(path, yamlNad('blue'));
    const networks = new NetworkDirectory(dir);
    assert.equal(unwrap(networks.get('default', 'blue')).name, 'blue');

    writeFileSync(path, yamlNad('green'));
    const later = new Date(statSync(path).mtimeMs + 5000);
    utimesSync(path, later, later);
    assert.equal(unwrap(networks.get('default', 'green')).name, 'green');
    assert.match(errorOf(networks.get('default', 'blue')).message, /not defined/);
  });
});

test('an unchanged file (same mtime and size) is served from the cache', () => {
  withDir((dir) => {
    const path = join(dir, 'net.yaml');
    const fixed = new Date('2024-01-01T00:00:00Z');
    writeFileSync(path, yamlNad('blue', 'default', 'br-aaaa'));
    utimesSync(path, fixed, fixed);
    const networks = new NetworkDirectory(dir);
    assert.equal(unwrap(networks.get('default', 'blue')).plugins[0]?.bridge, 'br-aaaa');

    writeFileSync(path, yamlNad('blue', 'default', 'br-bbbb'));
    utimesSync(path, fixed, fixed);
    assert.equal(unwrap(networks.get('default', 'blue')).plugins[0]?.bridge, 'br-aaaa');
  });
});

test('a removed file no longer provides its networks', () => {
  withDir((dir) => {
    const path = join(dir, 'net.yaml');
    writeFileSync(path, yamlNad('blue'));
    const networks = new NetworkDirectory(dir);
    unwrap(networks.get('default', 'blue'));
    rmSync(path);
    assert.equal(errorOf(networks.get('default', 'blue')).code, CniCode.InvalidNetworkConfig);
  });
});

test('a missing directory finds nothing and reports the I/O failure', () => {
  withDir((root) => {
    const dir = join(root, 'absent');
    const networks = new NetworkDirectory(dir);
    const error = errorOf(networks.get('default', 'blue'));
    assert.equal(error.code, CniCode.InvalidNetworkConfig);
    assert.ok(error.message.startsWith(`network default/blue is not defined in ${dir}`), error.message);
    assert.ok(error.message.includes(`cannot read networks directory ${dir}`), error.message);
    const { errors } = networks.list();
    assert.deepEqual(
      errors.map((e) => e.code),
      [CniCode.IoFailure],
    );
  });
});
