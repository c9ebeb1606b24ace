/** The runtime's libcni record of its call to Multus: the network a sandbox was made under, and nothing else. */
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, it } from 'node:test';
import { removeRuntimeRecordsOfMultus, runtimeAttachedUnder } from '../../src/adopt/runtime-record';

const dir = mkdtempSync(join(tmpdir(), 'plexus-runtime-record-'));
after(() => rmSync(dir, { recursive: true, force: true }));
mkdirSync(join(dir, 'results'));

/** libcni's record of a call under `network`, holding a config named `configName`, written at `file`. */
function record(file: string, network: string, configName = network): void {
  const config = Buffer.from(JSON.stringify({ cniVersion: '1.0.0', name: configName, type: 'multus' }));
  const body = { kind: 'cniCacheV1', containerId: 'c1', ifName: 'eth0', networkName: network };
  writeFileSync(join(dir, file), JSON.stringify({ ...body, config: config.toString('base64') }));
}

it('names the network whose record of the container and interface the runtime keeps', () => {
  record('results/multus-cni-network-c1-eth0', 'multus-cni-network');
  assert.equal(runtimeAttachedUnder(dir, 'multus-cni-network', 'c1', 'eth0'), true);
  assert.equal(runtimeAttachedUnder(dir, 'other-net', 'c1', 'eth0'), false);
  assert.equal(runtimeAttachedUnder(dir, 'multus-cni-network', 'c2', 'eth0'), false);
  assert.equal(runtimeAttachedUnder(dir, 'multus-cni-network', 'c1', 'net1'), false);
});

it('does not take a record whose config is of another network for this one', () => {
  record('results/renamed-c1-eth0', 'renamed', 'multus-cni-network');
  assert.equal(runtimeAttachedUnder(dir, 'renamed', 'c1', 'eth0'), false);
});

it('never reads outside the records directory, whatever the names hold', () => {
  // A record one level up that names the network `../x`: only the name check keeps it from being read.
  record('x-c1-eth0', '../x');
  assert.equal(runtimeAttachedUnder(dir, '../x', 'c1', 'eth0'), false);
  assert.equal(runtimeAttachedUnder(dir, '', 'c1', 'eth0'), false);
});

/** A runtime cache dir of its own holding one record per entry: file name and the config the call ran. */
function runtimeCache(records: Record<string, Record<string, unknown>>): string {
  const cache = mkdtempSync(join(dir, 'cache-'));
  mkdirSync(join(cache, 'results'));
  for (const [file, config] of Object.entries(records)) {
    const encoded = Buffer.from(JSON.stringify({ cniVersion: '1.0.0', ...config })).toString('base64');
    writeFileSync(join(cache, 'results', file), JSON.stringify({ kind: 'cniCacheV1', config: encoded }));
  }
  return cache;
}

it("removes the runtime's records of its calls to Multus for the container's interface, a conf or a conflist", () => {
  const cache = runtimeCache({
    'multus-cni-network-c1-eth0': { name: 'multus-cni-network', type: 'multus-shim' },
    'thin-c1-eth0': { name: 'thin', plugins: [{ type: 'multus' }] },
  });
  const r = removeRuntimeRecordsOfMultus(cache, 'c1', 'eth0');
  assert.deepEqual(r.kept, []);
  assert.equal(r.removed.length, 2);
  assert.deepEqual(readdirSync(join(cache, 'results')), []);
});

it("leaves every other record: Plexus's, another container's or interface's, one whose config names another network", () => {
  const cache = runtimeCache({
    'plexus-c1-eth0': { name: 'plexus', plugins: [{ type: 'plexus-cni' }] },
    'multus-cni-network-c2-eth0': { name: 'multus-cni-network', type: 'multus-shim' },
    'multus-cni-network-c1-net1': { name: 'multus-cni-network', type: 'multus-shim' },
    'renamed-c1-eth0': { name: 'multus-cni-network', type: 'multus-shim' },
  });
  assert.deepEqual(removeRuntimeRecordsOfMultus(cache, 'c1', 'eth0'), { removed: [], kept: [] });
  assert.equal(readdirSync(join(cache, 'results')).length, 4);
});

it('removes nothing and fails on nothing when the runtime has no records directory', () => {
  const cache = mkdtempSync(join(dir, 'empty-'));
  assert.deepEqual(removeRuntimeRecordsOfMultus(cache, 'c1', 'eth0'), { removed: [], kept: [] });
  assert.equal(existsSync(join(cache, 'results')), false);
});
