/** What the lease store meets on disk that is not a lease file: it is skipped with a warning, never waited on. */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdir, symlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { Ipam, IPAM_POOL_EXHAUSTED } from '../../src/ipam';
import { LeaseStore } from '../../src/ipam/store';
import { config, errorOf, withStoreDir } from './fixture';

const range = config({
  type: 'host-local',
  ranges: [[{ subnet: '10.1.0.0/24', rangeStart: '10.1.0.5', rangeEnd: '10.1.0.7' }]],
});

/** A network directory holding a FIFO at .5, a directory at .6, a symlink at .7 and a real lease at .8. */
async function strangeEntries(dir: string): Promise<void> {
  const net = join(dir, 'net1');
  await mkdir(net, { recursive: true, mode: 0o700 });
  execFileSync('mkfifo', [join(net, '10.1.0.5')]);
  await mkdir(join(net, '10.1.0.6'));
  await writeFile(join(dir, 'elsewhere'), 'c9\neth0\n10.1.0.7/24\n\n');
  await symlink(join(dir, 'elsewhere'), join(net, '10.1.0.7'));
  await writeFile(join(net, '10.1.0.8'), 'c8\neth0\n10.1.0.8/24\n\n');
  execFileSync('mkfifo', [join(net, 'last_reserved_ip.0')]);
}

describe('entries of the lease store that are not lease files', { timeout: 10000 }, () => {
  for (const sync of [true, false]) {
    it(`a FIFO, a directory and a symlink are skipped with a warning each (sync ${sync})`, async () => {
      await withStoreDir(async (dir) => {
        await strangeEntries(dir);
        const skipped: string[] = [];
        const store = await LeaseStore.open(dir, {
          sync,
          onSkipped: (file, reason) => skipped.push(`${file} ${reason}`),
        });
        assert.deepEqual(
          store.all().map((s) => s.lease.address),
          ['10.1.0.8/24'],
        );
        assert.deepEqual(skipped.sort(), [
          `${join(dir, 'net1', '10.1.0.5')} is a FIFO, not a regular file`,
          `${join(dir, 'net1', '10.1.0.6')} is a directory, not a regular file`,
          `${join(dir, 'net1', '10.1.0.7')} is a symbolic link, not a regular file`,
          `${join(dir, 'net1', 'last_reserved_ip.0')} is a FIFO, not a regular file`,
        ]);
      });
    });

    it(`their addresses are never handed out, and allocation does not wait on the FIFO (sync ${sync})`, async () => {
      await withStoreDir(async (dir) => {
        await strangeEntries(dir);
        const ipam = await Ipam.open(dir, { sync, onSkipped: () => undefined });
        const r = await ipam.allocate({ network: 'net1', containerId: 'c1', ifname: 'eth0', config: range });
        assert.equal(errorOf(r).code, IPAM_POOL_EXHAUSTED, 'every address of the range is taken');
      });
    });
  }

  it('a lease file over 64 KiB is skipped with a warning', async () => {
    await withStoreDir(async (dir) => {
      await mkdir(join(dir, 'net1'), { recursive: true });
      await writeFile(join(dir, 'net1', '10.1.0.9'), `c1\neth0\n10.1.0.9/24\n\n${'x'.repeat(70000)}\n`);
      const skipped: string[] = [];
      const store = await LeaseStore.open(dir, { onSkipped: (file, reason) => skipped.push(`${file} ${reason}`) });
      assert.deepEqual(store.all(), []);
      assert.deepEqual(skipped, [`${join(dir, 'net1', '10.1.0.9')} is larger than 64 KiB`]);
    });
  });
});
