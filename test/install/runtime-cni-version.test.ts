/**
 * The cniVersion of the conflist plexusd installs: the highest the node's runtime reads, from what the kubelet reports
 * in its Node (docs/configuration.md, "Which cniVersion").
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  conflistVersion,
  type ConflistVersionInputs,
  parseContainerRuntime,
  type RuntimeLookup,
  runtimeOfNode,
  runtimeUnknown,
} from '../../src/install/runtime-cni-version';

const nodeReporting = (containerRuntimeVersion: unknown): unknown => ({
  metadata: { name: 'n1' },
  status: { nodeInfo: { kubeletVersion: 'v1.36.3', containerRuntimeVersion } },
});
const known = (reported: string): RuntimeLookup => runtimeOfNode(nodeReporting(reported), 'n1');
const auto = (runtime: RuntimeLookup, defaultNetworkVersion?: string): string =>
  conflistVersion({ setting: 'auto', runtime, defaultNetworkVersion }).cniVersion;

describe('the runtime a Node reports', () => {
  it('reads the name, major and minor of containerd, CRI-O and Debian builds, with or without a "v"', () => {
    for (const [reported, name, major, minor] of [
      ['containerd://2.1.9', 'containerd', 2, 1],
      ['containerd://v2.0.0', 'containerd', 2, 0],
      ['containerd://1.6.20~ds1', 'containerd', 1, 6],
      ['containerd://1.7.22-0ubuntu1', 'containerd', 1, 7],
      ['cri-o://1.31.0', 'cri-o', 1, 31],
      ['docker://24.0.7', 'docker', 24, 0],
    ] as const)
      assert.deepEqual(parseContainerRuntime(reported), { reported, name, major, minor }, reported);
  });

  it('is unknown, saying why, when the Node has no runtime version or one that is not <name>://<version>', () => {
    for (const node of [
      {},
      { status: {} },
      nodeReporting(''),
      nodeReporting(42),
      nodeReporting('x'.repeat(257)),
      null,
      'text',
    ])
      assert.deepEqual(
        runtimeOfNode(node, 'n1'),
        runtimeUnknown('the Node n1 reports no status.nodeInfo.containerRuntimeVersion'),
      );
    for (const reported of ['containerd', 'containerd://', 'containerd://two', '://2.1.9', 'Containerd://2.1.9'])
      assert.deepEqual(
        runtimeOfNode(nodeReporting(reported), 'n1'),
        runtimeUnknown(`the Node n1 reports a runtime version Plexus cannot read: ${JSON.stringify(reported)}`),
      );
  });
});

describe("the conflist's cniVersion (auto)", () => {
  it('is 1.1.0 on containerd 2 and later and CRI-O 1.31 and later, whatever the default network file says', () => {
    for (const reported of [
      'containerd://2.0.0',
      'containerd://2.1.9',
      'containerd://3.0.1',
      'cri-o://1.31.0',
      'cri-o://2.0.0',
    ])
      for (const file of [undefined, '0.3.1', '1.0.0'])
        assert.equal(auto(known(reported), file), '1.1.0', `${reported}, default network file ${file}`);
  });

  it('is 1.0.0 on containerd 1.6 and 1.7 and CRI-O before 1.31, even when the default network file says 1.1.0', () => {
    for (const reported of ['containerd://1.6.20~ds1', 'containerd://1.7.30', 'cri-o://1.30.4', 'cri-o://1.28.0'])
      for (const file of [undefined, '0.3.1', '1.1.0'])
        assert.equal(auto(known(reported), file), '1.0.0', `${reported}, default network file ${file}`);
  });

  it("is the default network file's version, else 1.0.0, when the runtime is not known or is one Plexus has no facts about", () => {
    for (const runtime of [runtimeUnknown('no Kubernetes API'), known('docker://24.0.7'), known('containerd')]) {
      assert.equal(auto(runtime, '0.4.0'), '0.4.0');
      assert.equal(auto(runtime), '1.0.0');
    }
  });

  it('says why, naming the runtime or the reason it is not known', () => {
    assert.equal(
      conflistVersion({ setting: 'auto', runtime: known('containerd://2.1.9') }).why,
      'the highest version containerd://2.1.9 reads',
    );
    assert.equal(
      conflistVersion({ setting: 'auto', runtime: runtimeUnknown('no Kubernetes API'), defaultNetworkVersion: '0.4.0' })
        .why,
      "no Kubernetes API: the default network file's version",
    );
    assert.equal(
      conflistVersion({ setting: 'auto', runtime: known('docker://24.0.7') }).why,
      'Plexus has no facts about the runtime docker://24.0.7: 1.0.0, which every runtime reads',
    );
  });
});

describe("the conflist's cniVersion (set)", () => {
  const set = (setting: ConflistVersionInputs['setting'], runtime: RuntimeLookup) =>
    conflistVersion({ setting, runtime, defaultNetworkVersion: '0.4.0' });

  it('is the version set, whatever the runtime and the default network file', () => {
    for (const runtime of [known('containerd://2.1.9'), known('containerd://1.6.20'), runtimeUnknown('standalone')])
      for (const setting of ['0.3.1', '1.0.0', '1.1.0'] as const)
        assert.equal(set(setting, runtime).cniVersion, setting);
  });

  it('warns, naming the runtime, when the runtime cannot read it, and only then', () => {
    assert.equal(
      set('1.1.0', known('containerd://1.6.20~ds1')).warning,
      'containerd://1.6.20~ds1 reads cniVersion up to 1.0.0: every sandbox fails on a 1.1.0 result (set --install-cni-version auto)',
    );
    assert.equal(set('1.0.0', known('containerd://1.6.20~ds1')).warning, undefined);
    assert.equal(set('1.1.0', known('containerd://2.1.9')).warning, undefined);
    assert.equal(set('1.1.0', runtimeUnknown('standalone')).warning, undefined);
  });
});
