/**
 * Multus's settings, carried over by plexus-install and read by a real plexusd, behave as they did under Multus: the
 * cluster network (as a file and as a NAD), defaultNetworks, namespace isolation and the global namespaces.
 */
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import pino from 'pino';
import { hostVethName } from '../../src/drivers/bridge';
import { runInstall } from '../../src/install/main';
import { DaemonFixture, podArgs, SHIM } from '../support/daemon';
import { restoreForwardingAfterwards } from '../support/forwarding';
import { NetnsFixture, podLinks, uniquePrefix } from '../support/netns';
import { DEBIAN_PLUGINS } from '../support/plugin-dir';

restoreForwardingAfterwards();
/** The reference host-local's default store of a network named podnet, on the host. */
const HOST_PODNET_STORE = '/var/lib/cni/networks/podnet';
const podnetStoreBefore = existsSync(HOST_PODNET_STORE);

for (const clusterNetwork of ['file', 'nad'] as const) {
  describe(`a plexusd with the settings of a Multus whose cluster network is a ${clusterNetwork}`, () => {
    const prefix = uniquePrefix('mi');
    const fx = new NetnsFixture(prefix);
    const o = 200 + Math.floor(Math.random() * 50);
    const t = Math.floor(Math.random() * 200);
    const base = new DaemonFixture('unused');
    const confDir = join(base.dir, 'net.d');
    const state = join(base.dir, 'plexus-state');
    const link = join(state, 'default-network');
    const imported = join(state, 'imported-config.json');
    const settings = join(base.dir, 'plexusd.yaml');
    // As the DaemonSet runs it: the ConfigMap's file names the link and the imported settings; no flag overrides them.
    const daemon = new DaemonFixture('', { config: settings, cniBinDir: DEBIAN_PLUGINS });
    const bridge = (name: string, i: number, dataDir?: string): Record<string, unknown> => ({
      cniVersion: '1.0.0',
      name,
      type: 'bridge',
      bridge: `${prefix}b${i}`,
      ipam: { type: 'host-local', ranges: [[{ subnet: `10.${o}.${t + i}.0/24` }]], ...(dataDir ? { dataDir } : {}) },
    });
    const nad = (namespace: string, name: string, i: number): void =>
      daemon.writeNad(
        `${namespace}-${name}.json`,
        JSON.stringify({
          apiVersion: 'k8s.cni.cncf.io/v1',
          kind: 'NetworkAttachmentDefinition',
          metadata: { name, namespace },
          spec: { config: JSON.stringify(bridge(name, i)) },
        }),
      );

    before(async () => {
      mkdirSync(confDir);
      writeFileSync(settings, `defaultNetwork: ${link}\nimportedConfig: ${imported}\n`);
      for (const i of [0, 1, 2, 3]) fx.trackHostLink(`${prefix}b${i}`);
      // A file is run by the node's own plugins, never natively: its host-local store is named, or it would be the host's.
      const clusterFile = bridge('podnet', 0, join(base.dir, 'cni-networks'));
      writeFileSync(join(confDir, '10-podnet.conflist'), JSON.stringify(clusterFile));
      nad('default', 'sidecar', 1);
      nad('shared', 'green', 2);
      nad('team-b', 'blue', 3);
      if (clusterNetwork === 'nad') nad('net-system', 'podnet', 0);
      writeFileSync(
        join(confDir, '00-multus.conf'),
        JSON.stringify({
          cniVersion: '1.0.0',
          name: 'multus-cni-network',
          type: 'multus',
          multusNamespace: clusterNetwork === 'nad' ? 'net-system' : 'default',
          clusterNetwork: clusterNetwork === 'nad' ? 'podnet' : join(confDir, '10-podnet.conflist'),
          defaultNetworks: [clusterNetwork === 'nad' ? '' : 'sidecar'].filter(Boolean),
          namespaceIsolation: true,
          globalNamespaces: 'default,shared',
        }),
      );
      const installed = await runInstall(
        [
          'install',
          '--cni-conf-dir',
          confDir,
          '--cni-bin-dir',
          join(base.dir, 'bin'),
          '--shim',
          SHIM,
          '--default-network-link',
          link,
          '--imported-config',
          imported,
          '--multus-daemon-config',
          join(base.dir, 'none.json'),
        ],
        pino({ level: 'silent' }),
      );
      assert.equal(installed, 0);
      await daemon.start();
    });
    after(async () => {
      await daemon.stop();
      await base.stop();
      fx.cleanup();
    });

    let n = 0;
    const add = async (namespace: string, networks: string) => {
      const ns = fx.create(`p${++n}`);
      const cid = `${prefix}c${n}`;
      for (const i of ['eth0', 'net1', 'net2']) fx.trackHostLink(hostVethName(cid, 'eth0', i));
      const config = daemon.runtimeConfig(
        { runtimeConfig: { 'io.kubernetes.cri.pod-annotations': { 'k8s.v1.cni.cncf.io/networks': networks } } },
        '1.0.0',
      );
      const out = await daemon.cni({
        command: 'ADD',
        containerId: cid,
        netns: ns.path,
        ifname: 'eth0',
        args: podArgs(`pod${n}`, cid, namespace),
        config,
      });
      return {
        out,
        ns: ns.name,
        del: () =>
          daemon.cni({
            command: 'DEL',
            containerId: cid,
            netns: ns.path,
            ifname: 'eth0',
            args: podArgs(`pod${n}`, cid, namespace),
            config,
          }),
      };
    };

    it("gives a pod the cluster network, Multus's defaultNetworks and a NAD of a global namespace", async () => {
      const pod = await add('team-a', 'shared/green');
      assert.equal(pod.out.code, 0, pod.out.stdout);
      assert.deepEqual(podLinks(pod.ns), clusterNetwork === 'nad' ? ['eth0', 'net1'] : ['eth0', 'net1', 'net2']);
      assert.equal((await pod.del()).code, 0);
    });

    it("refuses a NAD of another namespace, as Multus's namespaceIsolation does", async () => {
      const pod = await add('team-a', 'team-b/blue');
      assert.equal(pod.out.json?.code, 7, pod.out.stdout);
      assert.match(String(pod.out.json?.msg), /team-b/);
      assert.equal((await pod.del()).code, 0);
    });

    it("makes no host-local store of podnet on the host (the cluster network's file names its own dataDir)", () => {
      assert.equal(existsSync(HOST_PODNET_STORE), podnetStoreBefore, `${HOST_PODNET_STORE} made by the test`);
    });
  });
}
