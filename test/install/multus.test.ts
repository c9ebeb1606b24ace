/**
 * A node running Multus (thin or thick), on private directories: plexus-install reads Multus's config as Multus does,
 * carries each setting over to plexusd or names why it cannot, refuses what it cannot read without changing anything,
 * and plexusd's takeover moves Multus's config aside so that uninstall can put the very same file back.
 */
import assert from 'node:assert/strict';
import {
  chmodSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readlinkSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, it } from 'node:test';
import pino from 'pino';
import { findPrimaryConfig } from '../../src/install/cni-conf';
import { listConfFiles } from '../../src/install/conf-files';
import { runInstall } from '../../src/install/main';
import { readMultus, resolveClusterNetwork } from '../../src/install/multus-config';
import { carryOver } from '../../src/install/multus-settings';
import { moveMultusAside, MOVED_ASIDE_SUFFIX, restoreMultus } from '../../src/install/multus-takeover';
import { loadDaemonConfig } from '../../src/node/config';

const silent = pino({ level: 'silent' });
const podnet = JSON.stringify({
  cniVersion: '1.0.0',
  name: 'podnet',
  plugins: [{ type: 'bridge', bridge: 'cni0', ipam: { type: 'host-local', ranges: [[{ subnet: '10.99.0.0/24' }]] } }],
});
/** A thin Multus config as Multus's docs/configuration.md writes one. */
const thin = (extra: Record<string, unknown>): string =>
  JSON.stringify({
    cniVersion: '1.0.0',
    name: 'multus-cni-network',
    type: 'multus',
    kubeconfig: '/etc/cni/net.d/multus.d/multus.kubeconfig',
    ...extra,
  });
/** What the thick daemon generates (MultusConf.Generate): the shim's type, the primary config as clusterNetwork. */
const thickShim = (clusterNetwork: string, extra: Record<string, unknown> = {}): string =>
  JSON.stringify({
    cniVersion: '1.0.0',
    name: 'multus-cni-network',
    type: 'multus-shim',
    clusterNetwork,
    capabilities: { portMappings: true },
    logLevel: 'verbose',
    logToStderr: true,
    ...extra,
  });

/** Captures what a logger was told, to check that settings are named. */
function recordingLogger(): { log: pino.Logger; lines: () => Record<string, unknown>[] } {
  const chunks: string[] = [];
  const log = pino({ level: 'info' }, { write: (s: string) => void chunks.push(s) });
  return {
    log,
    lines: () =>
      chunks
        .join('')
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l) as Record<string, unknown>),
  };
}

describe('a node running Multus', () => {
  let dir = '';
  let confDir = '';
  let stateDir = '';
  let daemonConfig = '';
  const installArgs = (): string[] => [
    'install',
    '--cni-conf-dir',
    confDir,
    '--cni-bin-dir',
    join(dir, 'bin'),
    '--shim',
    join(dir, 'shim'),
    '--default-network-link',
    join(stateDir, 'default-network'),
    '--imported-config',
    join(stateDir, 'imported-config.json'),
    '--multus-daemon-config',
    daemonConfig,
    '--wait-seconds',
    '1',
  ];
  const imported = (): Record<string, unknown> =>
    JSON.parse(readFileSync(join(stateDir, 'imported-config.json'), 'utf8')) as Record<string, unknown>;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'plexus-multus-'));
    confDir = join(dir, 'net.d');
    stateDir = join(dir, 'state');
    daemonConfig = join(confDir, 'multus.d', 'daemon-config.json');
    mkdirSync(join(confDir, 'multus.d'), { recursive: true });
    writeFileSync(join(dir, 'shim'), '#!/bin/sh\n');
    writeFileSync(join(confDir, '10-podnet.conflist'), podnet);
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  describe('reading its config', () => {
    it("gives thin Multus's settings with Multus's defaults where the file says nothing", () => {
      writeFileSync(join(confDir, '00-multus.conf'), thin({ clusterNetwork: 'podnet' }));
      const r = readMultus(listConfFiles(confDir)!, daemonConfig);
      assert.ok(r.ok && r.value);
      assert.equal(r.value.mode, 'thin');
      assert.equal(r.value.configFile, join(confDir, '00-multus.conf'));
      const s = r.value.settings;
      assert.deepEqual(
        [s.multusNamespace, s.globalNamespaces, s.systemNamespaces, s.confDir, s.namespaceIsolation],
        ['kube-system', ['default'], ['kube-system'], '/etc/cni/multus/net.d', false],
      );
    });

    it("lays thick Multus's daemon config over the shim's config, key by key, as the daemon does on each call", () => {
      writeFileSync(
        join(confDir, '00-multus.conf'),
        thickShim(join(confDir, '10-podnet.conflist'), { namespaceIsolation: false }),
      );
      writeFileSync(
        daemonConfig,
        JSON.stringify({
          chrootDir: '/hostroot',
          namespaceIsolation: true,
          globalNamespaces: 'default, shared',
          socketDir: '/host/run/multus/',
        }),
      );
      const r = readMultus(listConfFiles(confDir)!, daemonConfig);
      assert.ok(r.ok && r.value);
      assert.equal(r.value.mode, 'thick');
      assert.equal(r.value.daemonConfigFile, daemonConfig);
      assert.equal(r.value.settings.namespaceIsolation, true);
      assert.deepEqual(r.value.settings.globalNamespaces, ['default', 'shared']);
      assert.equal(r.value.settings.clusterNetwork, join(confDir, '10-podnet.conflist'));
    });

    it('is a problem, naming both files, when there are two Multus configs', () => {
      writeFileSync(join(confDir, '00-multus.conf'), thin({ clusterNetwork: 'podnet' }));
      writeFileSync(
        join(confDir, '01-multus-old.conflist'),
        JSON.stringify({ cniVersion: '1.0.0', name: 'm', plugins: [JSON.parse(thin({ clusterNetwork: 'x' }))] }),
      );
      const r = readMultus(listConfFiles(confDir)!, daemonConfig);
      assert.ok(!r.ok);
      assert.match(r.error.message, /2 Multus configs .*00-multus\.conf, 01-multus-old\.conflist/);
    });

    it('is a problem when a setting has the wrong type, naming the setting', () => {
      writeFileSync(join(confDir, '00-multus.conf'), thin({ clusterNetwork: 'podnet', defaultNetworks: 'not-a-list' }));
      const r = readMultus(listConfFiles(confDir)!, daemonConfig);
      assert.ok(!r.ok);
      assert.match(r.error.message, /"defaultNetworks"/);
    });

    it('is a problem when it has neither clusterNetwork nor delegates (Multus refuses it too)', () => {
      writeFileSync(join(confDir, '00-multus.conf'), thin({}));
      const r = readMultus(listConfFiles(confDir)!, daemonConfig);
      assert.ok(!r.ok);
      assert.match(r.error.message, /neither clusterNetwork nor delegates/);
    });

    it("is not the node's primary config: the first other config is", () => {
      writeFileSync(join(confDir, '00-multus.conf'), thickShim(join(confDir, '10-podnet.conflist')));
      const r = findPrimaryConfig(confDir);
      assert.ok(r.ok && r.value);
      assert.equal(r.value.path, join(confDir, '10-podnet.conflist'));
    });
  });

  describe('its cluster network', () => {
    const settingsOf = (extra: Record<string, unknown>) => {
      writeFileSync(join(confDir, '00-multus.conf'), thin(extra));
      const r = readMultus(listConfFiles(confDir)!, daemonConfig);
      assert.ok(r.ok && r.value);
      return r.value.settings;
    };

    it('is a NAD in multusNamespace when given by name', () => {
      const r = resolveClusterNetwork(settingsOf({ clusterNetwork: 'podnet', multusNamespace: 'net-system' }), (d) =>
        listConfFiles(d),
      );
      assert.deepEqual(r, { ok: true, value: { kind: 'nad', reference: 'net-system/podnet' } });
    });

    it("notes a config of that name in Multus's confDir, which Multus falls back to", () => {
      const r = resolveClusterNetwork(settingsOf({ clusterNetwork: 'podnet', confDir }), (d) => listConfFiles(d));
      assert.deepEqual(r, {
        ok: true,
        value: { kind: 'nad', reference: 'kube-system/podnet', alsoFile: join(confDir, '10-podnet.conflist') },
      });
    });

    it('is the first config of a directory, or a file, when given as a path', () => {
      const inDir = resolveClusterNetwork(settingsOf({ clusterNetwork: confDir }), (d) => listConfFiles(d));
      assert.ok(inDir.ok && inDir.value.kind === 'file');
      assert.equal(
        inDir.value.path,
        join(confDir, '00-multus.conf'),
        "Multus takes the directory's first .conf or .conflist",
      );
      const file = resolveClusterNetwork(settingsOf({ clusterNetwork: join(confDir, '10-podnet.conflist') }), (d) =>
        listConfFiles(d),
      );
      assert.deepEqual(file, { ok: true, value: { kind: 'file', path: join(confDir, '10-podnet.conflist') } });
    });

    it('is a problem when the path does not exist', () => {
      const r = resolveClusterNetwork(settingsOf({ clusterNetwork: join(dir, 'gone.conflist') }), (d) =>
        listConfFiles(d),
      );
      assert.ok(!r.ok);
      assert.match(r.error.message, /gone\.conflist does not exist/);
    });

    it('is the first delegate when there is no clusterNetwork', () => {
      const r = resolveClusterNetwork(settingsOf({ delegates: [JSON.parse(podnet)] }), (d) => listConfFiles(d));
      assert.ok(r.ok && r.value.kind === 'inline');
      assert.equal(r.value.config.name, 'podnet');
    });
  });

  describe('carrying its settings over', () => {
    it('carries each setting with a Plexus equivalent and names every other one', () => {
      writeFileSync(
        join(confDir, '00-multus.conf'),
        thin({
          clusterNetwork: 'podnet',
          defaultNetworks: ['sidecar', '/etc/cni/multus/extra.conf'],
          namespaceIsolation: true,
          globalNamespaces: 'default,shared',
          systemNamespaces: ['kube-system', 'infra'],
          multusNamespace: 'net-system',
          readinessindicatorfile: '/run/flannel/subnet.env',
          binDir: '/opt/multus/bin',
          logFile: '/var/log/multus.log',
          auxiliaryCNIChainName: 'aux',
          someFutureKey: 1,
        }),
      );
      const r = readMultus(listConfFiles(confDir)!, daemonConfig);
      assert.ok(r.ok && r.value);
      const cluster = resolveClusterNetwork(r.value.settings, (d) => listConfFiles(d));
      assert.ok(cluster.ok);
      const c = carryOver(r.value, cluster.value, { defaultNetworkLink: '/var/lib/plexus/default-network' });
      assert.deepEqual(c.settings, {
        defaultNetwork: 'net-system/podnet',
        defaultNetworks: ['net-system/sidecar'],
        namespaceIsolation: true,
        globalNamespaces: ['default', 'shared'],
        systemNamespaces: ['kube-system', 'infra'],
        readinessIndicatorFile: '/run/flannel/subnet.env',
        cniBinDir: '/opt/multus/bin',
        cniConfDir: '/etc/cni/multus/net.d',
        multusCacheDir: '/var/lib/cni/multus',
      });
      const dropped = Object.fromEntries(c.dropped.map((d) => [d.multus, d.why]));
      assert.deepEqual(Object.keys(dropped).sort(), [
        'auxiliaryCNIChainName',
        'defaultNetworks (/etc/cni/multus/extra.conf)',
        'kubeconfig',
        'logFile',
        'someFutureKey',
      ]);
      assert.match(dropped.someFutureKey!, /not a Multus v4\.3 setting/);
      // The settings are ones plexusd accepts.
      const file = join(dir, 'imported.json');
      writeFileSync(file, JSON.stringify(c.settings));
      const config = loadDaemonConfig(['--imported-config', file]);
      assert.equal(config.kind, 'config', config.kind === 'error' ? config.message : '');
    });

    it("carries auxiliaryCNIChainName as the chain's directory beside clusterNetwork, or names why not", () => {
      const carried = (clusterNetwork: string, auxiliaryCNIChainName: string) => {
        writeFileSync(join(confDir, '00-multus.conf'), thin({ clusterNetwork, auxiliaryCNIChainName }));
        const r = readMultus(listConfFiles(confDir)!, daemonConfig);
        assert.ok(r.ok && r.value);
        const cluster = resolveClusterNetwork(r.value.settings, (d) => listConfFiles(d));
        assert.ok(cluster.ok, cluster.ok ? '' : cluster.error.message);
        const c = carryOver(r.value, cluster.value, { defaultNetworkLink: '/var/lib/plexus/default-network' });
        const why = c.dropped.find((d) => d.multus === 'auxiliaryCNIChainName')?.why;
        return { chain: c.settings.auxiliaryChain, why };
      };
      const file = join(confDir, '10-kindnet.conflist');
      writeFileSync(file, podnet);
      // Multus: filepath.Dir(clusterNetwork) joined with the chain's name.
      assert.deepEqual(carried(file, 'vendor-cni-chain'), { chain: join(confDir, 'vendor-cni-chain'), why: undefined });
      assert.deepEqual(carried(`${confDir}/`, 'vendor-cni-chain').chain, join(confDir, 'vendor-cni-chain'));
      const named = carried('podnet', 'vendor-cni-chain');
      assert.equal(named.chain, undefined);
      assert.match(named.why!, /fails every pod.*not a path/);
      const bad = carried(file, '../etc');
      assert.equal(bad.chain, undefined);
      assert.match(bad.why!, /not a valid network name/);
    });
  });

  describe('plexus-install', () => {
    it("writes the carried settings for plexusd and links the cluster network's file (thick)", async () => {
      writeFileSync(join(confDir, '00-multus.conf'), thickShim(`/host${confDir}/10-podnet.conflist`));
      writeFileSync(daemonConfig, JSON.stringify({ namespaceIsolation: true, cniConfigDir: `/host${confDir}` }));
      const { log, lines } = recordingLogger();
      assert.equal(await runInstall(installArgs(), log), 0);
      assert.equal(
        readlinkSync(join(stateDir, 'default-network')),
        join(confDir, '10-podnet.conflist'),
        "the daemon's /host path, as the host sees it",
      );
      assert.equal(imported().namespaceIsolation, true);
      assert.equal(imported().defaultNetwork, join(stateDir, 'default-network'));
      const named = lines()
        .filter((l) => l.multusSetting)
        .map((l) => l.multusSetting);
      assert.ok(named.includes('cniConfigDir') && named.includes('logLevel'), `named: ${named.join(', ')}`);
    });

    it("writes the first delegate of a thin config as the default network's file", async () => {
      writeFileSync(join(confDir, '00-multus.conf'), thin({ delegates: [JSON.parse(podnet)] }));
      assert.equal(await runInstall(installArgs(), silent), 0);
      const target = readlinkSync(join(stateDir, 'default-network'));
      assert.equal((JSON.parse(readFileSync(target, 'utf8')) as { name: string }).name, 'podnet');
    });

    it("changes nothing and fails when Multus's config does not parse", async () => {
      writeFileSync(join(confDir, '00-multus.conf'), '{"type": "multus", "clusterNetwork": ');
      writeFileSync(join(confDir, '00-multus.conf'), '{"cniVersion":"1.0.0","type":"multus","clusterNetwork":5}');
      const { log, lines } = recordingLogger();
      assert.equal(await runInstall(installArgs(), log), 1);
      assert.ok(!existsSync(join(stateDir, 'imported-config.json')));
      assert.ok(!existsSync(join(stateDir, 'default-network')));
      assert.ok(
        lines().some((l) => /clusterNetwork.*nothing was changed/.test(String(l.msg))),
        JSON.stringify(lines()),
      );
    });

    it("changes nothing and fails when the thick daemon's config does not parse", async () => {
      writeFileSync(join(confDir, '00-multus.conf'), thickShim(join(confDir, '10-podnet.conflist')));
      writeFileSync(daemonConfig, '{"namespaceIsolation": tru');
      assert.equal(await runInstall(installArgs(), silent), 1);
      assert.ok(!existsSync(join(stateDir, 'imported-config.json')));
    });

    it("still reads Multus's config after a takeover moved it aside (a rolling restart)", async () => {
      writeFileSync(join(confDir, '00-multus.conf'), thin({ clusterNetwork: 'podnet', namespaceIsolation: true }));
      moveMultusAside(confDir);
      assert.equal(await runInstall(installArgs(), silent), 0);
      assert.equal(imported().namespaceIsolation, true);
      assert.equal(imported().defaultNetwork, 'kube-system/podnet');
    });
  });

  describe('the takeover', () => {
    it("moves Multus's config aside in one rename, and uninstall puts the same bytes and mode back", async () => {
      const original = `${thin({ clusterNetwork: 'podnet' })}\n  `;
      const path = join(confDir, '00-multus.conf');
      writeFileSync(path, original);
      chmodSync(path, 0o640);
      assert.deepEqual(moveMultusAside(confDir), [`${path}${MOVED_ASIDE_SUFFIX}`]);
      assert.ok(!existsSync(path));
      assert.equal(findMultusOf(confDir), 0, 'the runtime no longer loads it');
      assert.equal(
        await runInstall(
          [
            'uninstall',
            '--cni-conf-dir',
            confDir,
            '--cni-bin-dir',
            join(dir, 'bin'),
            '--imported-config',
            join(stateDir, 'imported-config.json'),
          ],
          silent,
        ),
        0,
      );
      assert.equal(readFileSync(path, 'utf8'), original);
      assert.equal(statSync(path).mode & 0o777, 0o640);
    });

    it('leaves a moved-aside config where it is when Multus wrote a new one meanwhile', () => {
      const path = join(confDir, '00-multus.conf');
      writeFileSync(path, thin({ clusterNetwork: 'podnet' }));
      moveMultusAside(confDir);
      writeFileSync(path, thin({ clusterNetwork: 'other' }));
      const r = restoreMultus(confDir);
      assert.deepEqual(r, { restored: [], kept: [`${path}${MOVED_ASIDE_SUFFIX}`] });
      assert.match(readFileSync(path, 'utf8'), /other/);
    });
  });
});

const findMultusOf = (confDir: string): number =>
  (listConfFiles(confDir) ?? []).filter((f) => /multus/.test(f.read() ?? '')).length;
