import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CniCode, type Result } from '../../src/cni/errors';
import { CniConfDir } from '../../src/networks/conf-dir';
import { NetworkDirectory } from '../../src/networks/directory';
import { parseNad } from '../../src/networks/nad';

function unwrap<T>(result: Result<T>): T {
  if (!result.ok) assert.fail(`expected ok, got error ${result.error.code}: ${result.error.message}`);
  return result.value;
}

function errorOf<T>(result: Result<T>): { code: number; message: string; details: string } {
  if (result.ok) assert.fail(`expected an error, got ${JSON.stringify(result.value)}`);
  return { code: result.error.code, message: result.error.message, details: result.error.details };
}

/** A networks dir and a CNI config dir, removed even when the test fails. */
function withDirs(body: (dirs: { nads: string; conf: string; root: string }) => void): void {
  const root = mkdtempSync(join(tmpdir(), 'plexus-sources-'));
  const nads = join(root, 'networks.d');
  const conf = join(root, 'net.d');
  mkdirSync(nads);
  mkdirSync(conf);
  try {
    body({ nads, conf, root });
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
}

const nad = (
  name: string,
  options: { config?: string; annotations?: Record<string, string> } = {},
): Record<string, unknown> => ({
  apiVersion: 'k8s.cni.cncf.io/v1',
  kind: 'NetworkAttachmentDefinition',
  metadata: { name, namespace: 'team-a', ...(options.annotations ? { annotations: options.annotations } : {}) },
  ...(options.config !== undefined ? { spec: { config: options.config } } : {}),
});

const conflist = (name: string, bridge: string): string =>
  JSON.stringify({
    cniVersion: '1.0.0',
    name,
    plugins: [
      { type: 'bridge', bridge },
      { type: 'tuning', cniVersion: '0.3.1' },
    ],
  });
const conf = (name: string, bridge: string): string =>
  JSON.stringify({ cniVersion: '0.4.0', name, type: 'bridge', bridge });

const SOURCE = '/etc/plexus/networks.d/blue.yaml';

// Empty spec.config: the config file whose "name" is the NAD's name

test('an empty spec.config uses the conflist whose name is the NAD name, injecting name and cniVersion', () => {
  withDirs(({ conf: dir }) => {
    writeFileSync(join(dir, '10-blue.conflist'), conflist('blue', 'br-list'));
    const def = unwrap(parseNad(nad('blue'), SOURCE, new CniConfDir(dir)));
    assert.deepEqual(
      { cniName: def.cniName, cniVersion: def.cniVersion, configFile: def.configFile, plugins: def.plugins },
      {
        cniName: 'blue',
        cniVersion: '1.0.0',
        configFile: join(dir, '10-blue.conflist'),
        plugins: [
          { type: 'bridge', bridge: 'br-list', name: 'blue', cniVersion: '1.0.0' },
          { type: 'tuning', name: 'blue', cniVersion: '1.0.0' },
        ],
      },
    );
  });
});

test('a conflist is preferred over a conf with the same name, even when the conf sorts first', () => {
  withDirs(({ conf: dir }) => {
    writeFileSync(join(dir, '00-blue.conf'), conf('blue', 'br-conf'));
    writeFileSync(join(dir, '99-blue.conflist'), conflist('blue', 'br-list'));
    const def = unwrap(parseNad(nad('blue', { config: '' }), SOURCE, new CniConfDir(dir)));
    assert.equal(def.plugins[0]?.bridge, 'br-list');
  });
});

test('a conf is used when no conflist has the name', () => {
  withDirs(({ conf: dir }) => {
    writeFileSync(join(dir, '10-green.conflist'), conflist('green', 'br-green'));
    writeFileSync(join(dir, '20-blue.conf'), conf('blue', 'br-conf'));
    const def = unwrap(parseNad(nad('blue'), SOURCE, new CniConfDir(dir)));
    assert.deepEqual(
      [def.plugins.length, def.plugins[0]?.bridge, def.cniVersion, def.configFile],
      [1, 'br-conf', '0.4.0', join(dir, '20-blue.conf')],
    );
  });
});

test('a .json file counts as a conf', () => {
  withDirs(({ conf: dir }) => {
    writeFileSync(join(dir, 'blue.json'), conf('blue', 'br-json'));
    assert.equal(unwrap(parseNad(nad('blue'), SOURCE, new CniConfDir(dir))).plugins[0]?.bridge, 'br-json');
  });
});

test('among several matches of one kind, the first in name order wins', () => {
  withDirs(({ conf: dir }) => {
    writeFileSync(join(dir, 'b.conf'), conf('blue', 'br-b'));
    writeFileSync(join(dir, 'a.conf'), conf('blue', 'br-a'));
    assert.equal(unwrap(parseNad(nad('blue'), SOURCE, new CniConfDir(dir))).plugins[0]?.bridge, 'br-a');
  });
});

test('a file that is not JSON is skipped, and a match after it is still found', () => {
  withDirs(({ conf: dir }) => {
    writeFileSync(join(dir, '00-broken.conflist'), '{ not json');
    writeFileSync(join(dir, '10-blue.conflist'), conflist('blue', 'br-list'));
    assert.equal(unwrap(parseNad(nad('blue'), SOURCE, new CniConfDir(dir))).plugins[0]?.bridge, 'br-list');
  });
});

test('no file with the name is an invalid network config (7) naming the NAD and the directory', () => {
  withDirs(({ conf: dir }) => {
    writeFileSync(join(dir, '10-green.conflist'), conflist('green', 'br-green'));
    const error = errorOf(parseNad(nad('blue'), SOURCE, new CniConfDir(dir)));
    assert.equal(error.code, CniCode.InvalidNetworkConfig);
    assert.equal(
      error.message,
      `${SOURCE}: spec.config of team-a/blue is empty and no CNI config file in ${dir} has "name": "blue"`,
    );
  });
});

test('a missing config directory is an invalid network config (7) naming it', () => {
  withDirs(({ root }) => {
    const dir = join(root, 'absent');
    const error = errorOf(parseNad(nad('blue'), SOURCE, new CniConfDir(dir)));
    assert.equal(error.code, CniCode.InvalidNetworkConfig);
    assert.equal(
      error.message,
      `${SOURCE}: spec.config of team-a/blue is empty and the CNI config directory ${dir} does not exist`,
    );
  });
});

test('a config file of type plexus-cni is refused: it would call Plexus recursively', () => {
  withDirs(({ conf: dir }) => {
    writeFileSync(
      join(dir, '00-plexus.conflist'),
      JSON.stringify({ cniVersion: '1.1.0', name: 'plexus', plugins: [{ type: 'plexus-cni' }] }),
    );
    const error = errorOf(parseNad(nad('plexus'), SOURCE, new CniConfDir(dir)));
    assert.equal(error.code, CniCode.InvalidNetworkConfig);
    assert.ok(error.message.includes('would call Plexus recursively'), error.message);
  });
});

test('a matching file with an invalid config is reported with the file name', () => {
  withDirs(({ conf: dir }) => {
    writeFileSync(join(dir, 'blue.conf'), JSON.stringify({ name: 'blue', type: 'bridge' }));
    const error = errorOf(parseNad(nad('blue'), SOURCE, new CniConfDir(dir)));
    assert.equal(error.code, CniCode.InvalidNetworkConfig);
    assert.ok(error.message.startsWith(`${SOURCE} (team-a/blue from ${join(dir, 'blue.conf')}): `), error.message);
  });
});

// Static configs by id

test('plexus.io/config-id reads <conf dir>/<id>.conf, with the NAD name when the file has none', () => {
  withDirs(({ conf: dir }) => {
    writeFileSync(
      join(dir, 'fabric-a.conf'),
      JSON.stringify({ cniVersion: '1.0.0', type: 'bridge', bridge: 'br-fab' }),
    );
    const def = unwrap(
      parseNad(nad('blue', { annotations: { 'plexus.io/config-id': 'fabric-a' } }), SOURCE, new CniConfDir(dir)),
    );
    assert.deepEqual(
      [def.cniName, def.plugins[0]?.bridge, def.configFile],
      ['blue', 'br-fab', join(dir, 'fabric-a.conf')],
    );
  });
});

for (const [id, why] of [
  ['../x', 'may not contain "/"'],
  ['a/b', 'may not contain "/"'],
  ['/etc/passwd', 'may not contain "/"'],
  ['..', 'may not contain ".."'],
  ['x..y', 'may not contain ".."'],
  ['a\0b', 'may not contain NUL'],
  ['', 'is empty'],
] as const) {
  test(`config id ${JSON.stringify(id)} is refused: ${why}`, () => {
    withDirs(({ conf: dir }) => {
      const error = errorOf(
        parseNad(nad('blue', { annotations: { 'plexus.io/config-id': id } }), SOURCE, new CniConfDir(dir)),
      );
      assert.equal(error.code, CniCode.InvalidNetworkConfig);
      assert.equal(error.message, `${SOURCE}: team-a/blue: plexus.io/config-id "${id}": config id "${id}" ${why}`);
    });
  });
}

test('a config id whose file does not exist is an invalid network config (7) naming the path', () => {
  withDirs(({ conf: dir }) => {
    const error = errorOf(
      parseNad(nad('blue', { annotations: { 'plexus.io/config-id': 'absent' } }), SOURCE, new CniConfDir(dir)),
    );
    assert.equal(error.code, CniCode.InvalidNetworkConfig);
    assert.equal(
      error.message,
      `${SOURCE}: team-a/blue: plexus.io/config-id "absent": ${join(dir, 'absent.conf')} does not exist`,
    );
  });
});

test('a config id together with a non-empty spec.config is refused as ambiguous', () => {
  withDirs(({ conf: dir }) => {
    const error = errorOf(
      parseNad(
        nad('blue', { config: conf('blue', 'br'), annotations: { 'plexus.io/config-id': 'x' } }),
        SOURCE,
        new CniConfDir(dir),
      ),
    );
    assert.equal(error.code, CniCode.InvalidNetworkConfig);
    assert.equal(
      error.message,
      `${SOURCE}: team-a/blue has both spec.config and the plexus.io/config-id annotation; keep one`,
    );
  });
});

test('without a config source, a config id is an invalid network config (7)', () => {
  const error = errorOf(parseNad(nad('blue', { annotations: { 'plexus.io/config-id': 'x' } }), SOURCE));
  assert.equal(error.code, CniCode.InvalidNetworkConfig);
  assert.equal(
    error.message,
    `${SOURCE}: team-a/blue names config id "x" but there is no CNI config directory to read it from`,
  );
});

// Through the directory

test('the directory resolves empty spec.config in its cniConfDir', () => {
  withDirs(({ nads, conf: dir }) => {
    writeFileSync(join(dir, 'blue.conflist'), conflist('blue', 'br-list'));
    writeFileSync(join(nads, 'blue.json'), JSON.stringify(nad('blue')));
    const networks = new NetworkDirectory(nads, { cniConfDir: dir });
    assert.equal(networks.cniConfDir, dir);
    assert.equal(unwrap(networks.get('team-a', 'blue')).plugins[0]?.bridge, 'br-list');
  });
});

test('the directory resolves config ids in its cniConfDir', () => {
  withDirs(({ nads, conf: dir }) => {
    writeFileSync(join(dir, 'fab.conf'), conf('fab', 'br-fab'));
    writeFileSync(
      join(nads, 'blue.json'),
      JSON.stringify(nad('blue', { annotations: { 'plexus.io/config-id': 'fab' } })),
    );
    assert.equal(
      unwrap(new NetworkDirectory(nads, { cniConfDir: dir }).get('team-a', 'blue')).plugins[0]?.bridge,
      'br-fab',
    );
  });
});

test('the cniConfDir defaults to /etc/cni/net.d', () => {
  withDirs(({ nads }) => {
    assert.equal(new NetworkDirectory(nads).cniConfDir, '/etc/cni/net.d');
  });
});

test('a change in the config dir is seen without touching the NAD file', () => {
  withDirs(({ nads, conf: dir }) => {
    const nadPath = join(nads, 'blue.json');
    writeFileSync(nadPath, JSON.stringify(nad('blue')));
    const fixed = new Date('2024-01-01T00:00:00Z');
    utimesSync(nadPath, fixed, fixed);
    const networks = new NetworkDirectory(nads, { cniConfDir: dir });
    assert.equal(errorOf(networks.get('team-a', 'blue')).code, CniCode.InvalidNetworkConfig);

    const path = join(dir, 'blue.conf');
    writeFileSync(path, conf('blue', 'br-aaaa'));
    assert.equal(unwrap(networks.get('team-a', 'blue')).plugins[0]?.bridge, 'br-aaaa');

    writeFileSync(path, conf('blue', 'br-bbbb'));
    const later = new Date(statSync(path).mtimeMs + 5000);
    utimesSync(path, later, later);
    assert.equal(unwrap(networks.get('team-a', 'blue')).plugins[0]?.bridge, 'br-bbbb');
  });
});
