/** The pure parts of delegation: the config a plugin receives, and parsing what it prints. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { RuntimeConfig } from '../../src/cni/args';
import { CniCode, type Result } from '../../src/cni/errors';
import type { CniResult } from '../../src/cni/types';
import { convertResult } from '../../src/cni/version';
import { buildPluginConfig, parseCniResult, parsePluginError } from '../../src/drivers/delegate';
import type { AttachRequest } from '../../src/drivers/driver';
import type { NetworkDefinition, PluginConfig } from '../../src/networks/nad';

const must = <T>(r: Result<T>): T => {
  if (!r.ok) assert.fail(`expected ok, got ${r.error.code}: ${r.error.message}`);
  return r.value;
};
const failure = <T>(r: Result<T>): { code: number; message: string } => {
  if (r.ok) assert.fail(`expected an error, got ${JSON.stringify(r.value)}`);
  return { code: r.error.code, message: r.error.message };
};

const plugin = (extra: Record<string, unknown> = {}): PluginConfig => ({
  cniVersion: '0.4.0',
  name: 'blue',
  type: 'macvlan',
  master: 'eth0',
  ...extra,
});
const request = (p: PluginConfig, extra: Partial<AttachRequest> = {}): AttachRequest => ({
  containerId: 'c1',
  netns: '/var/run/netns/x',
  ifname: 'net1',
  runtimeIfname: 'eth0',
  pod: {},
  network: { plugins: [p] } as unknown as NetworkDefinition,
  plugin: p,
  ips: [],
  runtimeConfig: new RuntimeConfig({}),
  ...extra,
});

describe('buildPluginConfig', () => {
  it('leaves a plugin without capabilities, args or predecessor exactly as defined', () => {
    const p = plugin({ runtimeConfig: { static: true } });
    assert.deepEqual(buildPluginConfig(p, request(p, { ips: ['10.0.0.2/24'] }), undefined), p);
  });

  it("puts the selection's ipam-claim-reference nowhere in the config, as Multus does", () => {
    const p = plugin({ type: 'ovn-k8s-cni-overlay', capabilities: { ips: true, mac: true } });
    assert.equal(
      JSON.stringify(buildPluginConfig(p, request(p, { options: { ipamClaim: 'vm1.storage' } }), undefined)),
      '{"cniVersion":"0.4.0","name":"blue","type":"ovn-k8s-cni-overlay","master":"eth0","capabilities":{"ips":true,"mac":true}}',
    );
  });

  it('replaces a static runtimeConfig with the declared capabilities, as libcni does', () => {
    const p = plugin({
      capabilities: { ips: true, mac: true, deviceID: true, infinibandGUID: false },
      runtimeConfig: { static: true },
    });
    const req = request(p, {
      ips: ['10.0.0.2/24'],
      mac: '0a:00:00:00:00:01',
      options: { deviceID: '0000:01:00.1', infinibandGUID: 'x' },
    });
    assert.deepEqual(buildPluginConfig(p, req, undefined).runtimeConfig, {
      ips: ['10.0.0.2/24'],
      mac: '0a:00:00:00:00:01',
      deviceID: '0000:01:00.1',
    });
  });

  it('adds cni-args under args.cni even when the plugin has no args', () => {
    const p = plugin();
    assert.deepEqual(buildPluginConfig(p, request(p, { options: { cniArgs: { a: 1 } } }), undefined).args, {
      cni: { a: 1 },
    });
  });

  it("converts prevResult to the plugin's cniVersion", () => {
    const prev: CniResult = {
      interfaces: [{ name: 'net1', sandbox: '/x' }],
      ips: [{ address: '10.0.0.2/24', interface: 0 }],
      routes: [],
    };
    const p = plugin();
    assert.deepEqual(buildPluginConfig(p, request(p), prev).prevResult, convertResult(prev, '0.4.0'));
    assert.equal(
      (buildPluginConfig(p, request(p), prev).prevResult as { ips: { version: string }[] }).ips[0]?.version,
      '4',
    );
  });
});

describe('parseCniResult', () => {
  it("treats a result without cniVersion as the config's version and Go nulls as empty", () => {
    assert.deepEqual(
      must(parseCniResult({ ips: [{ address: '10.0.0.2/24' }], interfaces: null, routes: null, dns: {} }, '1.0.0')),
      {
        interfaces: [],
        ips: [{ address: '10.0.0.2/24' }],
        routes: [],
      },
    );
  });

  it('drops 1.1-only fields from older results', () => {
    const r = must(
      parseCniResult(
        {
          cniVersion: '1.0.0',
          interfaces: [{ name: 'a', mtu: 1400 }],
          ips: [],
          routes: [{ dst: '10.0.0.0/8', table: 5 }],
        },
        '1.0.0',
      ),
    );
    assert.deepEqual(r, { interfaces: [{ name: 'a' }], ips: [], routes: [{ dst: '10.0.0.0/8' }] });
  });

  const rejects = (json: unknown, version: '0.4.0' | '1.0.0', mentions: RegExp): void => {
    const e = failure(parseCniResult(json, version));
    assert.equal(e.code, CniCode.Internal);
    assert.match(e.message, mentions);
  };

  it("rejects a result in another version than the config's", () =>
    rejects({ cniVersion: '1.0.0', ips: [] }, '0.4.0', /cniVersion 1\.0\.0, but the config asked for 0\.4\.0/));
  it('rejects an unknown result version', () =>
    rejects({ cniVersion: '9.9.9' }, '1.0.0', /unsupported cniVersion "9\.9\.9"/));
  it('rejects an address that is not in CIDR notation', () =>
    rejects({ ips: [{ address: '10.0.0.2' }] }, '1.0.0', /ips\[0\]\.address: must be an address in CIDR notation/));
  it('rejects a 0.x IP version that contradicts its address', () =>
    rejects({ ips: [{ version: '6', address: '10.0.0.2/24' }] }, '0.4.0', /version "6" does not match/));
  it('rejects an interface index past the interfaces list', () =>
    rejects(
      { interfaces: [], ips: [{ address: '10.0.0.2/24', interface: 0 }] },
      '1.0.0',
      /interface index 0 is out of range/,
    ));
  it('rejects a result that is not an object', () => rejects('ok', '1.0.0', /not a CNI 1\.0\.0 result/));
});

describe('parsePluginError', () => {
  it('reads a CNI error object', () =>
    assert.deepEqual(parsePluginError('{"cniVersion":"1.0.0","code":7,"msg":"bad","details":"d"}'), {
      code: 7,
      msg: 'bad',
      details: 'd',
    }));
  it('ignores output that is not an error object', () => {
    assert.equal(parsePluginError('panic: runtime error'), undefined);
    assert.equal(parsePluginError('{"cniVersion":"1.0.0","ips":[]}'), undefined);
  });
});
