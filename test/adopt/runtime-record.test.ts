/** The runtime's libcni record of its call to Multus: the network a sandbox was made under, and nothing else. */
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, it } from 'node:test';
import { runtimeAttachedUnder } from '../../src/adopt/runtime-record';

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
