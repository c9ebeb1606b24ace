/**
 * The native bridge driver against the reference bridge plugin 1.9.1, option by option: the same config ADDed through
 * each into a node and a pod netns of its own, then everything a pod and its node can observe compared
 * (test/drivers/observe.ts). An option Plexus does not run natively must be refused with code 2 and the way to
 * delegate the network to the reference plugin instead.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { createBridgeDriver } from '../../src/drivers/bridge';
import { ip } from '../support/netns';
import { expectedPrerequisites } from '../support/prerequisites';
import { callPlugin } from '../support/plugin-call';
import { referencePlugins, referencePluginsMissing } from '../support/plugin-dir';
import { differences, type Observation, observe } from './observe';
import { attachParsed, attachRequest, driverTestbed, failure, must, plugin, RecordingEnv } from './support';

const bed = driverTestbed('pbd');
const { prefix, fx } = bed;
/** The reference plugins 1.9.1, unpacked once per machine. */
const plugins = (): string => referencePlugins();
let dataDir = '';
before(() => {
  dataDir = mkdtempSync(join(tmpdir(), 'plexus-bridge-diff-'));
});
after(() => rmSync(dataDir, { recursive: true, force: true }));

const BRIDGE = 'cnibr0';
let caseNo = 0;

interface Case {
  /** The bridge plugin's keys besides type, name and ipam. */
  readonly config: Record<string, unknown>;
  readonly ipam?: Record<string, unknown> | null;
  /** The runtime's MAC for the pod interface (capability `mac`). */
  readonly mac?: string;
  /** Done in each node before the ADD (e.g. a bridge that already has an address). */
  readonly prepare?: (node: string) => void;
}

const ipamOf = (c: Case): Record<string, unknown> | undefined =>
  c.ipam === null
    ? undefined
    : (c.ipam ?? {
        type: 'host-local',
        ranges: [[{ subnet: '10.77.0.0/24' }], [{ subnet: 'fd77::/64' }]],
        routes: [{ dst: '192.0.2.0/24' }],
        dataDir: join(dataDir, String(caseNo)),
      });

/** ADDs the case through the reference plugin, in a node and pod of its own: what they then show. */
function throughReference(c: Case): Observation {
  const tag = `r${++caseNo}`;
  const node = fx.create(`${tag}n`);
  const pod = fx.create(`${tag}p`);
  c.prepare?.(node.name);
  const ipam = ipamOf(c);
  const config = {
    cniVersion: '1.0.0',
    name: `${prefix}-net`,
    type: 'bridge',
    bridge: BRIDGE,
    ...c.config,
    ...(ipam ? { ipam } : {}),
    ...(c.mac ? { runtimeConfig: { mac: c.mac } } : {}),
  };
  const call = { dir: plugins(), config, containerId: `${prefix}${tag}`, netns: pod.path, ifname: 'eth0' };
  const add = callPlugin({ ...call, command: 'ADD', node: node.name });
  assert.equal(add.status, 0, `the reference ADD failed: ${JSON.stringify(add.answer)}`);
  // The driver's result has no version: the engine answers in the runtime's.
  const { cniVersion: _version, ...result } = add.answer;
  return observe({ node, pod, ifname: 'eth0', bridge: BRIDGE, result, keepMacs: c.mac ? [c.mac] : [] });
}

/** ADDs the case through the native driver, in a node and pod of its own: what they then show. */
async function throughPlexus(c: Case): Promise<Observation> {
  const tag = `p${++caseNo}`;
  const node = fx.create(`${tag}n`);
  const pod = fx.create(`${tag}p`);
  c.prepare?.(node.name);
  const ipam = ipamOf(c);
  const rec = new RecordingEnv(bed.kernel, bed.ipam);
  const req = attachRequest({
    network: `${prefix}-net${caseNo}`,
    config: { type: 'bridge', bridge: BRIDGE, ...c.config, ...(ipam ? { ipam } : {}) },
    netns: pod.path,
    ifname: 'eth0',
    ...(c.mac ? { mac: c.mac } : {}),
  });
  const result = must(await attachParsed(createBridgeDriver({ node: node.path }), req, rec.env));
  // Plexus also reports each interface's MTU (CNI 1.1), which the reference leaves out: the one known addition.
  const interfaces = result.interfaces.map(({ mtu: _mtu, ...i }) => i);
  return observe({
    node,
    pod,
    ifname: 'eth0',
    bridge: BRIDGE,
    result: { ...result, interfaces },
    keepMacs: c.mac ? [c.mac] : [],
  });
}

async function sameAsReference(c: Case): Promise<void> {
  const theirs = throughReference(c);
  const ours = await throughPlexus(c);
  assert.deepEqual(differences(theirs, ours), []);
}

/** The native driver refuses the config with code 2, saying how to delegate it to the reference plugin. */
function refusedNatively(config: Record<string, unknown>, option: string): void {
  const refused = failure(createBridgeDriver().parse([plugin('n', { type: 'bridge', ...config })]));
  assert.equal(refused.code, 2, refused.message);
  assert.match(refused.message, new RegExp(`"${option}" is not supported natively`));
  assert.match(refused.message, /plexus\.io\/delegate: "true"/);
}

describe(
  'bridge driver against the reference bridge plugin 1.9.1',
  { skip: expectedPrerequisites(referencePluginsMissing()) },
  () => {
    it('the defaults: a port on the bridge and the pod addresses and routes', () => sameAsReference({ config: {} }));
    it('isGateway', () => sameAsReference({ config: { isGateway: true } }));
    it('isDefaultGateway', () => sameAsReference({ config: { isDefaultGateway: true } }));
    it('mtu', () => sameAsReference({ config: { isGateway: true, mtu: 1400 } }));
    it('hairpinMode', () => sameAsReference({ config: { hairpinMode: true } }));
    it('promiscMode', () => sameAsReference({ config: { promiscMode: true } }));
    it('mac (the runtime asks for one)', () => sameAsReference({ config: {}, mac: '02:42:ac:11:00:09' }));
    it('enabledad', () => sameAsReference({ config: { enabledad: true } }));
    it('forceAddress', () =>
      sameAsReference({
        config: { isGateway: true, forceAddress: true },
        prepare: (node) => {
          ip('-n', node, 'link', 'add', BRIDGE, 'type', 'bridge');
          ip('-n', node, 'addr', 'add', '192.0.2.1/24', 'dev', BRIDGE);
          // A bridge that was there before the ADD, up for a while.
          ip('-n', node, 'link', 'set', BRIDGE, 'up');
          execFileSync('sleep', ['0.3']);
        },
      }));
    it('no ipam: an L2 port', () => sameAsReference({ config: {}, ipam: null }));
    it('disableContainerInterface', () => sameAsReference({ config: { disableContainerInterface: true }, ipam: null }));

    it('refuses natively what it does not run, saying how to delegate', () => {
      refusedNatively({ ipMasq: true }, 'ipMasq');
      refusedNatively({ vlan: 7 }, 'vlan');
      refusedNatively({ vlanTrunk: [{ id: 7 }] }, 'vlanTrunk');
      refusedNatively({ macspoofchk: true }, 'macspoofchk');
      refusedNatively({ portIsolation: true }, 'portIsolation');
    });
  },
);
