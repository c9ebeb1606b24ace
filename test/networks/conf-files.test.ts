/** CNI config files on the node (the default network, NADs without spec.config) read only if regular and small. */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { err, CniCode, CniError } from '../../src/cni/errors';
import { CniConfDir } from '../../src/networks/conf-dir';
import { chooseDefaultNetwork } from '../../src/networks/default-network';
import type { NetworkSource } from '../../src/networks/source';

const dir = mkdtempSync(join(tmpdir(), 'plexus-conffiles-'));
after(() => rmSync(dir, { recursive: true, force: true }));
execFileSync('mkfifo', [join(dir, '05-fifo.conflist')]);
symlinkSync('/dev/zero', join(dir, '06-zero.conf'));
writeFileSync(join(dir, '07-huge.conf'), `{"name":"huge","pad":"${'x'.repeat(2 * 1024 * 1024)}"}`);
writeFileSync(join(dir, '10-good.conf'), JSON.stringify({ cniVersion: '1.0.0', name: 'good', type: 'bridge' }));

const none: NetworkSource = {
  get: () => err(new CniError(CniCode.InvalidNetworkConfig, 'none')),
  list: () => ({ networks: [], errors: [] }),
};

describe('CNI config files that are not plain, small files', { timeout: 10000 }, () => {
  it('byName skips a FIFO, /dev/zero and a 2 MiB file, and finds the good one', () => {
    const found = new CniConfDir(dir).byName('good');
    assert.equal(found.ok ? found.value.path : found.error.message, join(dir, '10-good.conf'));
    const missing = new CniConfDir(dir).byName('nosuch');
    assert.equal(
      missing.ok ? '' : String(missing.error.details),
      `skipped: ${join(dir, '07-huge.conf')} is larger than 1 MiB`,
    );
  });

  it('byId refuses /dev/zero behind a symlink', () => {
    const r = new CniConfDir(dir).byId('06-zero');
    assert.equal(
      r.ok ? 'ok' : r.error.message,
      `${join(dir, '06-zero.conf')} is a character device, not a regular file`,
    );
  });

  it('a default network file that is a FIFO is refused at once', () => {
    const r = chooseDefaultNetwork({
      configured: join(dir, '05-fifo.conflist'),
      annotations: {},
      podNamespace: 'default',
      networks: none,
      isolation: {},
    });
    assert.match(r.ok ? 'ok' : r.error.message, /05-fifo\.conflist cannot be read: it is a FIFO, not a regular file/);
  });
});
