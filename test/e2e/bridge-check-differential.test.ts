/**
 * CHECK through a real plexusd against the reference bridge plugin 1.9.1's CHECK, after someone changed the pod's
 * interface or the node's side by hand: the same bridge config ADDed through each (the reference in a node netns of
 * its own), the same change made to each, then both CHECKed. Both fail, Plexus's naming what is wrong, or both pass.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { DaemonFixture, podCall, podMaker } from '../support/daemon';
import { ip, NetnsFixture, uniquePrefix } from '../support/netns';
import { expectedPrerequisites } from '../support/prerequisites';
import { callPlugin } from '../support/plugin-call';
import { referencePlugins, referencePluginsMissing } from '../support/plugin-dir';

const prefix = uniquePrefix('bcd');
const fx = new NetnsFixture(prefix);
const daemon = new DaemonFixture('podnet');
const bridge = `${prefix}b0`;
const subnet = `10.${200 + Math.floor(Math.random() * 50)}.9.0/24`;
const newPod = podMaker(fx, prefix, ['eth0']);
const plugins = (): string => referencePlugins();
let dataDir = '';

before(async () => {
  dataDir = mkdtempSync(join(tmpdir(), 'plexus-bridge-check-e2e-'));
  fx.trackHostLink(bridge);
  daemon.writeBridgeNetwork({ name: 'podnet', bridge, subnet });
  if (!referencePluginsMissing()) await daemon.start();
});
after(async () => {
  await daemon.stop();
  fx.cleanup();
  rmSync(dataDir, { recursive: true, force: true });
});

/** A change made by hand after the ADD: `pod` is the pod's netns name, `bridgeOf` runs `ip` where its bridge is. */
interface Tampering {
  (pod: string, bridgeIp: (...args: string[]) => void, bridgeName: string): void;
}

let caseNo = 0;
/** The reference's CHECK after `tamper`: undefined when it passes, else its answer. */
function referenceCheck(tamper: Tampering): string | undefined {
  const tag = `r${++caseNo}`;
  const node = fx.create(`${tag}n`);
  const pod = fx.create(`${tag}p`);
  const config = {
    cniVersion: '1.0.0',
    name: 'podnet',
    type: 'bridge',
    bridge: 'cnibr0',
    isGateway: true,
    isDefaultGateway: true,
    ipam: { type: 'host-local', ranges: [[{ subnet }]], dataDir: join(dataDir, tag) },
  };
  const call = { dir: plugins(), containerId: `${prefix}${tag}`, netns: pod.path, ifname: 'eth0', node: node.name };
  const add = callPlugin({ ...call, config, command: 'ADD' });
  assert.equal(add.status, 0, `the reference ADD failed: ${JSON.stringify(add.answer)}`);
  tamper(pod.name, (...args) => ip('-n', node.name, ...args), 'cnibr0');
  const check = callPlugin({ ...call, config: { ...config, prevResult: add.answer }, command: 'CHECK' });
  return check.status === 0 ? undefined : JSON.stringify(check.answer);
}

/** plexusd's CHECK after `tamper`: undefined when it passes, else its answer. */
async function plexusCheck(tamper: Tampering): Promise<string | undefined> {
  const pod = newPod();
  const add = await podCall(daemon, 'ADD', pod, daemon.runtimeConfig());
  assert.equal(add.code, 0, add.stdout + add.stderr);
  tamper(pod.ns, (...args) => ip(...args), bridge);
  const check = await podCall(daemon, 'CHECK', pod, daemon.runtimeConfig());
  await podCall(daemon, 'DEL', pod, daemon.runtimeConfig());
  return check.code === 0 ? undefined : check.stdout;
}

async function sameAnswer(tamper: Tampering, wrong?: RegExp): Promise<void> {
  const theirs = referenceCheck(tamper);
  const ours = await plexusCheck(tamper);
  if (!wrong) {
    assert.equal(theirs, undefined, 'the reference CHECK passes');
    assert.equal(ours, undefined, "plexusd's CHECK passes");
    return;
  }
  assert.ok(theirs, 'the reference CHECK fails');
  assert.ok(ours, `plexusd's CHECK fails as the reference's does (${theirs})`);
  assert.match(ours, wrong);
}

describe(
  'CHECK of a bridge network, plexusd against the reference 1.9.1',
  { skip: expectedPrerequisites(referencePluginsMissing()) },
  () => {
    it('nothing changed: both pass', () => sameAnswer(() => undefined));
    it("the pod's address removed: both fail", () =>
      sameAnswer(
        (pod) => ip('-n', pod, '-4', 'addr', 'flush', 'dev', 'eth0'),
        /address 10\.\d+\.9\.\d+\/24 is missing on eth0/,
      ));
    it("the pod's interface set down (its routes go with it): both fail", () =>
      sameAnswer(
        (pod) => ip('-n', pod, 'link', 'set', 'eth0', 'down'),
        /route 0\.0\.0\.0\/0 via 10\.\d+\.9\.1 is missing/,
      ));
    it("the pod's MAC changed: both fail", () =>
      sameAnswer(
        (pod) => ip('-n', pod, 'link', 'set', 'eth0', 'address', '02:00:00:00:0c:01'),
        /interface eth0 has MAC 02:00:00:00:0c:01, expected/,
      ));
    it("the bridge's MAC changed: both fail", () =>
      sameAnswer(
        (_pod, bridgeIp, name) => bridgeIp('link', 'set', name, 'address', '02:00:00:00:0c:02'),
        /has MAC 02:00:00:00:0c:02, expected/,
      ));
  },
);
