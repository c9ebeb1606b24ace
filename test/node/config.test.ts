import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadDaemonConfig, USAGE, type DaemonConfig } from '../../src/node/config';

const DEFAULTS: DaemonConfig = {
  socket: '/run/plexus/plexus.sock',
  stateDir: '/var/lib/plexus',
  networksDir: '/etc/plexus/networks.d',
  cniBinDir: '/opt/cni/bin',
  cniConfDir: '/etc/cni/net.d',
  naming: 'multus',
  selectionAnnotation: true,
  defaultNetworks: [],
  maxConcurrent: 16,
  delegateShare: 8,
  maxDelegateExecs: 32,
  kernelThreads: 1,
  maxQueued: 1024,
  stateSync: false,
  drainSeconds: 20,
  kubeApiQps: 50,
  kubeApiBurst: 100,
  kubeApiTimeout: 10,
  ipamReconcileSeconds: 30,
  ipamNodeGraceSeconds: 600,
  nodeLeaseSeconds: 40,
  namespaceIsolation: false,
  hotPlug: true,
  globalNamespaces: [],
  systemNamespaces: [],
  takeOverMultus: false,
  installCniVersion: 'auto',
  hostLocalDataDir: '/var/lib/cni/networks',
  maxInterfacesPerPod: 32,
  maxAnnotationBytes: 32768,
  maxNodeAttachments: 8192,
  spoolScanSeconds: 5,
  devicePluginDir: '/var/lib/kubelet/device-plugins',
  podResourcesSocket: '/var/lib/kubelet/pod-resources/kubelet.sock',
  deviceInfoDir: '/var/run/k8s.cni.cncf.io/devinfo',
  ovsdbSocket: '/var/run/openvswitch/db.sock',
  orphanSweepSeconds: 60,
  switchResyncSeconds: 10,
  logLevel: 'info',
};

function configOf(argv: readonly string[]): DaemonConfig {
  const outcome = loadDaemonConfig(argv);
  if (outcome.kind !== 'config') assert.fail(`expected a config, got ${JSON.stringify(outcome)}`);
  return outcome.config;
}

function errorOf(argv: readonly string[]): string {
  const outcome = loadDaemonConfig(argv);
  if (outcome.kind !== 'error') assert.fail(`expected an error, got ${JSON.stringify(outcome)}`);
  return outcome.message;
}

/** A config file in a fresh directory, removed even when the test fails. */
function withFile(name: string, text: string, body: (path: string) => void): void {
  const dir = mkdtempSync(join(tmpdir(), 'plexus-config-'));
  try {
    const path = join(dir, name);
    writeFileSync(path, text);
    body(path);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

test('no arguments give the defaults', () => {
  assert.deepEqual(configOf([]), DEFAULTS);
});

/** Each flag, a value to give it, and the key and parsed value it must produce. */
const FLAGS: readonly [string, string, keyof DaemonConfig, unknown][] = [
  ['--socket', '/tmp/p/plexus.sock', 'socket', '/tmp/p/plexus.sock'],
  ['--state-dir', '/tmp/p/state', 'stateDir', '/tmp/p/state'],
  ['--networks-dir', '/tmp/p/networks', 'networksDir', '/tmp/p/networks'],
  ['--default-network', 'team-a/blue', 'defaultNetwork', 'team-a/blue'],
  ['--cni-bin-dir', '/usr/libexec/cni', 'cniBinDir', '/usr/libexec/cni'],
  ['--cni-conf-dir', '/etc/cni/alt.d', 'cniConfDir', '/etc/cni/alt.d'],
  ['--naming', 'eth', 'naming', 'eth'],
  ['--selection-annotation', 'false', 'selectionAnnotation', false],
  ['--default-networks', 'kube-system/mgmt, storage@st0', 'defaultNetworks', ['kube-system/mgmt', 'storage@st0']],
  ['--max-concurrent', '4', 'maxConcurrent', 4],
  ['--max-queued', '0', 'maxQueued', 0],
  ['--kernel-threads', '3', 'kernelThreads', 3],
  ['--state-sync', 'true', 'stateSync', true],
  ['--host-link-group', '77', 'hostLinkGroup', 77],
  ['--spool-scan-seconds', '0.5', 'spoolScanSeconds', 0.5],
  ['--log-level', 'debug', 'logLevel', 'debug'],
];

for (const [flag, value, key, parsed] of FLAGS) {
  test(`${flag} VALUE and ${flag}=VALUE set ${key}`, () => {
    assert.deepEqual(configOf([flag, value]), { ...DEFAULTS, [key]: parsed });
    assert.deepEqual(configOf([`${flag}=${value}`]), { ...DEFAULTS, [key]: parsed });
  });
}

test('a value may itself contain "="', () => {
  assert.equal(configOf(['--socket=/run/a=b/plexus.sock']).socket, '/run/a=b/plexus.sock');
});

test('a later flag wins over an earlier one', () => {
  assert.equal(configOf(['--log-level', 'debug', '--log-level=warn']).logLevel, 'warn');
});

test('--config reads camelCase keys from a YAML file', () => {
  withFile(
    'plexusd.yaml',
    'socket: /tmp/p/plexus.sock\nmaxConcurrent: 8\nstateSync: true\ndefaultNetwork: team-a/blue\nhostLinkGroup: 9\n',
    (path) => {
      assert.deepEqual(configOf(['--config', path]), {
        ...DEFAULTS,
        socket: '/tmp/p/plexus.sock',
        maxConcurrent: 8,
        stateSync: true,
        defaultNetwork: 'team-a/blue',
        hostLinkGroup: 9,
      });
    },
  );
});

test('--config reads a JSON file', () => {
  withFile(
    'plexusd.json',
    JSON.stringify({ stateDir: '/tmp/p/state', logLevel: 'warn', spoolScanSeconds: 2 }),
    (path) => {
      assert.deepEqual(configOf([`--config=${path}`]), {
        ...DEFAULTS,
        stateDir: '/tmp/p/state',
        logLevel: 'warn',
        spoolScanSeconds: 2,
      });
    },
  );
});

test('an empty config file gives the defaults', () => {
  withFile('plexusd.yaml', '', (path) => {
    assert.deepEqual(configOf(['--config', path]), DEFAULTS);
  });
});

test('flags win over the config file, wherever --config appears', () => {
  withFile('plexusd.yaml', 'logLevel: warn\nmaxConcurrent: 8\n', (path) => {
    assert.deepEqual(configOf(['--log-level', 'debug', '--config', path]), {
      ...DEFAULTS,
      logLevel: 'debug',
      maxConcurrent: 8,
    });
    assert.deepEqual(configOf(['--config', path, '--log-level', 'debug']), {
      ...DEFAULTS,
      logLevel: 'debug',
      maxConcurrent: 8,
    });
  });
});

test('an unknown flag is an error naming it', () => {
  assert.equal(errorOf(['--sockets', '/run/x.sock']), 'unknown flag --sockets');
  assert.equal(errorOf(['--frob=1']), 'unknown flag --frob');
});

test('an argument named like an Object.prototype member is an unknown flag', () => {
  assert.equal(errorOf(['constructor', 'x']), 'unknown flag constructor');
  assert.equal(errorOf(['toString=x']), 'unknown flag toString');
});

test('a flag without a value is an error naming it', () => {
  assert.equal(errorOf(['--socket']), '--socket needs a value');
  assert.equal(errorOf(['--log-level', 'debug', '--config']), '--config needs a value');
});

test('a flag followed by another flag is missing its value', () => {
  assert.equal(errorOf(['--socket', '--log-level', 'debug']), '--socket needs a value');
});

test('an empty --config= is an error', () => {
  assert.equal(loadDaemonConfig(['--config=']).kind, 'error');
});

test('an empty numeric value is an error', () => {
  assert.match(errorOf(['--max-queued=']), /--max-queued/);
});

const invalid: readonly [string[], string][] = [
  [['--socket', 'run/plexus.sock'], 'invalid setting --socket (socket): must be an absolute path'],
  [['--state-dir', 'state'], 'invalid setting --state-dir (stateDir): must be an absolute path'],
  [['--networks-dir', './networks'], 'invalid setting --networks-dir (networksDir): must be an absolute path'],
  [['--cni-bin-dir', 'bin'], 'invalid setting --cni-bin-dir (cniBinDir): must be an absolute path'],
  [['--max-concurrent', '0'], 'invalid setting --max-concurrent (maxConcurrent): '],
  [['--max-concurrent', '1025'], 'invalid setting --max-concurrent (maxConcurrent): '],
  [['--max-concurrent', '2.5'], 'invalid setting --max-concurrent (maxConcurrent): '],
  [['--max-queued', '-1'], 'invalid setting --max-queued (maxQueued): '],
  [['--kernel-threads', '9'], 'invalid setting --kernel-threads (kernelThreads): '],
  [['--state-sync', 'maybe'], 'invalid setting --state-sync (stateSync): '],
  [['--host-link-group', '0'], 'invalid setting --host-link-group (hostLinkGroup): '],
  [['--spool-scan-seconds', 'soon'], 'invalid setting --spool-scan-seconds (spoolScanSeconds): '],
  [['--log-level', 'loud'], 'invalid setting --log-level (logLevel): '],
  [['--default-network='], 'invalid setting --default-network (defaultNetwork): '],
];

for (const [argv, prefix] of invalid) {
  test(`${argv.join(' ')} is an error naming the flag`, () => {
    const message = errorOf(argv);
    assert.ok(message.startsWith(prefix), message);
  });
}

test('an invalid value in the config file is an error naming the setting', () => {
  withFile('plexusd.yaml', 'maxConcurrent: 0\n', (path) => {
    assert.match(errorOf(['--config', path]), /maxConcurrent/);
  });
});

test('an unknown key in the config file is an error naming it', () => {
  withFile('plexusd.yaml', 'socket: /run/p.sock\nmax_concurrent: 4\n', (path) => {
    assert.match(errorOf(['--config', path]), /unknown setting max_concurrent in /);
  });
});

test('a config file that is not a mapping is an error', () => {
  withFile('plexusd.yaml', '- socket\n- /run/p.sock\n', (path) => {
    assert.equal(errorOf(['--config', path]), `${path}: must be a mapping of settings`);
  });
});

test('an unreadable or malformed config file is an error naming it', () => {
  withFile('plexusd.yaml', 'socket: [unclosed\n', (path) => {
    assert.ok(errorOf(['--config', path]).startsWith(`cannot read config file ${path}: `));
    assert.ok(errorOf(['--config', `${path}.missing`]).startsWith(`cannot read config file ${path}.missing: `));
  });
});

test('--help and -h ask for the usage text, even after other flags', () => {
  assert.deepEqual(loadDaemonConfig(['--help']), { kind: 'help' });
  assert.deepEqual(loadDaemonConfig(['-h']), { kind: 'help' });
  assert.deepEqual(loadDaemonConfig(['--log-level', 'debug', '--help']), { kind: 'help' });
});

test('the usage text lists every flag', () => {
  for (const [flag] of FLAGS) assert.ok(USAGE.includes(`${flag} `), flag);
  assert.ok(USAGE.includes('--config FILE'));
});
