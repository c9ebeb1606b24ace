/**
 * The delegate driver against real plugin binaries (the reference plugins 1.9.1, test/support/plugin-dir.ts) and the
 * fail-plugin test double, in real network namespaces. Undo steps recorded during ADD are run in reverse
 * with runDelegateDel, as the engine does on DEL.
 */
import assert from 'node:assert/strict';
import {
  chmodSync,
  closeSync,
  existsSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { RuntimeConfig } from '../../src/cni/args';
import { CniCode, type Result } from '../../src/cni/errors';
import type { CniResult } from '../../src/cni/types';
import { convertResult } from '../../src/cni/version';
import type { AttachRequest, DriverEnv, UndoStep } from '../../src/drivers/driver';
import {
  createDelegateDriver,
  delegateCheck,
  invocationsIn,
  delegateGc,
  delegateStatus,
  runDelegateDel,
  type DelegateDelStep,
} from '../../src/drivers/delegate';
import { execPlugin } from '../../src/drivers/delegate/exec';
import { Ipam } from '../../src/ipam';
import { Kernel } from '../../src/kernel/kernel';
import { parseNetworkConfig, type NetworkDefinition } from '../../src/networks/nad';
import { restoreForwardingAfterwards } from '../support/forwarding';
import { ip, NetnsFixture, type TestNetns, uniquePrefix } from '../support/netns';
import { attachParsed } from './support';
import { DEBIAN_PLUGINS, referencePluginDir, referencePlugins, referencePluginsMissing } from '../support/plugin-dir';
import { expectedPrerequisites } from '../support/prerequisites';

const delegateDriver = createDelegateDriver();
/** Every suite runs plugins; without the reference plugins they skip (and CI fails) with the reason. */
const skip = expectedPrerequisites(referencePluginsMissing());

const prefix = uniquePrefix('pdg');
const fx = new NetnsFixture(prefix);
const FAIL_PLUGIN = resolve(__dirname, '../../../test/fixtures/fail-plugin');
let kernel: Kernel;
let ipam: Ipam;
let tmp: string;
let binDir: string;
let spyDir: string;
/** Every step recorded by any test, so after() can still DEL what a failing test left behind. */
const leftovers: DelegateDelStep[] = [];

restoreForwardingAfterwards();

before(async () => {
  if (skip) return;
  tmp = await mkdtemp(join(tmpdir(), 'plexus-delegate-'));
  kernel = new Kernel();
  ipam = await Ipam.open(join(tmp, 'ipam'));
  process.env.PLEXUS_TEST_NODE = process.execPath;
  chmodSync(FAIL_PLUGIN, 0o755);
  // A bin dir like a node's: the reference plugins, the fail-plugin, and a bridge that keeps a copy of its stdin.
  binDir = join(tmp, 'bin');
  spyDir = join(tmp, 'spy');
  referencePluginDir(binDir, referencePlugins());
  mkdirSync(spyDir);
  symlinkSync(FAIL_PLUGIN, join(binDir, 'fail-plugin'));
  writeFileSync(
    join(binDir, 'spy-bridge'),
    `#!/bin/sh\nf="${spyDir}/$CNI_COMMAND.$$"\ncat > "$f"\nprintf '%s' "$CNI_NETNS" > "$f.netns"\nexec ${join(referencePlugins(), 'bridge')} < "$f"\n`,
    { mode: 0o755 },
  );
});

after(async () => {
  for (const step of leftovers.splice(0).reverse()) await runDelegateDel(step).catch(() => undefined);
  fx.cleanup();
  await kernel?.close();
  if (tmp) await rm(tmp, { recursive: true, force: true });
});

// ---------------------------------------------------------------------------------------------- helpers

const must = <T>(r: Result<T>): T => {
  if (!r.ok) assert.fail(`expected ok, got ${r.error.code}: ${r.error.message} (${r.error.details})`);
  return r.value;
};
const failure = <T>(r: Result<T>): { code: number; message: string; details: string } => {
  if (r.ok) assert.fail(`expected an error, got ${JSON.stringify(r.value)}`);
  return { code: r.error.code, message: r.error.message, details: r.error.details };
};

let counter = 0;
const unique = (tag: string): string => `${prefix}-${tag}${++counter}`;

const usedSubnets = new Set<string>();
/** A random 10.<200-250>.x.0/24 not used by another test of this run. */
function subnet(): { cidr: string; base: string } {
  for (;;) {
    const base = `10.${200 + Math.floor(Math.random() * 51)}.${Math.floor(Math.random() * 256)}`;
    if (!usedSubnets.has(base)) {
      usedSubnets.add(base);
      return { cidr: `${base}.0/24`, base };
    }
  }
}

let bridges = 0;
function bridgeName(): string {
  const name = `${prefix}b${++bridges}`;
  fx.trackHostLink(name);
  return name;
}

function network(config: Record<string, unknown>): NetworkDefinition {
  const name = String(config.name);
  const parsed = must(parseNetworkConfig(JSON.stringify(config), 'test', name));
  return { namespace: 'default', name, key: `default/${name}`, annotations: {}, source: 'test', ...parsed };
}

function request(net: NetworkDefinition, pod: TestNetns, extra: Partial<AttachRequest> = {}): AttachRequest {
  const plugin = net.plugins[0];
  assert.ok(plugin);
  return {
    containerId: unique('ctr'),
    netns: pod.path,
    ifname: 'eth1',
    runtimeIfname: 'eth0',
    pod: { namespace: 'default', name: 'pod' },
    network: net,
    plugin,
    ips: [],
    runtimeConfig: new RuntimeConfig({}),
    cniArgs: 'IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=pod',
    ...extra,
  };
}

interface Recording {
  readonly env: DriverEnv;
  readonly steps: DelegateDelStep[];
}
function recording(cniBinDir = binDir): Recording {
  const steps: DelegateDelStep[] = [];
  const env: DriverEnv = {
    kernel,
    ipam,
    cniBinDir,
    record: (step: UndoStep) => {
      const [invocation] = invocationsIn([step]);
      assert.ok(invocation, `a delegateDel step of the delegate driver, not ${JSON.stringify(step)}`);
      steps.push(invocation);
      leftovers.push(invocation);
      return Promise.resolve();
    },
  };
  return { env, steps };
}

/** What the engine does on DEL: every recorded step, last first. */
async function undo(steps: readonly DelegateDelStep[]): Promise<void> {
  for (const step of [...steps].reverse()) {
    must(await runDelegateDel(step));
    const i = leftovers.indexOf(step);
    if (i >= 0) leftovers.splice(i, 1);
  }
}

const dataDir = (): string => {
  const dir = join(tmp, unique('leases'));
  mkdirSync(dir);
  return dir;
};
/** host-local's lease files (one per IP) under dataDir/<network>. */
const leases = (dir: string, net: string): string[] =>
  existsSync(join(dir, net)) ? readdirSync(join(dir, net)).filter((f) => /^[0-9.]+$|:/.test(f)) : [];

const podAddresses = (pod: TestNetns, ifname: string): string =>
  ip('-n', pod.name, '-o', 'addr', 'show', 'dev', ifname);
const podLinks = (pod: TestNetns): string[] =>
  ip('-n', pod.name, '-o', 'link', 'show')
    .split('\n')
    .map((l) => l.split(':')[1]?.trim().split('@')[0] ?? '')
    .filter(Boolean);

interface LogLine {
  readonly command: string;
  readonly pid: number;
  readonly env: Record<string, string>;
  readonly stdin: string;
}
const logFile = (): string => join(tmp, `${unique('log')}.jsonl`);
const readLog = (file: string): LogLine[] =>
  existsSync(file)
    ? readFileSync(file, 'utf8')
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l) as LogLine)
    : [];

const bridgeHostLocal = (version: string, lease: string, extra: Record<string, unknown> = {}) => {
  const s = subnet();
  return {
    s,
    conf: {
      cniVersion: version,
      name: unique('net'),
      type: 'bridge',
      bridge: bridgeName(),
      isGateway: true,
      ipam: { type: 'host-local', subnet: s.cidr, dataDir: lease },
      ...extra,
    },
  };
};

// ------------------------------------------------------------------------------------------------ tests

describe('delegate driver: reference plugins', { skip }, () => {
  it('runs bridge + host-local and returns the parsed result, with the interface and IP in the pod', async () => {
    const lease = dataDir();
    const { s, conf } = bridgeHostLocal('1.0.0', lease);
    const net = network(conf);
    const pod = fx.create('br');
    const rec = recording();
    const result = must(await attachParsed(delegateDriver, request(net, pod), rec.env));

    const sandboxed = result.interfaces.findIndex((i) => i.name === 'eth1' && i.sandbox === pod.path);
    assert.ok(sandboxed >= 0, JSON.stringify(result.interfaces));
    assert.match(result.interfaces[sandboxed]?.mac ?? '', /^([0-9a-f]{2}:){5}[0-9a-f]{2}$/);
    assert.equal(result.ips.length, 1);
    assert.equal(result.ips[0]?.address, `${s.base}.2/24`);
    assert.equal(result.ips[0]?.gateway, `${s.base}.1`);
    assert.equal(result.ips[0]?.interface, sandboxed);
    assert.ok(podAddresses(pod, 'eth1').includes(`${s.base}.2/24`), podAddresses(pod, 'eth1'));
    assert.deepEqual(leases(lease, net.cniName), [`${s.base}.2`]);
    await undo(rec.steps);
    assert.deepEqual(leases(lease, net.cniName), []);
    assert.ok(!podLinks(pod).includes('eth1'));
  });

  it('gives the plugin at ADD and at DEL exactly the bytes it journaled', async () => {
    for (const f of readdirSync(spyDir)) await rm(join(spyDir, f));
    const { conf } = bridgeHostLocal('1.0.0', dataDir());
    const net = network({ ...conf, type: 'spy-bridge' });
    const pod = fx.create('bytes');
    const rec = recording();
    must(await attachParsed(delegateDriver, request(net, pod), rec.env));
    assert.equal(rec.steps.length, 1);
    const step = rec.steps[0];
    assert.ok(step);
    const seen = (command: string): string[] =>
      readdirSync(spyDir)
        .filter((f) => f.startsWith(`${command}.`) && !f.endsWith('.netns'))
        .map((f) => readFileSync(join(spyDir, f), 'utf8'));
    const [added] = seen('ADD');
    assert.ok(added !== undefined);
    assert.equal(added, step.config);
    assert.deepEqual(JSON.parse(added), JSON.parse(step.config));
    assert.deepEqual(JSON.parse(step.config), net.plugins[0]);
    await undo(rec.steps);
    assert.deepEqual(seen('DEL'), [step.config]);
  });

  it('runs ptp + host-local', async () => {
    const lease = dataDir();
    const s = subnet();
    const net = network({
      cniVersion: '1.0.0',
      name: unique('net'),
      type: 'ptp',
      ipam: { type: 'host-local', subnet: s.cidr, dataDir: lease },
    });
    const pod = fx.create('ptp');
    const rec = recording();
    const result = must(await attachParsed(delegateDriver, request(net, pod), rec.env));
    assert.ok(
      result.interfaces.some((i) => i.name === 'eth1' && i.sandbox === pod.path),
      JSON.stringify(result.interfaces),
    );
    assert.equal(result.ips[0]?.address, `${s.base}.2/24`);
    assert.ok(podAddresses(pod, 'eth1').includes(`${s.base}.2/`), podAddresses(pod, 'eth1'));
    await undo(rec.steps);
    assert.deepEqual(leases(lease, net.cniName), []);
    assert.ok(!podLinks(pod).includes('eth1'));
  });

  it('assigns a static address through the static IPAM plugin', async () => {
    const s = subnet();
    const net = network({
      cniVersion: '1.0.0',
      name: unique('net'),
      type: 'bridge',
      bridge: bridgeName(),
      ipam: { type: 'static', addresses: [{ address: `${s.base}.77/24`, gateway: `${s.base}.1` }] },
    });
    const pod = fx.create('static');
    const rec = recording();
    const result = must(await attachParsed(delegateDriver, request(net, pod), rec.env));
    assert.equal(result.ips[0]?.address, `${s.base}.77/24`);
    assert.ok(podAddresses(pod, 'eth1').includes(`${s.base}.77/24`), podAddresses(pod, 'eth1'));
    await undo(rec.steps);
  });

  it('chains tuning after bridge: tuning gets the bridge result as prevResult and applies its sysctl and MAC', async () => {
    const s = subnet();
    const lease = dataDir();
    const mac = '0a:58:0a:0b:0c:0d';
    const net = network({
      cniVersion: '1.0.0',
      name: unique('net'),
      plugins: [
        { type: 'bridge', bridge: bridgeName(), ipam: { type: 'host-local', subnet: s.cidr, dataDir: lease } },
        { type: 'tuning', mac, sysctl: { 'net.ipv4.conf.eth1.arp_filter': '1' } },
      ],
    });
    const pod = fx.create('tuning');
    const rec = recording();
    const result = must(await attachParsed(delegateDriver, request(net, pod), rec.env));
    assert.equal(rec.steps.length, 2);
    const [bridgeStep, tuningStep] = rec.steps;
    const bridgeConf = JSON.parse(bridgeStep?.config ?? '') as Record<string, unknown>;
    const tuningConf = JSON.parse(tuningStep?.config ?? '') as Record<string, unknown>;
    assert.equal(bridgeConf.prevResult, undefined, 'the first plugin has no prevResult');
    const prev = tuningConf.prevResult as { cniVersion: string; ips: { address: string }[] };
    assert.equal(prev.cniVersion, '1.0.0');
    assert.equal(prev.ips[0]?.address, `${s.base}.2/24`);
    assert.equal(pod.exec('cat', '/proc/sys/net/ipv4/conf/eth1/arp_filter').out.trim(), '1');
    assert.ok(ip('-n', pod.name, 'link', 'show', 'eth1').includes(mac));
    assert.equal(result.interfaces.find((i) => i.sandbox === pod.path)?.mac, mac, "the chain result is tuning's");
    await undo(rec.steps);
    assert.deepEqual(leases(lease, net.cniName), []);
  });

  it('releases the host-local lease on DEL after the pod netns is gone, passing CNI_NETNS=""', async () => {
    for (const f of readdirSync(spyDir)) await rm(join(spyDir, f));
    const lease = dataDir();
    const { s, conf } = bridgeHostLocal('1.0.0', lease);
    const net = network({ ...conf, type: 'spy-bridge' });
    const pod = fx.create('gone');
    const rec = recording();
    must(await attachParsed(delegateDriver, request(net, pod), rec.env));
    assert.deepEqual(leases(lease, net.cniName), [`${s.base}.2`]);
    ip('netns', 'del', pod.name);
    await undo(rec.steps);
    assert.deepEqual(leases(lease, net.cniName), []);
    const delNetns = readdirSync(spyDir)
      .filter((f) => f.startsWith('DEL.') && f.endsWith('.netns'))
      .map((f) => readFileSync(join(spyDir, f), 'utf8'));
    assert.deepEqual(delNetns, ['']);
  });

  for (const version of ['0.3.1', '0.4.0', '1.1.0']) {
    it(`parses a ${version} result from the reference bridge plugin`, async () => {
      const { s, conf } = bridgeHostLocal(version, dataDir());
      const net = network(conf);
      const pod = fx.create(`v${version.replace(/\./g, '')}`);
      const rec = recording();
      const result = must(await attachParsed(delegateDriver, request(net, pod), rec.env));
      assert.equal(result.ips[0]?.address, `${s.base}.2/24`);
      assert.ok(result.interfaces.some((i) => i.name === 'eth1' && i.sandbox === pod.path));
      await undo(rec.steps);
    });
  }
});

describe('delegate driver: plugin configs', { skip }, () => {
  const failPluginNet = (version: string, plugins: Record<string, unknown>[]): NetworkDefinition =>
    network({ cniVersion: version, name: unique('net'), plugins: plugins.map((p) => ({ type: 'fail-plugin', ...p })) });

  it('passes runtimeConfig only for the capabilities a plugin declares', async () => {
    const log = logFile();
    const net = failPluginNet('1.0.0', [
      { capabilities: { ips: true }, logFile: log },
      { capabilities: { mac: true, bandwidth: false }, logFile: log },
      { logFile: log },
    ]);
    const pod = fx.create('caps');
    const rec = recording();
    must(
      await attachParsed(
        delegateDriver,
        request(net, pod, {
          ips: ['10.222.0.9/24'],
          mac: '0a:00:00:00:00:09',
          options: { bandwidth: { ingressRate: 1000 } },
        }),
        rec.env,
      ),
    );
    const adds = readLog(log)
      .filter((l) => l.command === 'ADD')
      .map((l) => JSON.parse(l.stdin) as Record<string, unknown>);
    assert.equal(adds.length, 3);
    assert.deepEqual(adds[0]?.runtimeConfig, { ips: ['10.222.0.9/24'] });
    assert.deepEqual(adds[1]?.runtimeConfig, { mac: '0a:00:00:00:00:09' });
    assert.equal(adds[2]?.runtimeConfig, undefined);
    await undo(rec.steps);
  });

  it('looks up runtime-provided capabilities such as pod annotations case-insensitively', async () => {
    const log = logFile();
    const net = failPluginNet('1.0.0', [
      { capabilities: { 'io.kubernetes.cri.pod-annotations': true, portMappings: true }, logFile: log },
    ]);
    const pod = fx.create('annot');
    const rec = recording();
    const runtimeConfig = new RuntimeConfig({
      'IO.Kubernetes.CRI.Pod-Annotations': { a: 'b' },
      PortMappings: [{ HostPort: 8080, ContainerPort: 80 }],
    });
    must(await attachParsed(delegateDriver, request(net, pod, { runtimeConfig }), rec.env));
    const [add] = readLog(log).filter((l) => l.command === 'ADD');
    assert.deepEqual((JSON.parse(add?.stdin ?? '') as Record<string, unknown>).runtimeConfig, {
      'io.kubernetes.cri.pod-annotations': { a: 'b' },
      portMappings: [{ HostPort: 8080, ContainerPort: 80 }],
    });
    await undo(rec.steps);
  });

  it("merges the selection's cni-args into args.cni, the annotation winning", async () => {
    const log = logFile();
    const net = failPluginNet('1.0.0', [{ args: { cni: { color: 'static', keep: 'yes' }, other: 1 }, logFile: log }]);
    const pod = fx.create('args');
    const rec = recording();
    must(
      await attachParsed(
        delegateDriver,
        request(net, pod, { options: { cniArgs: { color: 'annotation', extra: true } } }),
        rec.env,
      ),
    );
    const [add] = readLog(log).filter((l) => l.command === 'ADD');
    assert.deepEqual((JSON.parse(add?.stdin ?? '') as Record<string, unknown>).args, {
      cni: { color: 'annotation', keep: 'yes', extra: true },
      other: 1,
    });
    await undo(rec.steps);
  });

  it('refuses an IPAMClaim with code 7 before running or recording anything: Multus passes it to no plugin', async () => {
    const log = logFile();
    const net = failPluginNet('1.0.0', [{ logFile: log }, { logFile: log }]);
    const pod = fx.create('claim');
    const rec = recording();
    const e = failure(
      await attachParsed(delegateDriver, request(net, pod, { options: { ipamClaim: 'vm1.storage' } }), rec.env),
    );
    assert.equal(e.code, CniCode.InvalidNetworkConfig);
    assert.equal(
      e.message,
      `network ${net.key} is delegated to fail-plugin, fail-plugin, which cannot honour IPAMClaim vm1.storage (ipam-claim-reference): Multus passes it to no plugin`,
    );
    assert.equal(rec.steps.length, 0);
    assert.deepEqual(readLog(log), []);
  });

  it('hands OVN-Kubernetes, which reads the claim from the pod itself, exactly what Multus does: no claim in config or CNI_ARGS', async () => {
    if (!existsSync(join(binDir, 'ovn-k8s-cni-overlay'))) symlinkSync(FAIL_PLUGIN, join(binDir, 'ovn-k8s-cni-overlay'));
    const log = logFile();
    const name = unique('net');
    const net = network({
      cniVersion: '1.0.0',
      name,
      type: 'ovn-k8s-cni-overlay',
      netAttachDefName: `default/${name}`,
      topology: 'localnet',
      logFile: log,
    });
    const pod = fx.create('ovnk');
    const rec = recording();
    const req = request(net, pod, { options: { ipamClaim: 'vm1.storage' } });
    must(await attachParsed(delegateDriver, req, rec.env));
    const [add] = readLog(log);
    assert.equal(
      add?.stdin,
      JSON.stringify({
        cniVersion: '1.0.0',
        name,
        type: 'ovn-k8s-cni-overlay',
        netAttachDefName: `default/${name}`,
        topology: 'localnet',
        logFile: log,
      }),
    );
    assert.equal(add?.env.CNI_ARGS, 'IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=pod');
    await undo(rec.steps);
  });

  it('execs plugins with the CNI environment', async () => {
    const log = logFile();
    const net = failPluginNet('1.0.0', [{ logFile: log }]);
    const pod = fx.create('env');
    const rec = recording();
    const req = request(net, pod);
    must(await attachParsed(delegateDriver, req, rec.env));
    const [add] = readLog(log);
    assert.deepEqual(add?.env, {
      CNI_COMMAND: 'ADD',
      CNI_CONTAINERID: req.containerId,
      CNI_NETNS: pod.path,
      CNI_IFNAME: 'eth1',
      CNI_ARGS: req.cniArgs,
      CNI_PATH: binDir,
    });
    await undo(rec.steps);
  });
});

describe('delegate driver: failures and DEL', { skip }, () => {
  it("surfaces a plugin error with the plugin's code and message", async () => {
    const net = network({
      cniVersion: '1.0.0',
      name: unique('net'),
      type: 'fail-plugin',
      failOn: 'ADD',
      failCode: 142,
    });
    const pod = fx.create('err');
    const rec = recording();
    const e = failure(await attachParsed(delegateDriver, request(net, pod), rec.env));
    assert.equal(e.code, 142);
    assert.match(e.message, /plugin fail-plugin: failing on demand$/);
    assert.equal(e.details, 'failOn=ADD');
    assert.equal(rec.steps.length, 1, 'the step is recorded before the ADD that failed');
    await undo(rec.steps);
  });

  it('runs DEL in the reverse order of ADD, each with its ADD bytes', async () => {
    const log = logFile();
    const net = network({
      cniVersion: '1.1.0',
      name: unique('net'),
      plugins: ['p1', 'p2', 'p3'].map((tag) => ({ type: 'fail-plugin', tag, logFile: log })),
    });
    const pod = fx.create('order');
    const rec = recording();
    must(await attachParsed(delegateDriver, request(net, pod), rec.env));
    await undo(rec.steps);
    const lines = readLog(log);
    const tag = (l: LogLine): string => `${l.command} ${String((JSON.parse(l.stdin) as Record<string, unknown>).tag)}`;
    assert.deepEqual(lines.map(tag), ['ADD p1', 'ADD p2', 'ADD p3', 'DEL p3', 'DEL p2', 'DEL p1']);
    const addBytes = lines.filter((l) => l.command === 'ADD').map((l) => l.stdin);
    const delBytes = lines
      .filter((l) => l.command === 'DEL')
      .map((l) => l.stdin)
      .reverse();
    assert.deepEqual(delBytes, addBytes);
    assert.deepEqual(
      addBytes,
      rec.steps.map((s) => s.config),
    );
  });

  it("after a failure on the third plugin's ADD, the recorded DELs leave no link and no lease", async () => {
    const lease = dataDir();
    const s = subnet();
    const log = logFile();
    const net = network({
      cniVersion: '1.0.0',
      name: unique('net'),
      plugins: [
        { type: 'bridge', bridge: bridgeName(), ipam: { type: 'host-local', subnet: s.cidr, dataDir: lease } },
        { type: 'fail-plugin', logFile: log },
        { type: 'fail-plugin', logFile: log, failOn: 'ADD' },
      ],
    });
    const pod = fx.create('third');
    const rec = recording();
    const e = failure(await attachParsed(delegateDriver, request(net, pod), rec.env));
    assert.match(e.message, /plugin 3\/3 \(fail-plugin\)/);
    assert.deepEqual(
      rec.steps.map((st) => st.plugin),
      ['bridge', 'fail-plugin', 'fail-plugin'],
    );
    assert.deepEqual(leases(lease, net.cniName), [`${s.base}.2`]);
    const hostVeths = ip('-o', 'link', 'show', 'master', net.plugins[0]?.bridge as string);
    assert.match(hostVeths, /veth/);
    await undo(rec.steps);
    assert.deepEqual(leases(lease, net.cniName), []);
    assert.deepEqual(podLinks(pod), ['lo']);
    assert.equal(
      ip('-o', 'link', 'show', 'master', net.plugins[0]?.bridge as string).trim(),
      '',
      'no host veth left on the bridge',
    );
  });

  it('reports a missing plugin binary by name, recording nothing', async () => {
    const net = network({ cniVersion: '1.0.0', name: unique('net'), type: 'no-such-plugin' });
    const pod = fx.create('missing');
    const rec = recording();
    const e = failure(await attachParsed(delegateDriver, request(net, pod), rec.env));
    assert.equal(e.code, CniCode.Internal);
    assert.match(e.message, /plugin no-such-plugin not found/);
    assert.equal(rec.steps.length, 0);
  });

  it('rejects a plugin type that is a path with code 7', async () => {
    const pod = fx.create('path');
    for (const type of ['../bin/bridge', join(DEBIAN_PLUGINS, 'bridge'), '..']) {
      const net = network({ cniVersion: '1.0.0', name: unique('net'), type });
      const rec = recording();
      const e = failure(await attachParsed(delegateDriver, request(net, pod), rec.env));
      assert.equal(e.code, CniCode.InvalidNetworkConfig, e.message);
      assert.ok(e.message.includes(type), e.message);
      assert.equal(rec.steps.length, 0);
      assert.equal(failure(delegateDriver.parse([net.plugins[0] as never])).code, CniCode.InvalidNetworkConfig);
    }
  });

  it('fails DEL with code 100 naming the plugin when its binary has gone', async () => {
    const step: DelegateDelStep = {
      plugin: 'vanished-plugin',
      config: '{"cniVersion":"1.0.0","name":"x","type":"vanished-plugin"}',
      env: { containerId: 'c1', netns: '', ifname: 'eth1', args: '', path: binDir },
    };
    const e = failure(await runDelegateDel(step));
    assert.equal(e.code, CniCode.Internal);
    assert.match(e.message, /vanished-plugin/);
  });

  it('kills a plugin that exceeds the timeout and fails with code 11', async () => {
    const log = logFile();
    const net = network({
      cniVersion: '1.0.0',
      name: unique('net'),
      type: 'fail-plugin',
      sleepMs: 30_000,
      logFile: log,
    });
    const pod = fx.create('slow');
    const rec = recording();
    const started = Date.now();
    const e = failure(await attachParsed(createDelegateDriver({ timeoutMs: 500 }), request(net, pod), rec.env));
    assert.equal(e.code, CniCode.TryAgainLater);
    assert.match(e.message, /timed out/);
    assert.ok(Date.now() - started < 10_000);
    const [add] = readLog(log);
    assert.ok(add, 'the plugin ran');
    assert.throws(() => process.kill(add.pid, 0), /ESRCH/, 'the plugin process is gone');
    await undo(rec.steps);
  });

  it('fails with code 100 naming the plugin when its result is not JSON', async () => {
    const net = network({ cniVersion: '1.0.0', name: unique('net'), type: 'fail-plugin', rawOutput: 'all good!' });
    const pod = fx.create('garbage');
    const rec = recording();
    const e = failure(await attachParsed(delegateDriver, request(net, pod), rec.env));
    assert.equal(e.code, CniCode.Internal);
    assert.match(e.message, /plugin fail-plugin printed no JSON result/);
    await undo(rec.steps);
  });

  it('fails with code 100 when a plugin answers in another version than asked', async () => {
    const net = network({
      cniVersion: '1.0.0',
      name: unique('net'),
      type: 'fail-plugin',
      result: { cniVersion: '0.4.0', ips: [] },
    });
    const pod = fx.create('vmis');
    const rec = recording();
    const e = failure(await attachParsed(delegateDriver, request(net, pod), rec.env));
    assert.equal(e.code, CniCode.Internal);
    assert.match(
      e.message,
      /fail-plugin returned an invalid result: result has cniVersion 0\.4\.0, but the config asked for 1\.0\.0/,
    );
    await undo(rec.steps);
  });
});

describe('delegate driver: results of every version', { skip }, () => {
  const v0 = (version: string) => ({
    cniVersion: version,
    interfaces: [{ name: 'eth1', mac: '0a:00:00:00:00:01', sandbox: '/var/run/netns/x' }],
    ips: [
      { version: '4', address: '10.230.0.5/24', gateway: '10.230.0.1', interface: 0 },
      { version: '6', address: 'fd00::5/64' },
    ],
    routes: [{ dst: '0.0.0.0/0', gw: '10.230.0.1' }],
    dns: { nameservers: ['10.230.0.1'] },
  });
  const expected: CniResult = {
    interfaces: [{ name: 'eth1', mac: '0a:00:00:00:00:01', sandbox: '/var/run/netns/x' }],
    ips: [{ address: '10.230.0.5/24', gateway: '10.230.0.1', interface: 0 }, { address: 'fd00::5/64' }],
    routes: [{ dst: '0.0.0.0/0', gw: '10.230.0.1' }],
    dns: { nameservers: ['10.230.0.1'] },
  };
  const cases: [string, Record<string, unknown>, CniResult][] = [
    ['0.3.0', v0('0.3.0'), expected],
    ['0.3.1', v0('0.3.1'), expected],
    ['0.4.0', v0('0.4.0'), expected],
    ['1.0.0', convertResult(expected, '1.0.0'), expected],
    [
      '1.1.0',
      {
        cniVersion: '1.1.0',
        interfaces: [
          { name: 'eth1', mac: '0a:00:00:00:00:01', sandbox: '/var/run/netns/x', mtu: 1400, pciID: '0000:00:01.0' },
        ],
        ips: [{ address: '10.230.0.5/24', gateway: '10.230.0.1', interface: 0 }],
        routes: [{ dst: '10.0.0.0/8', gw: '10.230.0.1', table: 100, priority: 5 }],
      },
      {
        interfaces: [
          { name: 'eth1', mac: '0a:00:00:00:00:01', sandbox: '/var/run/netns/x', mtu: 1400, pciID: '0000:00:01.0' },
        ],
        ips: [{ address: '10.230.0.5/24', gateway: '10.230.0.1', interface: 0 }],
        routes: [{ dst: '10.0.0.0/8', gw: '10.230.0.1', table: 100, priority: 5 }],
      },
    ],
  ];
  for (const [version, printed, want] of cases) {
    it(`parses a ${version} result printed by a plugin`, async () => {
      const net = network({ cniVersion: version, name: unique('net'), type: 'fail-plugin', result: printed });
      const pod = fx.create(`r${version.replace(/\./g, '')}`);
      const rec = recording();
      assert.deepEqual(must(await attachParsed(delegateDriver, request(net, pod), rec.env)), want);
      await undo(rec.steps);
    });
  }

  it('hands the next plugin the previous result in its own version (0.4.0 carries ips[].version)', async () => {
    const log = logFile();
    const net = network({
      cniVersion: '0.4.0',
      name: unique('net'),
      plugins: [
        { type: 'fail-plugin', result: v0('0.4.0') },
        { type: 'fail-plugin', logFile: log },
      ],
    });
    const pod = fx.create('prev04');
    const rec = recording();
    assert.deepEqual(must(await attachParsed(delegateDriver, request(net, pod), rec.env)), expected);
    const [add] = readLog(log);
    assert.deepEqual(
      (JSON.parse(add?.stdin ?? '') as Record<string, unknown>).prevResult,
      convertResult(expected, '0.4.0'),
    );
    await undo(rec.steps);
  });
});

describe('CHECK, STATUS and GC forwarding', { skip }, () => {
  it('CHECKs the reference bridge plugin with the stored result', async () => {
    const lease = dataDir();
    const { conf } = bridgeHostLocal('1.0.0', lease);
    const net = network(conf);
    const pod = fx.create('check');
    const rec = recording();
    const result = must(await attachParsed(delegateDriver, request(net, pod), rec.env));
    must(await delegateCheck(rec.steps, result));
    ip('-n', pod.name, 'addr', 'flush', 'dev', 'eth1');
    const e = failure(await delegateCheck(rec.steps, result));
    assert.match(e.message, /^CHECK .*plugin 1\/1 \(bridge\): plugin bridge: /);
    await undo(rec.steps);
  });

  it('CHECK stops at the first failing plugin and skips versions without CHECK', async () => {
    const log = logFile();
    const net = network({
      cniVersion: '1.0.0',
      name: unique('net'),
      plugins: [
        { type: 'fail-plugin', logFile: log, tag: 'a' },
        { type: 'fail-plugin', logFile: log, failOn: 'CHECK' },
        { type: 'fail-plugin', logFile: log, tag: 'c' },
      ],
    });
    const pod = fx.create('check2');
    const rec = recording();
    const result = must(await attachParsed(delegateDriver, request(net, pod), rec.env));
    const e = failure(await delegateCheck(rec.steps, result));
    assert.equal(e.code, 117);
    assert.match(e.message, /plugin 2\/3 \(fail-plugin\): plugin fail-plugin: failing on demand/);
    const checks = readLog(log).filter((l) => l.command === 'CHECK');
    assert.equal(checks.length, 2);
    assert.deepEqual(
      (JSON.parse(checks[0]?.stdin ?? '') as Record<string, unknown>).prevResult,
      convertResult(result, '1.0.0'),
    );
    await undo(rec.steps);

    const old = network({ cniVersion: '0.3.1', name: unique('net'), type: 'fail-plugin', failOn: 'CHECK' });
    const rec2 = recording();
    const r2 = must(await attachParsed(delegateDriver, request(old, pod), rec2.env));
    must(await delegateCheck(rec2.steps, r2));
    await undo(rec2.steps);
  });

  it('STATUS returns the first failing plugin, and succeeds without exec for networks below 1.1.0', async () => {
    const log = logFile();
    must(
      await delegateStatus(
        network({ cniVersion: '1.1.0', name: unique('net'), plugins: [{ type: 'fail-plugin', logFile: log }] }),
        binDir,
      ),
    );
    const e = failure(
      await delegateStatus(
        network({
          cniVersion: '1.1.0',
          name: unique('net'),
          plugins: [
            { type: 'fail-plugin', logFile: log },
            { type: 'fail-plugin', failOn: 'STATUS', failCode: 50 },
          ],
        }),
        binDir,
      ),
    );
    assert.equal(e.code, 50);
    assert.match(e.message, /plugin 2\/2/);
    must(
      await delegateStatus(
        network({ cniVersion: '1.0.0', name: unique('net'), type: 'fail-plugin', failOn: 'STATUS', logFile: log }),
        binDir,
      ),
    );
    assert.deepEqual(
      readLog(log).map((l) => [l.command, l.env.CNI_COMMAND]),
      [
        ['STATUS', 'STATUS'],
        ['STATUS', 'STATUS'],
      ],
    );
    assert.equal(
      failure(
        await delegateStatus(network({ cniVersion: '1.1.0', name: unique('net'), type: 'not-installed' }), binDir),
      ).code,
      CniCode.PluginNotAvailable,
    );
  });

  it('GC passes the valid attachments to every plugin, continuing past a failure', async () => {
    const log = logFile();
    const net = network({
      cniVersion: '1.1.0',
      name: unique('net'),
      plugins: [
        { type: 'fail-plugin', failOn: 'GC', logFile: log },
        { type: 'fail-plugin', logFile: log },
      ],
    });
    const e = failure(await delegateGc(net, [{ containerId: 'c1', ifname: 'eth1' }], binDir));
    assert.match(e.message, /^GC of network .*plugin 1\/2/);
    const gcs = readLog(log).filter((l) => l.command === 'GC');
    assert.equal(gcs.length, 2);
    const conf = JSON.parse(gcs[1]?.stdin ?? '') as Record<string, unknown>;
    assert.deepEqual(conf['cni.dev/valid-attachments'], [{ containerID: 'c1', ifname: 'eth1' }]);
    assert.deepEqual(conf['cni.dev/attachments'], [{ containerID: 'c1', ifname: 'eth1' }]);
  });
});

describe('delegate exec: a plugin binary being rewritten', { skip }, () => {
  // An installer writing the binary holds it open for writing: execve fails with ETXTBSY until it closes it.
  const busyPlugin = async (): Promise<{ path: string; dir: string; fd: number }> => {
    const dir = await mkdtemp(join(tmpdir(), 'plexus-busy-'));
    const path = join(dir, 'loopback');
    writeFileSync(path, readFileSync(join(referencePlugins(), 'loopback')), { mode: 0o755 });
    return { path, dir, fd: openSync(path, 'r+') };
  };
  const version = (path: string) => ({
    command: 'VERSION' as const,
    type: 'loopback',
    network: 'lo',
    path,
    stdin: '{"cniVersion":"1.0.0"}',
    cniPath: referencePlugins(),
  });

  it("is exec'd again once the writer is done, and answers", async () => {
    const p = await busyPlugin();
    try {
      const started = Date.now();
      setTimeout(() => closeSync(p.fd), 300);
      const r = await execPlugin(version(p.path));
      assert.ok(r.ok, !r.ok ? r.error.message : '');
      assert.match(r.value.stdout, /supportedVersions/);
      assert.ok(Date.now() - started >= 250, 'it waited for the writer');
    } finally {
      await rm(p.dir, { recursive: true, force: true });
    }
  });

  it("fails with the kernel's reason once the retry budget is spent", async () => {
    const p = await busyPlugin();
    try {
      const r = await execPlugin(version(p.path), { busyRetryMs: 300 });
      assert.ok(
        !r.ok && r.error.details === 'ETXTBSY' && /cannot exec .*loopback/.test(r.error.message),
        !r.ok ? r.error.message : 'ran',
      );
    } finally {
      closeSync(p.fd);
      await rm(p.dir, { recursive: true, force: true });
    }
  });
});
