/**
 * Delegated STATUS and GC against the real reference plugins of both versions a user may have: 1.9.1 (CNI 1.1.0:
 * bridge, ptp, macvlan, ... implement STATUS, asking their IPAM plugin in turn; no plugin implements GC, so it is a
 * success that changes nothing) and Debian bookworm's 1.1.1 (CNI up to 1.0.0: neither verb). Each plugin is wrapped
 * by a spy that keeps the bytes it is given, so a test sees which plugin was reached with what.
 */
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import type { Result } from '../../src/cni/errors';
import { delegateGc, delegateStatus } from '../../src/drivers/delegate';
import { parseNetworkConfig, type NetworkDefinition } from '../../src/networks/nad';
import { uniquePrefix } from '../support/netns';
import {
  DEBIAN_PLUGINS,
  debianPluginsMissing,
  referencePlugins,
  referencePluginsMissing,
  type SpiedPlugins,
  spiedPluginDir,
} from '../support/plugin-dir';
import { expectedPrerequisites } from '../support/prerequisites';

const prefix = uniquePrefix('pdv');
const tmp = mkdtempSync(join(tmpdir(), 'plexus-delegate-versions-'));
after(() => rmSync(tmp, { recursive: true, force: true }));

/** A bin dir whose every plugin is a spy of the real one, under this file's temp dir. */
const spiedPlugins = (real: string, tag: string): SpiedPlugins => spiedPluginDir(real, join(tmp, tag));

let counter = 0;
function bridgeNetwork(cniVersion: string, ipamType = 'host-local'): NetworkDefinition {
  const name = `${prefix}-n${++counter}`;
  const config = {
    cniVersion,
    name,
    plugins: [
      {
        type: 'bridge',
        bridge: `${prefix}b${counter}`,
        ipam: { type: ipamType, subnet: '10.251.7.0/24', dataDir: join(tmp, 'host-local') },
      },
      { type: 'portmap', capabilities: { portMappings: true } },
    ],
  };
  const parsed = parseNetworkConfig(JSON.stringify(config), 'test', name);
  if (!parsed.ok) assert.fail(parsed.error.message);
  return { namespace: 'default', name, key: `default/${name}`, annotations: {}, source: 'test', ...parsed.value };
}

const must = (r: Result<void>): void => {
  if (!r.ok) assert.fail(`expected ok, got ${r.error.code}: ${r.error.message} (${r.error.details})`);
};
const failure = (r: Result<void>): { code: number; message: string } => {
  if (r.ok) assert.fail('expected an error');
  return { code: r.error.code, message: r.error.message };
};

/** Two host-local leases of `network`, as host-local writes them: the file named by the address holds "id\r\nifname". */
function leases(network: NetworkDefinition): { dir: string; files: () => string[] } {
  const dir = join(tmp, 'host-local', network.cniName);
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, '10.251.7.2'), `${prefix}-kept\r\neth1`);
  writeFileSync(join(dir, '10.251.7.3'), `${prefix}-gone\r\neth1`);
  return {
    dir,
    files: () =>
      readdirSync(dir)
        .filter((f) => f.startsWith('10.'))
        .sort(),
  };
}

describe(
  'delegated STATUS and GC: reference plugins 1.9.1',
  { skip: expectedPrerequisites(referencePluginsMissing()) },
  () => {
    const spied = (tag: string): SpiedPlugins => spiedPlugins(referencePlugins(), tag);

    it('STATUS reaches bridge, which asks its IPAM plugin, and answers ready', async () => {
      const { binDir, calls } = spied('status-ok');
      must(await delegateStatus(bridgeNetwork('1.1.0'), binDir));
      assert.deepEqual(
        calls().map((c) => `${c.plugin} ${c.command}`),
        ['bridge STATUS', 'host-local STATUS', 'portmap STATUS'],
      );
    });

    it("STATUS returns the 1.9.1 bridge's own answer when its IPAM plugin is not installed", async () => {
      const { binDir, calls } = spied('status-fail');
      const e = failure(await delegateStatus(bridgeNetwork('1.1.0', `${prefix}-no-ipam`), binDir));
      assert.match(e.message, /^STATUS of network default\/\S+, plugin 1\/2 \(bridge\): .*failed to find plugin/);
      assert.match(e.message, new RegExp(`${prefix}-no-ipam`));
      assert.equal(e.code, 999, 'the code the plugin printed');
      assert.deepEqual(
        calls().map((c) => `${c.plugin} ${c.command}`),
        ['bridge STATUS'],
        'the first failure is the answer',
      );
    });

    it('GC reaches every plugin with the valid attachments; 1.9.1 implements none, so host-local keeps its leases', async () => {
      const { binDir, calls } = spied('gc');
      const network = bridgeNetwork('1.1.0');
      const held = leases(network);
      must(await delegateGc(network, [{ containerId: `${prefix}-kept`, ifname: 'eth1' }], binDir));
      const gcs = calls();
      assert.deepEqual(
        gcs.map((c) => `${c.plugin} ${c.command}`),
        ['bridge GC', 'portmap GC'],
      );
      for (const c of gcs) {
        assert.deepEqual(c.stdin['cni.dev/valid-attachments'], [{ containerID: `${prefix}-kept`, ifname: 'eth1' }]);
      }
      // Plexus cannot count on a delegated plugin to drop what the runtime no longer lists (docs/delegation.md).
      assert.deepEqual(held.files(), ['10.251.7.2', '10.251.7.3']);
    });
  },
);

describe(
  "delegated STATUS and GC: Debian's plugins 1.1.1",
  { skip: expectedPrerequisites(debianPluginsMissing()) },
  () => {
    const spied = (tag: string): SpiedPlugins => spiedPlugins(DEBIAN_PLUGINS, tag);

    it('a 1.0.0 network, all 1.1.1 speaks: STATUS and GC answer ready without running a plugin', async () => {
      const { binDir, calls } = spied('v100');
      const network = bridgeNetwork('1.0.0');
      must(await delegateStatus(network, binDir));
      must(await delegateGc(network, [], binDir));
      assert.deepEqual(calls(), []);
    });

    it('a 1.1.0 network: STATUS and GC reach the plugin and return its refusal, which names the plugin', async () => {
      const { binDir, calls } = spied('v110');
      const network = bridgeNetwork('1.1.0');
      const status = failure(await delegateStatus(network, binDir));
      assert.match(status.message, /^STATUS of network default\/\S+, plugin 1\/2 \(bridge\): /);
      const gc = failure(await delegateGc(network, [], binDir));
      assert.match(gc.message, /^GC of network default\/\S+, plugin 1\/2 \(bridge\): /);
      assert.deepEqual(
        calls().map((c) => `${c.plugin} ${c.command}`),
        ['bridge STATUS', 'bridge GC', 'portmap GC'],
        'GC goes on past a failure; STATUS stops at the first',
      );
    });
  },
);
