/** What keeps a takeover from Multus waiting: a host-local store whose leases cannot all be read, each named. */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { hostLocalDirProblems, hostLocalStoreProblems } from '../../src/ipam/host-local-audit';
import { parseIpamConfig } from '../../src/ipam';
import { unwrap } from './fixture';

function withDir(body: (dir: string) => void): void {
  const root = mkdtempSync(join(tmpdir(), 'plexus-hlaudit-'));
  try {
    body(root);
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
}

describe("host-local's store before a takeover", () => {
  it('finds nothing wrong with what the reference plugin writes, or with no directory at all', () => {
    withDir((root) => {
      const dir = join(root, 'net');
      assert.deepEqual(hostLocalDirProblems(dir), []);
      mkdirSync(dir);
      writeFileSync(join(dir, '10.1.0.2'), 'c1\r\neth1');
      writeFileSync(join(dir, '10.1.0.3'), 'c-older-format');
      writeFileSync(join(dir, 'fd00::2'), 'c2\r\nnet1');
      writeFileSync(join(dir, 'last_reserved_ip.0'), '10.1.0.3');
      writeFileSync(join(dir, 'lock'), '');
      assert.deepEqual(hostLocalDirProblems(dir), []);
    });
  });

  it('names an address entry host-local would not write: another form of name, a FIFO, other text', () => {
    withDir((root) => {
      const dir = join(root, 'net');
      mkdirSync(dir);
      writeFileSync(join(dir, 'fd00:0::2'), 'c1\r\nnet1');
      execFileSync('mkfifo', [join(dir, '10.1.0.4')]);
      writeFileSync(join(dir, '10.1.0.5'), 'c1\nnet1\n10.1.0.5/24\n');
      assert.deepEqual(hostLocalDirProblems(dir), [
        `${join(dir, '10.1.0.4')} is a FIFO, not a regular file`,
        `${join(dir, '10.1.0.5')} is not a host-local lease (<containerID>\\r\\n<ifname>)`,
        `${join(dir, 'fd00:0::2')} is not named as host-local names an address`,
      ]);
    });
  });

  it("checks each host-local network's dataDir, or the default one, and no other IPAM's", () => {
    withDir((root) => {
      writeFileSync(join(root, 'a'), 'a file where the network a directory should be');
      const networks = [
        { network: 'a', config: unwrap(parseIpamConfig({ type: 'host-local', subnet: '10.1.0.0/24' })) },
        {
          network: 'b',
          config: unwrap(parseIpamConfig({ type: 'host-local', subnet: '10.2.0.0/24', dataDir: join(root, 'b-data') })),
        },
        { network: 'c', config: unwrap(parseIpamConfig({ type: 'static', addresses: [{ address: '10.3.0.1/24' }] })) },
      ];
      mkdirSync(join(root, 'b-data', 'b'), { recursive: true });
      execFileSync('mkfifo', [join(root, 'b-data', 'b', '10.2.0.9')]);
      assert.deepEqual(hostLocalStoreProblems(networks, root), [
        `${join(root, 'a')} is not a directory`,
        `${join(root, 'b-data', 'b', '10.2.0.9')} is a FIFO, not a regular file`,
      ]);
    });
  });
});
