/**
 * The differential harness: the same config ADDed (and CHECKed) through a reference plugin 1.9.1 and through the
 * native driver of its type, each into a node and a pod netns of its own, then what a pod and its node can observe
 * compared (test/drivers/observe.ts). An option Plexus does not run natively must be refused with code 2 and the way
 * to delegate the network to the reference plugin instead. One harness per test file (its netns prefix, IPAM store).
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before } from 'node:test';
import type { CniResult } from '../../src/cni/types';
import type { Driver } from '../../src/drivers/driver';
import { verify } from '../../src/engine/verbs/check';
import type { NetnsFixture, TestNetns } from '../support/netns';
import { callPlugin } from '../support/plugin-call';
import { referencePlugins } from '../support/plugin-dir';
import { differences, type Observation, observe } from './observe';
import { attachParsed, attachRequest, driverTestbed, failure, must, plugin, RecordingEnv } from './support';

/** The node and pod of one side of a case. */
export interface Side {
  readonly node: TestNetns;
  readonly pod: TestNetns;
}

export interface DifferentialCase {
  /** The plugin's keys besides type, name and ipam. */
  readonly config: Record<string, unknown>;
  /** The IPAM section; undefined: the harness's host-local dual-stack one; null: none. */
  readonly ipam?: Record<string, unknown> | null;
  /** The runtime's MAC for the pod interface (capability `mac`: runtimeConfig.mac for the reference). */
  readonly mac?: string;
  /** The runtime's MAC as CNI_ARGS `MAC=` instead (Plexus gets it as the attachment's MAC, as the engine hands it). */
  readonly macArg?: string;
  /** runtimeConfig for both (e.g. host-device's deviceID). */
  readonly runtimeConfig?: Record<string, unknown>;
  /** Lines of `differences` docs/drivers.md lists as known differences: allowed, and required to be there. */
  readonly knownDifferences?: readonly string[];
  /** Done in each side before the ADD (an uplink on the node, a device to take, a bridge in the pod). */
  readonly prepare?: (side: Side) => void;
}

/** A change made by hand after the ADD; `result` is that side's ADD result. */
export type Tampering = (side: Side, result: CniResult) => void;

export interface DifferentialBed {
  readonly prefix: string;
  /** The file's netns fixture (a scratch netns for a probe). */
  readonly fx: NetnsFixture;
  /** Both ADDs observed alike. */
  sameAsReference(c: DifferentialCase): Promise<void>;
  /** Both ADDs fail, the native one with code 7 matching `message`. */
  bothRefuse(c: DifferentialCase, message: RegExp): Promise<void>;
  /** The native driver refuses the config with code 2, saying how to delegate it to the reference plugin. */
  refusedNatively(config: Record<string, unknown>, option: string): void;
  /**
   * Both CHECKs after `tamper`, run by the engine's and the driver's CHECK for Plexus: both pass (`wrong` undefined)
   * or both fail, Plexus's message matching `wrong`.
   */
  sameCheck(c: DifferentialCase, tamper: Tampering, wrong?: RegExp): Promise<void>;
}

export interface DifferentialOptions {
  /** The netns prefix's tag (unique per file). */
  readonly tag: string;
  readonly type: string;
  /** The native driver with `node` standing in for the node. */
  readonly driver: (node: string) => Driver<unknown>;
  /** The interface in the pod. */
  readonly ifname?: string;
}

const IFNAME = 'eth0';
let caseNo = 0;

export function differentialBed(opts: DifferentialOptions): DifferentialBed {
  const bed = driverTestbed(opts.tag);
  const { prefix, fx } = bed;
  const ifname = opts.ifname ?? IFNAME;
  let dataDir = '';
  before(() => {
    dataDir = mkdtempSync(join(tmpdir(), `plexus-${opts.type}-diff-`));
  });
  after(() => rmSync(dataDir, { recursive: true, force: true }));

  /** The case's IPAM, a host-local one given a data dir of its own (never the host's /var/lib/cni). */
  const ipamOf = (c: DifferentialCase): Record<string, unknown> | undefined => {
    if (c.ipam === null) return undefined;
    const ipam = c.ipam ?? {
      type: 'host-local',
      ranges: [[{ subnet: '10.77.0.0/24' }], [{ subnet: 'fd77::/64' }]],
      routes: [{ dst: '192.0.2.0/24' }],
    };
    return ipam.type === 'host-local' ? { ...ipam, dataDir: join(dataDir, String(caseNo)) } : ipam;
  };

  const newSide = (tag: string, c: DifferentialCase): Side => {
    const side = { node: fx.create(`${tag}n`), pod: fx.create(`${tag}p`) };
    c.prepare?.(side);
    return side;
  };
  const keepMacs = (c: DifferentialCase): string[] => [c.mac, c.macArg].filter((m): m is string => m !== undefined);

  const referenceConfig = (c: DifferentialCase): Record<string, unknown> => {
    const ipam = ipamOf(c);
    const runtimeConfig = { ...(c.runtimeConfig ?? {}), ...(c.mac ? { mac: c.mac } : {}) };
    return {
      cniVersion: '1.0.0',
      name: `${prefix}-net`,
      type: opts.type,
      ...c.config,
      ...(ipam ? { ipam } : {}),
      ...(Object.keys(runtimeConfig).length ? { runtimeConfig } : {}),
    };
  };

  /** The reference ADD of the case: its side, config, call and answer. */
  function referenceAdd(c: DifferentialCase) {
    const tag = `r${++caseNo}`;
    const side = newSide(tag, c);
    const config = referenceConfig(c);
    const call = {
      dir: referencePlugins(),
      containerId: `${prefix}${tag}`,
      netns: side.pod.path,
      ifname,
      node: side.node.name,
      ...(c.macArg ? { cniArgs: `IgnoreUnknown=1;MAC=${c.macArg}` } : {}),
    };
    const add = callPlugin({ ...call, config, command: 'ADD' });
    return { side, config, call, add };
  }

  /** The native ADD of the case: its side, the driver and what it answered. */
  async function plexusAdd(c: DifferentialCase) {
    const tag = `p${++caseNo}`;
    const side = newSide(tag, c);
    const ipam = ipamOf(c);
    const rec = new RecordingEnv(bed.kernel, bed.ipam);
    const mac = c.mac ?? c.macArg;
    const req = attachRequest({
      network: `${prefix}-net${caseNo}`,
      config: { type: opts.type, ...c.config, ...(ipam ? { ipam } : {}) },
      netns: side.pod.path,
      ifname,
      ...(mac ? { mac } : {}),
      ...(c.runtimeConfig ? { runtimeConfig: c.runtimeConfig } : {}),
    });
    const driver = opts.driver(side.node.path);
    const result = await attachParsed(driver, req, rec.env);
    return { side, req, driver, rec, result };
  }

  const observed = (c: DifferentialCase, side: Side, result: unknown): Observation =>
    observe({ node: side.node, pod: side.pod, ifname, result, keepMacs: keepMacs(c) });

  return {
    prefix,
    fx,
    async sameAsReference(c) {
      const theirs = referenceAdd(c);
      assert.equal(theirs.add.status, 0, `the reference ADD failed: ${JSON.stringify(theirs.add.answer)}`);
      // The driver's result has no version: the engine answers in the runtime's.
      const { cniVersion: _version, ...refResult } = theirs.add.answer;
      const reference = observed(c, theirs.side, refResult);
      const ours = await plexusAdd(c);
      const result = must(ours.result);
      // Plexus also reports each interface's MTU (CNI 1.1), which the reference leaves out: the one known addition.
      const interfaces = result.interfaces.map(({ mtu: _mtu, ...i }) => i);
      const found = differences(reference, observed(c, ours.side, { ...result, interfaces }));
      const known = c.knownDifferences ?? [];
      assert.deepEqual(
        found.filter((d) => !known.includes(d)),
        [],
      );
      assert.deepEqual(
        known.filter((d) => !found.includes(d)),
        [],
        'a known difference is gone: drop it here and in docs/drivers.md',
      );
    },
    async bothRefuse(c, message) {
      const theirs = referenceAdd(c);
      assert.notEqual(theirs.add.status, 0, `the reference ADD refuses it too: ${JSON.stringify(theirs.add.answer)}`);
      const ours = await plexusAdd(c);
      const refused = failure(ours.result);
      assert.equal(refused.code, 7, refused.message);
      assert.match(refused.message, message);
      await ours.rec.undo();
    },
    refusedNatively(config, option) {
      const refused = failure(opts.driver('/nonexistent').parse([plugin('n', { type: opts.type, ...config })]));
      assert.equal(refused.code, 2, refused.message);
      assert.match(refused.message, new RegExp(`"${option}" is not supported natively`));
      assert.match(refused.message, /plexus\.io\/delegate: "true"/);
    },
    async sameCheck(c, tamper, wrong) {
      const theirs = referenceAdd(c);
      assert.equal(theirs.add.status, 0, `the reference ADD failed: ${JSON.stringify(theirs.add.answer)}`);
      tamper(theirs.side, theirs.add.answer as unknown as CniResult);
      const config = { ...theirs.config, prevResult: theirs.add.answer };
      const check = callPlugin({ ...theirs.call, config, command: 'CHECK' });
      const theirCheck = check.status === 0 ? undefined : JSON.stringify(check.answer);

      const ours = await plexusAdd(c);
      const result = must(ours.result);
      tamper(ours.side, result);
      // The engine's CHECK of what every driver made, then the driver's own, as the engine runs them.
      const verified = await verify(bed, result, ours.side.pod.path, ours.side.node.path);
      let ourCheck = verified.ok ? undefined : verified.error.message;
      if (!ourCheck && ours.driver.check) {
        const attachment = { network: ours.req.network.key, ifname, result, steps: ours.rec.steps };
        // The engine hands the driver the network's config as it is defined now.
        const config = must(ours.driver.parse(ours.req.network.plugins));
        const r = await ours.driver.check(attachment, bed, config);
        if (!r.ok) ourCheck = r.error.message;
      }
      if (!wrong) {
        assert.equal(theirCheck, undefined, 'the reference CHECK passes');
        assert.equal(ourCheck, undefined, "Plexus's CHECK passes");
        return;
      }
      assert.ok(theirCheck, 'the reference CHECK fails');
      assert.ok(ourCheck, `Plexus's CHECK fails as the reference's does (${theirCheck})`);
      assert.match(ourCheck, wrong);
    },
  };
}
