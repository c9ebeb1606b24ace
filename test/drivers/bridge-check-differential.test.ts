/**
 * CHECK of the bridge driver against the reference bridge plugin 1.9.1's, for the node's side of a pod's port: the
 * same config ADDed through each into a node and pod netns of its own, the same change made to each by hand, then
 * both CHECKed. Both fail (each naming what is wrong) or both pass. The pod's side (its interface, MAC, addresses,
 * routes) is the engine's CHECK, the same for every driver (test/engine).
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { CniResult } from '../../src/cni/types';
import { createBridgeDriver } from '../../src/drivers/bridge';
import { ip } from '../support/netns';
import { expectedPrerequisites } from '../support/prerequisites';
import { callPlugin } from '../support/plugin-call';
import { referencePlugins, referencePluginsMissing } from '../support/plugin-dir';
import { attachParsed, attachRequest, driverTestbed, must, RecordingEnv } from './support';

const bed = driverTestbed('pbc');
const { prefix, fx } = bed;
const plugins = (): string => referencePlugins();
let dataDir = '';
before(() => {
  dataDir = mkdtempSync(join(tmpdir(), 'plexus-bridge-check-'));
});
after(() => rmSync(dataDir, { recursive: true, force: true }));

const BRIDGE = 'cnibr0';
let caseNo = 0;

/** A change made by hand after the ADD: `hostVeth` is the pod's host end on the node, `pod` the pod's netns name. */
type Tampering = (node: string, hostVeth: string, added: { readonly pod: string; readonly result: CniResult }) => void;

/** The bridge plugin's keys the case sets besides the bridge, isGateway and ipam. */
type Options = Record<string, unknown>;

const config = (options: Options): Record<string, unknown> => ({
  cniVersion: '1.0.0',
  name: `${prefix}-net`,
  type: 'bridge',
  bridge: BRIDGE,
  isGateway: true,
  ...options,
  ipam: { type: 'host-local', ranges: [[{ subnet: '10.78.0.0/24' }]], dataDir: join(dataDir, String(++caseNo)) },
});

/** The reference's CHECK after `tamper`: undefined when it passes, else its message. */
function referenceCheck(tamper: Tampering, options: Options): string | undefined {
  const tag = `r${++caseNo}`;
  const node = fx.create(`${tag}n`);
  const pod = fx.create(`${tag}p`);
  const conf = config(options);
  const call = { dir: plugins(), containerId: `${prefix}${tag}`, netns: pod.path, ifname: 'eth0', node: node.name };
  const add = callPlugin({ ...call, config: conf, command: 'ADD' });
  assert.equal(add.status, 0, `the reference ADD failed: ${JSON.stringify(add.answer)}`);
  const hostVeth = (add.answer as unknown as CniResult).interfaces[1]?.name;
  assert.ok(hostVeth);
  tamper(node.name, hostVeth, { pod: pod.name, result: add.answer as unknown as CniResult });
  const check = callPlugin({ ...call, config: { ...conf, prevResult: add.answer }, command: 'CHECK' });
  return check.status === 0 ? undefined : JSON.stringify(check.answer);
}

/** Plexus's CHECK of the node's side after `tamper`: undefined when it passes, else its message. */
async function plexusCheck(tamper: Tampering, options: Options): Promise<string | undefined> {
  const tag = `p${++caseNo}`;
  const node = fx.create(`${tag}n`);
  const pod = fx.create(`${tag}p`);
  const { cniVersion: _v, name: _n, ...conf } = config(options);
  const req = attachRequest({ network: `${prefix}-net${caseNo}`, config: conf, netns: pod.path, ifname: 'eth0' });
  const driver = createBridgeDriver({ node: node.path });
  const rec = new RecordingEnv(bed.kernel, bed.ipam);
  const result = must(await attachParsed(driver, req, rec.env));
  const hostVeth = result.interfaces[1]?.name;
  assert.ok(hostVeth);
  tamper(node.name, hostVeth, { pod: pod.name, result });
  const check = driver.check?.bind(driver);
  assert.ok(check, 'the bridge driver has a CHECK of its own');
  // The engine hands the driver the network's config as it is defined now.
  const parsed = must(driver.parse(req.network.plugins));
  const r = await check({ network: req.network.key, ifname: 'eth0', result, steps: rec.steps }, bed, parsed);
  return r.ok ? undefined : r.error.message;
}

/** Both CHECKs fail, Plexus's naming what `wrong` matches; or, `wrong` undefined, both pass. */
async function sameAnswer(tamper: Tampering, wrong?: RegExp, options: Options = {}): Promise<void> {
  const theirs = referenceCheck(tamper, options);
  const ours = await plexusCheck(tamper, options);
  if (!wrong) {
    assert.equal(theirs, undefined, 'the reference CHECK passes');
    assert.equal(ours, undefined, "Plexus's CHECK passes");
    return;
  }
  assert.ok(theirs, 'the reference CHECK fails');
  assert.ok(ours, `Plexus's CHECK fails as the reference's does (${theirs})`);
  assert.match(ours, wrong);
}

/**
 * The pod's interface and its host veth replaced by two veths that are not each other's peer, each with the MAC,
 * bridge port and address the result names: only the pairing tells them from the ones the ADD made.
 */
const unpaired: Tampering = (node, veth, { pod, result }) => {
  const [, hostEnd, podEnd] = result.interfaces;
  assert.ok(hostEnd?.mac && podEnd?.mac);
  ip('-n', node, 'link', 'del', veth);
  ip('-n', node, 'link', 'add', veth, 'address', hostEnd.mac, 'type', 'veth', 'peer', 'name', 'stray0');
  ip('-n', node, 'link', 'set', veth, 'master', BRIDGE, 'up');
  ip('-n', node, 'link', 'add', 'stray1', 'type', 'veth', 'peer', 'name', 'eth0', 'netns', pod);
  ip('-n', pod, 'link', 'set', 'eth0', 'address', podEnd.mac, 'up');
  for (const a of result.ips) ip('-n', pod, 'addr', 'add', a.address, 'dev', 'eth0');
};

describe(
  'bridge CHECK against the reference bridge plugin 1.9.1',
  { skip: expectedPrerequisites(referencePluginsMissing()) },
  () => {
    it('nothing changed: both pass', () => sameAnswer(() => undefined));
    it("the bridge's MAC changed: both fail", () =>
      sameAnswer(
        (node) => ip('-n', node, 'link', 'set', BRIDGE, 'address', '02:00:00:00:0b:01'),
        /bridge cnibr0 has MAC 02:00:00:00:0b:01, expected/,
      ));
    it("the host veth's MAC changed: both fail", () =>
      sameAnswer(
        (node, veth) => ip('-n', node, 'link', 'set', veth, 'address', '02:00:00:00:0b:02'),
        /host interface veth\w+ has MAC 02:00:00:00:0b:02, expected/,
      ));
    it('the host veth taken off the bridge: both fail', () =>
      sameAnswer(
        (node, veth) => ip('-n', node, 'link', 'set', veth, 'nomaster'),
        /host interface veth\w+ is no longer a port of bridge cnibr0/,
      ));
    it("the host veth is no longer the pod interface's peer (both replaced, MACs and address kept): both fail", () =>
      sameAnswer(unpaired, /host interface veth\w+ is no longer the peer of eth0/));
    it('promiscMode, nothing changed: both pass', () => sameAnswer(() => undefined, undefined, { promiscMode: true }));
    it('promiscMode, the bridge no longer promiscuous: both fail', () =>
      sameAnswer(
        (node) => ip('-n', node, 'link', 'set', BRIDGE, 'promisc', 'off'),
        /bridge cnibr0 is not promiscuous, promiscMode is true/,
        { promiscMode: true },
      ));
    it('the bridge is gone: both fail', () =>
      sameAnswer((node) => ip('-n', node, 'link', 'del', BRIDGE), /bridge cnibr0 is missing/));
  },
);
