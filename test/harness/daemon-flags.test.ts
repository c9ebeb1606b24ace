/** The tests' builder of plexusd's command line (test/support/daemon-flags.ts), and plexusd's own reading of it. */
import assert from 'node:assert/strict';
import { it } from 'node:test';
import { loadDaemonConfig } from '../../src/node/config';
import { daemonFlags } from '../support/daemon-flags';

it('writes each named setting as its flag, in order: lists comma-separated, numbers and booleans as text', () => {
  assert.deepEqual(
    daemonFlags({
      nodeName: 'n1',
      cniBinDir: undefined,
      drainSeconds: 0.5,
      dra: true,
      globalNamespaces: ['a', 'b'],
      config: '/etc/plexus.yaml',
    }),
    [
      '--node-name',
      'n1',
      '--drain-seconds',
      '0.5',
      '--dra',
      'true',
      '--global-namespaces',
      'a,b',
      '--config',
      '/etc/plexus.yaml',
    ],
  );
});

it('gives plexusd flags it reads back as the settings named', () => {
  const loaded = loadDaemonConfig(
    daemonFlags({
      socket: '/run/p/plexus.sock',
      maxConcurrent: 3,
      namespaceIsolation: true,
      systemNamespaces: ['x', 'y'],
    }),
  );
  assert.equal(loaded.kind, 'config', JSON.stringify(loaded));
  if (loaded.kind !== 'config') return;
  const { socket, maxConcurrent, namespaceIsolation, systemNamespaces } = loaded.config;
  assert.deepEqual(
    { socket, maxConcurrent, namespaceIsolation, systemNamespaces },
    { socket: '/run/p/plexus.sock', maxConcurrent: 3, namespaceIsolation: true, systemNamespaces: ['x', 'y'] },
  );
});
