/** Malformed configs, environments and network definitions: the right CNI error, and nothing left behind. */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { hostVethName } from '../../src/drivers/bridge';
import { spawnSync } from 'node:child_process';
import { DaemonFixture, podArgs, SHIM, type ShimCall } from '../support/daemon';
import { hostLinksWithPrefix, NetnsFixture, uniquePrefix } from '../support/netns';
import { DEBIAN_PLUGINS } from '../support/plugin-dir';

const prefix = uniquePrefix('pm');
const fx = new NetnsFixture(prefix);
const daemon = new DaemonFixture('podnet', { cniBinDir: '/nonexistent/cni/bin' });
let netns = '';
const subnet = `10.${200 + Math.floor(Math.random() * 50)}.${Math.floor(Math.random() * 250)}.0/24`;

before(async () => {
  fx.trackHostLink(`${prefix}br`);
  daemon.writeBridgeNetwork({ name: 'podnet', bridge: `${prefix}br`, subnet });
  daemon.writeBridgeNetwork({ name: 'masq', bridge: `${prefix}br`, subnet, extra: { ipMasq: true } });
  daemon.writeBridgeNetwork({ name: 'badipam', bridge: `${prefix}br`, subnet: '10.1.2.0/33' });
  daemon.writeBridgeNetwork({ name: 'notbridge', bridge: 'lo', subnet });
  daemon.writeNad(
    'broken.yaml',
    'apiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\nmetadata: {name: broken}\nspec:\n  config: \'{"cniVersion": "1.1.0", "type": \'\n',
  );
  daemon.writeNad(
    'chained.yaml',
    `apiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\nmetadata: {name: chained}\nspec:\n  config: '{"cniVersion":"1.1.0","name":"chained","plugins":[{"type":"bridge","bridge":"${prefix}br"},{"type":"portmap"}]}'\n`,
  );
  daemon.writeNad(
    'exotic.yaml',
    'apiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\nmetadata: {name: exotic}\nspec:\n  config: \'{"cniVersion":"1.1.0","name":"exotic","type":"sbr"}\'\n',
  );
  await daemon.start();
  netns = fx.create('pod').path;
});
after(async () => {
  await daemon.stop();
  fx.cleanup();
});

const cid = `${prefix}c`;
const base = (): ShimCall => ({ command: 'ADD', containerId: cid, netns, ifname: 'eth0', args: podArgs('pod', cid) });

interface Case {
  readonly title: string;
  readonly call: () => ShimCall;
  readonly code: number;
  readonly msg: RegExp;
}

const cases: Case[] = [
  // Without parseable JSON the shim cannot read socketPath; operators point it at the daemon with PLEXUS_SOCKET.
  {
    title: 'stdin that is not JSON',
    call: () => ({ ...base(), config: '{"cniVersion": "1.1.0", ', env: { PLEXUS_SOCKET: daemon.socket } }),
    code: 6,
    msg: /not valid JSON/,
  },
  {
    title: 'a config without cniVersion',
    call: () => ({ ...base(), config: { name: 'plexus', type: 'plexus-cni', socketPath: daemon.socket } }),
    code: 7,
    msg: /no cniVersion/,
  },
  {
    title: 'an unsupported cniVersion',
    call: () => ({ ...base(), config: daemon.runtimeConfig({}, '0.2.0') }),
    code: 1,
    msg: /incompatible CNI version "0\.2\.0"/,
  },
  {
    title: 'a config without name',
    call: () => ({ ...base(), config: { cniVersion: '1.1.0', type: 'plexus-cni', socketPath: daemon.socket } }),
    code: 7,
    msg: /no "name"/,
  },
  {
    title: 'runtimeConfig that is not an object',
    call: () => ({ ...base(), config: daemon.runtimeConfig({ runtimeConfig: [1] }) }),
    code: 7,
    msg: /runtimeConfig/,
  },
  {
    title: 'runtimeConfig ips that are not strings',
    call: () => ({ ...base(), config: daemon.runtimeConfig({ runtimeConfig: { ips: [42] } }) }),
    code: 7,
    msg: /ips must be a list/,
  },
  {
    title: 'an unset CNI_COMMAND',
    call: () => ({ ...base(), env: { CNI_COMMAND: undefined } }),
    code: 4,
    msg: /CNI_COMMAND/,
  },
  {
    title: 'an unknown CNI_COMMAND',
    call: () => ({ ...base(), command: 'ATTACH' }),
    code: 4,
    msg: /CNI_COMMAND "ATTACH"/,
  },
  {
    title: 'a missing CNI_NETNS on ADD',
    call: () => ({ ...base(), env: { CNI_NETNS: undefined } }),
    code: 4,
    msg: /CNI_NETNS is required/,
  },
  {
    title: 'a CNI_NETNS that does not exist',
    call: () => ({ ...base(), netns: `/var/run/netns/${prefix}-nope` }),
    code: 4,
    msg: /does not exist/,
  },
  // /proc/self is resolved by plexusd: its own netns, which is the node's when it runs with hostNetwork.
  {
    title: "the daemon's own network namespace as CNI_NETNS",
    call: () => ({ ...base(), netns: '/proc/self/ns/net' }),
    code: 4,
    msg: /is plexusd's own network namespace, not a pod's/,
  },
  {
    title: "the daemon's network namespace by its PID",
    call: () => ({ ...base(), netns: `/proc/${daemon.pid}/ns/net` }),
    code: 4,
    msg: /is plexusd's own network namespace, not a pod's/,
  },
  // PID 1's: the host's where it can be read; where it cannot (another user namespace), plexusd says that instead.
  {
    title: "the host's network namespace (PID 1's) as CNI_NETNS",
    call: () => ({ ...base(), netns: '/proc/1/ns/net' }),
    code: 4,
    msg: /is the host's network namespace|is plexusd's own|cannot be read \(EACCES\)/,
  },
  {
    title: 'a regular file as CNI_NETNS',
    call: () => ({ ...base(), netns: '/etc/hostname' }),
    code: 4,
    msg: /is not a network namespace: it is a regular file/,
  },
  {
    title: 'another kind of namespace as CNI_NETNS',
    call: () => ({ ...base(), netns: '/proc/self/ns/mnt' }),
    code: 4,
    msg: /is a namespace, but not a network namespace/,
  },
  {
    title: 'a missing CNI_CONTAINERID',
    call: () => ({ ...base(), env: { CNI_CONTAINERID: undefined } }),
    code: 4,
    msg: /CNI_CONTAINERID is required/,
  },
  {
    title: 'a container ID with invalid characters',
    call: () => ({ ...base(), containerId: 'abc/../x' }),
    code: 4,
    msg: /invalid characters/,
  },
  {
    title: 'an interface name longer than 15 bytes',
    call: () => ({ ...base(), ifname: 'eth0123456789012' }),
    code: 4,
    msg: /longer than 15/,
  },
  { title: 'an interface name with a slash', call: () => ({ ...base(), ifname: 'et/h0' }), code: 4, msg: /may not/ },
  {
    title: 'CNI_ARGS with an unknown key and no IgnoreUnknown',
    call: () => ({ ...base(), args: 'FOO=bar' }),
    code: 4,
    msg: /unknown argument "FOO"/,
  },
  {
    title: 'CNI_ARGS with a pair without "="',
    call: () => ({ ...base(), args: 'IgnoreUnknown=1;garbage' }),
    code: 4,
    msg: /not a KEY=VALUE pair/,
  },
  {
    title: 'CNI_ARGS with an invalid IP',
    call: () => ({ ...base(), args: 'IP=10.0.0.999' }),
    code: 4,
    msg: /IP "10\.0\.0\.999"/,
  },
  {
    title: 'CNI_ARGS with an invalid MAC',
    call: () => ({ ...base(), args: 'MAC=zz:11:22:33:44:55' }),
    code: 4,
    msg: /MAC/,
  },
  {
    title: 'a requested IP outside the network',
    call: () => ({ ...base(), args: 'IP=192.0.2.9' }),
    code: 7,
    msg: /192\.0\.2\.9/,
  },
  {
    title: 'a default network that is not defined',
    call: () => ({ ...base(), config: daemon.runtimeConfig({ defaultNetwork: 'nosuchnet' }) }),
    code: 7,
    msg: /default\/nosuchnet is not defined/,
  },
  {
    title: 'a malformed default network reference',
    call: () => ({ ...base(), config: daemon.runtimeConfig({ defaultNetwork: 'a/b/c' }) }),
    code: 7,
    msg: /not a network reference/,
  },
  {
    title: 'a NetworkAttachmentDefinition whose spec.config is broken',
    call: () => ({ ...base(), config: daemon.runtimeConfig({ defaultNetwork: 'broken' }) }),
    code: 7,
    msg: /broken.*(invalid|not valid)/,
  },
  {
    title: 'a network using ipMasq, which the native bridge does not do yet',
    call: () => ({ ...base(), config: daemon.runtimeConfig({ defaultNetwork: 'masq' }) }),
    code: 2,
    msg: /ipMasq/,
  },
  {
    title: 'a network with an invalid IPAM subnet',
    call: () => ({ ...base(), config: daemon.runtimeConfig({ defaultNetwork: 'badipam' }) }),
    code: 7,
    msg: /10\.1\.2\.0\/33/,
  },
  {
    title: 'a network whose bridge name is a non-bridge link',
    call: () => ({ ...base(), config: daemon.runtimeConfig({ defaultNetwork: 'notbridge' }) }),
    code: 7,
    msg: /lo exists on the host but is not a bridge/,
  },
  // Under the shim's 4 MiB, but every quote is escaped once more in the request it forwards: over the daemon's limit.
  {
    title: 'a config whose forwarded request exceeds 4 MiB',
    call: () => ({ ...base(), config: JSON.stringify(daemon.runtimeConfig({ pad: '"'.repeat(1_400_000) })) }),
    code: 7,
    msg: /CNI request larger than 4194304 bytes/,
  },
  // A tenant's pod asking for 500 networks: refused by the per-pod limit (default 32) before any is looked at.
  {
    title: 'a selection of 500 networks',
    code: 7,
    msg: /the pod asks for 501 interfaces .* \(--max-interfaces-per-pod 32\)/,
    call: () => ({
      ...base(),
      config: daemon.runtimeConfig({
        runtimeConfig: {
          'io.kubernetes.cri.pod-annotations': {
            'k8s.v1.cni.cncf.io/networks': Array.from({ length: 500 }, (_, i) => `podnet@n${i}`).join(','),
          },
        },
      }),
    }),
  },
  {
    title: 'a selection annotation over 32 KiB',
    code: 7,
    msg: /is 40000 bytes, more than this node allows \(--max-annotation-bytes 32768\)/,
    call: () => ({
      ...base(),
      config: daemon.runtimeConfig({
        runtimeConfig: { 'io.kubernetes.cri.pod-annotations': { 'k8s.v1.cni.cncf.io/networks': 'x'.repeat(40000) } },
      }),
    }),
  },
  // This daemon's --cni-bin-dir is empty: delegated networks fail cleanly, naming the missing plugin.
  {
    title: 'a chained network whose plugins are not installed',
    call: () => ({ ...base(), config: daemon.runtimeConfig({ defaultNetwork: 'chained' }) }),
    code: 100,
    msg: /bridge.*not found|not found.*bridge/,
  },
  {
    title: 'a network of a non-native plugin type that is not installed',
    call: () => ({ ...base(), config: daemon.runtimeConfig({ defaultNetwork: 'exotic' }) }),
    code: 100,
    msg: /sbr/,
  },
];

describe('malformed input', () => {
  for (const c of cases) {
    it(`${c.title} → code ${c.code}, and nothing is left behind`, async () => {
      const out = await daemon.cni(c.call());
      assert.equal(out.code, 1, `exit code; stdout: ${out.stdout}`);
      assert.ok(out.json, `a CNI error JSON on stdout, got: ${out.stdout}`);
      assert.equal(out.json.code, c.code, String(out.json.msg));
      assert.match(String(out.json.msg), c.msg);
      assert.equal(typeof out.json.cniVersion, 'string');
      assert.deepEqual(daemon.journalFiles(), []);
      assert.deepEqual(daemon.leases('podnet'), []);
      assert.deepEqual(daemon.leases('masq'), []);
      assert.deepEqual(hostLinksWithPrefix(hostVethName(cid, 'eth0', 'eth0')), []);
    });
  }

  it('a CNI_IFNAME of bytes that are not UTF-8 → code 4, never another name than the runtime gave', () => {
    // Node can only pass text in an environment: a shell puts the raw byte there.
    const r = spawnSync('bash', ['-c', `CNI_IFNAME=$(printf 'eth\\377') exec "$0"`, SHIM], {
      input: JSON.stringify(daemon.runtimeConfig()),
      env: {
        PATH: process.env.PATH ?? '/usr/bin:/bin',
        CNI_COMMAND: 'ADD',
        CNI_CONTAINERID: cid,
        CNI_NETNS: netns,
        CNI_PATH: DEBIAN_PLUGINS,
        CNI_ARGS: podArgs('pod', cid),
      },
      encoding: 'utf8',
    });
    assert.equal(r.status, 1, r.stdout);
    const error = JSON.parse(r.stdout) as { code: number; msg: string };
    assert.equal(error.code, 4);
    assert.equal(error.msg, 'the CNI environment or network configuration is not valid UTF-8');
    assert.deepEqual(daemon.journalFiles(), []);
    assert.deepEqual(daemon.leases('podnet'), []);
  });

  it('leaves the daemon serving after all of them', async () => {
    const out = await daemon.cni(base());
    assert.equal(out.code, 0, out.stdout);
    assert.equal((await daemon.cni({ ...base(), command: 'DEL' })).code, 0);
    assert.deepEqual(daemon.leases('podnet'), []);
  });
});
