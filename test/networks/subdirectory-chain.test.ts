/**
 * Multus v4.3.0's subdirectory chaining (libcni 1.3's plugins aggregated from a sibling folder): a network loaded from
 * a `.conflist` path runs the `.conf` files of `<dir>/<network name>/` after its own plugins. Real files on disk.
 */
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { err, ok } from '../../src/cni/errors';
import { chooseDefaultNetwork } from '../../src/networks/default-network';
import type { NetworkDefinition } from '../../src/networks/nad';
import { NetworkDirectory } from '../../src/networks/directory';

const noNads = {
  get: () => err(new Error('no NADs here') as never),
  list: () => ({ networks: [], errors: [] }),
};
const choose = (path: string) =>
  chooseDefaultNetwork({ configured: path, annotations: {}, podNamespace: 'default', networks: noNads, isolation: {} });
const typesOf = (r: ReturnType<typeof choose>): string[] => {
  assert.ok(r.ok, r.ok ? '' : r.error.message);
  return r.value.plugins.map((p) => `${p.type}${typeof p.tag === 'string' ? `:${p.tag}` : ''}`);
};
const json = (o: unknown): string => JSON.stringify(o);

describe('subdirectory chaining of a network loaded from a .conflist path', () => {
  const root = mkdtempSync(join(tmpdir(), 'plexus-subchain-'));
  after(() => rmSync(root, { recursive: true, force: true }));
  let n = 0;
  /** A fresh conf dir with `10-node.conflist` (network "node") and the given files under `node/`. */
  const confDir = (conflist: Record<string, unknown>, chain: Record<string, string>, file = '10-node.conflist') => {
    const dir = join(root, `d${n++}`);
    mkdirSync(join(dir, 'node'), { recursive: true });
    writeFileSync(join(dir, file), json({ cniVersion: '1.0.0', name: 'node', ...conflist }));
    for (const [name, text] of Object.entries(chain)) writeFileSync(join(dir, 'node', name), text);
    return { dir, path: join(dir, file) };
  };
  const tuning = (tag: string, extra = {}) =>
    json({ cniVersion: '0.4.0', name: 'other', type: 'tuning', tag, ...extra });

  it("runs the directory's .conf files after the network's plugins, in name order, under the network's name and cniVersion", () => {
    const { dir, path } = confDir(
      { plugins: [{ type: 'bridge' }] },
      { 'b.conf': tuning('b'), 'a.conf': tuning('a'), 'c.json': tuning('c'), 'd.conflist': tuning('d') },
    );
    mkdirSync(join(dir, 'node', 'e.conf'));
    const r = choose(path);
    assert.deepEqual(typesOf(r), ['bridge', 'tuning:a', 'tuning:b']);
    const chained = (r as { value: NetworkDefinition }).value.plugins[1]!;
    assert.equal(chained.name, 'node');
    assert.equal(chained.cniVersion, '1.0.0');
  });

  it("follows the installer's link to the file Multus named, and chains from beside that file", () => {
    const { dir, path } = confDir({ plugins: [{ type: 'bridge' }] }, { '10-sysctl.conf': tuning('s') });
    const link = join(dir, 'linked', 'default-network');
    mkdirSync(join(dir, 'linked'));
    symlinkSync(path, link);
    assert.deepEqual(typesOf(choose(link)), ['bridge', 'tuning:s']);
  });

  it('takes every plugin from the directory when the conflist has none of its own', () => {
    const { path } = confDir({}, { '1.conf': json({ type: 'bridge' }), '2.conf': tuning('t') });
    assert.deepEqual(typesOf(choose(path)), ['bridge', 'tuning:t']);
    // One plugin's config in a .conflist file, which plexusd has always read as that plugin, keeps it first.
    const single = confDir({ type: 'bridge' }, { '1.conf': tuning('t') });
    assert.deepEqual(typesOf(choose(single.path)), ['bridge', 'tuning:t']);
  });

  it('leaves the directory alone with loadOnlyInlinedPlugins, and for a .conf file, as Multus does', () => {
    const inlined = confDir({ loadOnlyInlinedPlugins: true, plugins: [{ type: 'bridge' }] }, { 'a.conf': tuning('a') });
    assert.deepEqual(typesOf(choose(inlined.path)), ['bridge']);
    const conf = join(root, `conf${n++}`);
    mkdirSync(join(conf, 'node'), { recursive: true });
    writeFileSync(join(conf, '10-node.conf'), json({ cniVersion: '1.0.0', name: 'node', type: 'bridge' }));
    writeFileSync(join(conf, 'node', 'a.conf'), tuning('a'));
    assert.deepEqual(typesOf(choose(join(conf, '10-node.conf'))), ['bridge']);
  });

  it('refuses the network, naming the file, when a chained file is broken or has no type, or no plugin is left', () => {
    const broken = confDir({ plugins: [{ type: 'bridge' }] }, { 'a.conf': '{not json' });
    const r1 = choose(broken.path);
    assert.ok(!r1.ok);
    assert.equal(r1.error.code, 7);
    assert.match(r1.error.message, /node\/a\.conf/);
    const typeless = confDir({ plugins: [{ type: 'bridge' }] }, { 'a.conf': json({ name: 'x' }) });
    const r2 = choose(typeless.path);
    assert.ok(!r2.ok);
    assert.match(r2.error.message, /node\/a\.conf.*"type"/);
    const empty = confDir({}, {});
    const r3 = choose(empty.path);
    assert.ok(!r3.ok);
    assert.match(r3.error.message, /no plugins/);
  });

  it('refuses a network name that is no file name before it goes into a path', () => {
    const dir = join(root, `bad${n++}`);
    mkdirSync(dir);
    const path = join(dir, '10-x.conflist');
    writeFileSync(path, json({ cniVersion: '1.0.0', name: '../x', plugins: [{ type: 'bridge' }] }));
    const r = choose(path);
    assert.ok(!r.ok);
    assert.match(r.error.message, /"\.\.\/x" is not a valid network name/);
  });

  it('is not applied to a NAD whose config comes from a file: Multus v4.3.0 runs only the bytes of that file', () => {
    const { dir } = confDir({ plugins: [{ type: 'bridge' }] }, { 'a.conf': tuning('a') });
    const nads = join(dir, 'nads');
    mkdirSync(nads);
    writeFileSync(
      join(nads, 'node.yaml'),
      json({ apiVersion: 'k8s.cni.cncf.io/v1', kind: 'NetworkAttachmentDefinition', metadata: { name: 'node' } }),
    );
    const nad = new NetworkDirectory(nads, { cniConfDir: dir }).get('default', 'node');
    assert.deepEqual(typesOf(nad.ok ? ok(nad.value) : nad), ['bridge']);
  });
});
