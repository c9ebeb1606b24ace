/** The CNI executable exec'd like a runtime, for every verb and every spec version, against a real plexusd. */
import assert from 'node:assert/strict';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it, type TestContext } from 'node:test';
import { hostVethName } from '../../src/drivers/bridge';
import {
  DaemonFixture,
  podArgs,
  podCall,
  type PodCallOverrides,
  type ShimOutput,
  type TestPod,
} from '../support/daemon';
import { hostLinksWithPrefix, ip, NetnsFixture, uniquePrefix } from '../support/netns';
import { referencePlugins, referencePluginsMissing, type SpiedPlugins, spiedPluginDir } from '../support/plugin-dir';
import { expectedPrerequisites } from '../support/prerequisites';

const prefix = uniquePrefix('pv');
const subnet = `10.${200 + Math.floor(Math.random() * 50)}.${Math.floor(Math.random() * 250)}.0/24`;
const fx = new NetnsFixture(prefix);
const daemon = new DaemonFixture('podnet');

before(async () => {
  fx.trackHostLink(`${prefix}br`);
  daemon.writeBridgeNetwork({ name: 'podnet', bridge: `${prefix}br`, subnet });
  await daemon.start();
});
after(async () => {
  await daemon.stop();
  fx.cleanup();
});

for (const version of ['0.3.0', '0.3.1', '0.4.0', '1.0.0', '1.1.0']) {
  describe(`CNI ${version}`, () => {
    const v = version.replace(/\./g, '');
    const config = (): Record<string, unknown> => daemon.runtimeConfig({}, version);
    const call = (command: 'ADD' | 'DEL' | 'CHECK', pod: TestPod, over: PodCallOverrides = {}): Promise<ShimOutput> =>
      podCall(daemon, command, pod, config(), over);
    /** A pod of the test's own (`what` names it), ADDed: the caller checks the ADD's output. DELed after the test. */
    async function added(t: TestContext, what: string): Promise<TestPod & { out: ShimOutput }> {
      const ns = fx.create(`${v}-${what}`);
      const pod: TestPod = {
        cid: `${prefix}-${v}-${what}`,
        name: `pod-${version}-${what}`,
        netns: ns.path,
        ns: ns.name,
      };
      fx.trackHostLink(hostVethName(pod.cid, 'eth0', 'eth0'));
      t.after(() => call('DEL', pod));
      return { ...pod, out: await call('ADD', pod) };
    }

    it('ADD returns a result in the caller version with the pod interface, address and default route', async (t) => {
      const { out, netns, ns } = await added(t, 'add');
      assert.equal(out.code, 0, out.stdout);
      const result = out.json as {
        cniVersion: string;
        interfaces: { name: string; mac?: string; sandbox?: string; mtu?: number }[];
        ips: Record<string, unknown>[];
        routes: { dst: string }[];
      };
      assert.equal(result.cniVersion, version);
      const podIf = result.interfaces.findIndex((i) => i.sandbox === netns);
      assert.equal(result.interfaces[podIf]?.name, 'eth0');
      assert.match(
        result.interfaces[podIf]?.mac ?? '',
        /^([0-9a-f]{2}:){5}[0-9a-f]{2}$/,
        'podman rejects results without a MAC',
      );
      assert.equal(result.interfaces[podIf]?.mtu !== undefined, version === '1.1.0', 'mtu appears only from 1.1.0');
      const ipEntry = result.ips[0]!;
      assert.equal(ipEntry.interface, podIf);
      assert.equal('version' in ipEntry, version.startsWith('0.'), '0.x results carry ips[].version');
      if (version.startsWith('0.')) assert.equal(ipEntry.version, '4');
      assert.ok(result.routes.some((r) => r.dst === '0.0.0.0/0'));
      assert.ok(ip('-n', ns, 'addr', 'show', 'eth0').includes(String(ipEntry.address)));
    });

    if (version !== '0.3.0' && version !== '0.3.1') {
      it('CHECK succeeds on an intact attachment', async (t) => {
        const pod = await added(t, 'check');
        assert.equal(pod.out.code, 0, pod.out.stdout);
        const out = await call('CHECK', pod);
        assert.equal(out.code, 0, out.stdout);
        assert.equal(out.stdout, '');
      });
    } else {
      it('CHECK is refused as incompatible before 0.4.0', async (t) => {
        const pod = await added(t, 'check');
        assert.equal(pod.out.code, 0, pod.out.stdout);
        const out = await call('CHECK', pod, { args: null });
        assert.equal(out.code, 1);
        assert.equal(out.json?.code, 1);
        assert.equal(out.json?.cniVersion, version);
      });
    }

    it('VERSION lists every supported version', async () => {
      const out = await daemon.cni({ command: 'VERSION', config: config() });
      assert.equal(out.code, 0);
      assert.deepEqual(out.json?.supportedVersions, ['0.3.0', '0.3.1', '0.4.0', '1.0.0', '1.1.0']);
      assert.equal(out.json?.cniVersion, version);
    });

    it('DEL removes the attachment and succeeds again when repeated', async (t) => {
      const pod = await added(t, 'del');
      assert.equal(pod.out.code, 0, pod.out.stdout);
      const first = await call('DEL', pod);
      assert.equal(first.code, 0, first.stdout);
      assert.deepEqual(hostLinksWithPrefix(hostVethName(pod.cid, 'eth0', 'eth0')), []);
      const second = await call('DEL', pod, { netns: '', args: null });
      assert.equal(second.code, 0, second.stdout);
    });
  });
}

describe('CNI 1.1 only verbs', () => {
  it('STATUS succeeds while the daemon is ready', async () => {
    const out = await daemon.cni({ command: 'STATUS', config: daemon.runtimeConfig() });
    assert.equal(out.code, 0, out.stdout);
  });

  it('STATUS answers 50 (plugin not available) when the default network cannot be used', async () => {
    const out = await daemon.cni({ command: 'STATUS', config: daemon.runtimeConfig({ defaultNetwork: 'nosuchnet' }) });
    assert.equal(out.code, 1, out.stdout);
    assert.equal(out.json?.code, 50);
    assert.match(String(out.json?.msg), /default\/nosuchnet/);
  });

  it('STATUS and GC are refused as incompatible for 1.0.0 configs', async () => {
    for (const command of ['STATUS', 'GC']) {
      const out = await daemon.cni({ command, config: daemon.runtimeConfig({}, '1.0.0') });
      assert.equal(out.json?.code, 1, `${command}: ${out.stdout}`);
    }
  });

  it('leaves no lease, journal record or pod link behind after all the DELs', () => {
    assert.deepEqual(daemon.leases('podnet'), []);
    assert.deepEqual(daemon.journalFiles(), []);
  });
});

describe(
  'STATUS and GC of a delegated default network reach the reference plugins 1.9.1',
  { skip: expectedPrerequisites(referencePluginsMissing()) },
  () => {
    // A daemon of its own, whose plugin directory is the reference plugins (each wrapped by a spy that keeps what it
    // was given) and whose networks are delegated to them.
    let delegating: DaemonFixture;
    let spied: SpiedPlugins;
    const refSubnet = `10.${200 + Math.floor(Math.random() * 50)}.${Math.floor(Math.random() * 250)}.0/24`;
    const hostLocalDir = (): string => join(delegating.dir, 'host-local', 'refnet');
    const leases = (): string[] => readdirSync(hostLocalDir()).filter((f) => /^[0-9.]+$/.test(f));
    const nad = (name: string, ipamType: string): void => {
      const config = {
        cniVersion: '1.1.0',
        name,
        type: 'bridge',
        bridge: `${prefix}rb`,
        ipam: { type: ipamType, ranges: [[{ subnet: refSubnet }]], dataDir: join(delegating.dir, 'host-local') },
      };
      const metadata = { name, namespace: 'default', annotations: { 'plexus.io/delegate': 'true' } };
      const doc = { apiVersion: 'k8s.cni.cncf.io/v1', kind: 'NetworkAttachmentDefinition', metadata };
      delegating.writeNad(`${name}.json`, JSON.stringify({ ...doc, spec: { config: JSON.stringify(config) } }));
    };
    before(async () => {
      fx.trackHostLink(`${prefix}rb`);
      delegating = new DaemonFixture('refnet');
      spied = spiedPluginDir(referencePlugins(), join(delegating.dir, 'plugins'));
      delegating.addSettings({ cniBinDir: spied.binDir });
      nad('refnet', 'host-local');
      nad('refbroken', `${prefix}-no-ipam`);
      await delegating.start();
    });
    after(() => delegating?.stop());

    it('answers ready when the reference bridge and its host-local do', async () => {
      const out = await delegating.cni({ command: 'STATUS', config: delegating.runtimeConfig() });
      assert.equal(out.code, 0, out.stdout);
    });

    it("answers the reference bridge's own error when its IPAM plugin is not installed", async () => {
      const config = delegating.runtimeConfig({ defaultNetwork: 'refbroken' });
      const out = await delegating.cni({ command: 'STATUS', config });
      assert.equal(out.code, 1, out.stdout);
      assert.equal(out.json?.code, 999, out.stdout);
      assert.match(
        String(out.json?.msg),
        new RegExp(`STATUS of network default/refbroken.*failed to find plugin "${prefix}-no-ipam"`),
      );
    });

    it('GC undoes an attachment the runtime no longer lists with its DEL, then GCs the plugins with the rest', async () => {
      const add = async (tag: string): Promise<string> => {
        const containerId = `${prefix}-${tag}`;
        const netns = fx.create(tag).path;
        const out = await delegating.cni({
          command: 'ADD',
          containerId,
          netns,
          ifname: 'eth0',
          args: podArgs(tag, containerId),
        });
        assert.equal(out.code, 0, out.stdout);
        return containerId;
      };
      const kept = await add('gck');
      const gone = await add('gcg');
      assert.equal(leases().length, 2);
      const valid = [{ containerID: kept, ifname: 'eth0' }];
      const gc = await delegating.cni({
        command: 'GC',
        config: delegating.runtimeConfig({ 'cni.dev/valid-attachments': valid }),
      });
      assert.equal(gc.code, 0, gc.stdout);
      const calls = spied.calls();
      assert.deepEqual(
        calls.filter((c) => c.command === 'DEL').map((c) => `${c.plugin} ${String(c.stdin.name)}`),
        ['bridge refnet', 'host-local refnet'],
        `${gone} goes with its DEL`,
      );
      // Each delegated network gets its GC, with the attachments Plexus still has on it; host-local 1.9.1 has no GC,
      // so bridge's does not reach it.
      const gcs = calls.filter((c) => c.command === 'GC');
      const gcOf = (name: string): unknown =>
        gcs.find((c) => c.stdin.name === name)?.stdin['cni.dev/valid-attachments'];
      assert.deepEqual(gcs.map((c) => `${c.plugin} ${String(c.stdin.name)}`).sort(), [
        'bridge refbroken',
        'bridge refnet',
      ]);
      assert.deepEqual(gcOf('refnet'), valid);
      assert.deepEqual(gcOf('refbroken'), []);
      assert.equal(leases().length, 1, 'the lease of the attachment GC removed went with its DEL');
      const del = await delegating.cni({
        command: 'DEL',
        containerId: kept,
        ifname: 'eth0',
        netns: '',
        args: podArgs('gck', kept),
      });
      assert.equal(del.code, 0, del.stdout);
      assert.deepEqual(leases(), []);
    });
  },
);
