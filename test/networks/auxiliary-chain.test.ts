/**
 * Multus's auxiliaryCNIChainName: a passthru conflist named after the chain, whose plugins come from the chain's
 * directory (`<dir of clusterNetwork>/<chain name>/*.conf`), run for every pod when the directory has any.
 */
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { auxiliaryChainNetwork, isAuxiliaryChain } from '../../src/networks/auxiliary-chain';

describe('the auxiliary chain (Multus auxiliaryCNIChainName)', () => {
  const root = mkdtempSync(join(tmpdir(), 'plexus-auxchain-'));
  after(() => rmSync(root, { recursive: true, force: true }));

  it("is a delegated network of the directory's .conf files, named after it, in the runtime's cniVersion", () => {
    const dir = join(root, 'vendor-cni-chain');
    mkdirSync(dir);
    writeFileSync(join(dir, 'b.conf'), JSON.stringify({ cniVersion: '0.4.0', name: 'x', type: 'tuning', tag: 'b' }));
    writeFileSync(join(dir, 'a.conf'), JSON.stringify({ cniVersion: '0.4.0', name: 'y', type: 'sbr' }));
    const r = auxiliaryChainNetwork(dir, '1.1.0');
    assert.ok(r.ok && r.value, r.ok ? '' : r.error.message);
    assert.deepEqual(
      r.value.plugins.map((p) => [p.type, p.name, p.cniVersion]),
      [
        ['sbr', 'vendor-cni-chain', '1.1.0'],
        ['tuning', 'vendor-cni-chain', '1.1.0'],
      ],
    );
    assert.equal(r.value.cniName, 'vendor-cni-chain');
    assert.ok(isAuxiliaryChain(r.value.key));
    assert.equal(r.value.annotations['plexus.io/delegate'], 'true');
  });

  it('is nothing when the directory is missing or has no .conf file, as Multus then adds no delegate', () => {
    const none = auxiliaryChainNetwork(join(root, 'missing'), '1.0.0');
    assert.ok(none.ok && none.value === undefined);
    mkdirSync(join(root, 'empty'));
    writeFileSync(join(root, 'empty', 'x.json'), '{}');
    const empty = auxiliaryChainNetwork(join(root, 'empty'), '1.0.0');
    assert.ok(empty.ok && empty.value === undefined);
  });

  it('fails, naming the file, when a chained file is broken (Multus drops the whole chain silently)', () => {
    const dir = join(root, 'broken');
    mkdirSync(dir);
    writeFileSync(join(dir, 'a.conf'), '{');
    const r = auxiliaryChainNetwork(dir, '1.0.0');
    assert.ok(!r.ok);
    assert.match(r.error.message, /auxiliary chain .*broken\/a\.conf is not valid JSON/);
  });
});
