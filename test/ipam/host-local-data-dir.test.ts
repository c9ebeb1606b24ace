/**
 * Native host-local and the reference host-local plugin (1.9.1, Debian's, as Multus's delegates run it) on one network:
 * whichever side leases an address first, the other never hands it out, because both keep it in the network's dataDir.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { CniCode } from '../../src/cni/errors';
import { Ipam, IPAM_POOL_EXHAUSTED, parseIpamConfig } from '../../src/ipam';
import { referencePlugins, referencePluginsMissing } from '../support/plugin-dir';
import { expectedPrerequisites } from '../support/prerequisites';
import { errorOf, unwrap } from './fixture';

const NETWORK = 'hl-shared';
/** 5 allocatable IPv4 addresses (.2-.6) and 6 IPv6 ones (::2-::7): the IPv4 set runs out first. */
const ranges = [[{ subnet: '10.77.0.0/29' }], [{ subnet: 'fd00:77::/125' }]];

interface Bed {
  readonly root: string;
  /** The reference plugin's dataDir, named by the network's config. */
  readonly dataDir: string;
  readonly ipam: Ipam;
}

async function withBed(body: (bed: Bed) => Promise<void>): Promise<void> {
  const root = mkdtempSync(join(tmpdir(), 'plexus-hldd-'));
  try {
    const dataDir = join(root, 'cni-networks');
    const options = { sync: true, hostLocalDataDir: join(root, 'default-networks') };
    const ipam = await Ipam.open(join(root, 'state', 'ipam'), options);
    await body({ root, dataDir, ipam });
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
}

const ipamOf = (dataDir: string | undefined): Record<string, unknown> => ({
  type: 'host-local',
  ranges,
  ...(dataDir !== undefined ? { dataDir } : {}),
});

/** The reference host-local's ADD (or DEL) for one container; its addresses, or the error it printed. */
function reference(command: 'ADD' | 'DEL', dataDir: string, containerId: string): string[] | string {
  const conf = JSON.stringify({ cniVersion: '1.0.0', name: NETWORK, type: 'bridge', ipam: ipamOf(dataDir) });
  try {
    const plugins = referencePlugins();
    const out = execFileSync(join(plugins, 'host-local'), [], {
      input: conf,
      env: {
        CNI_COMMAND: command,
        CNI_CONTAINERID: containerId,
        // IPAM never enters it; the plugins 1.9.1 refuse their own netns (code 8), and a path that is none is not checked.
        CNI_NETNS: join(dataDir, 'no-netns'),
        CNI_IFNAME: 'net1',
        CNI_PATH: plugins,
      },
      encoding: 'utf8',
    });
    if (command === 'DEL') return [];
    return (JSON.parse(out) as { ips: { address: string }[] }).ips.map((ip) => ip.address.split('/')[0] ?? '');
  } catch (thrown) {
    return String((thrown as { stdout?: string }).stdout ?? thrown);
  }
}

async function native(ipam: Ipam, dataDir: string | undefined, containerId: string): Promise<string[] | number> {
  const config = unwrap(parseIpamConfig(ipamOf(dataDir)));
  const r = await ipam.allocate({ network: NETWORK, containerId, ifname: 'eth0:net1', config });
  return r.ok ? r.value.ips.map((ip) => ip.address.split('/')[0] ?? '') : r.error.code;
}

const addresses = (got: string[] | string | number): string[] => {
  assert.ok(Array.isArray(got), `an allocation failed: ${String(got)}`);
  return got;
};

const skip = expectedPrerequisites(referencePluginsMissing());

describe('native host-local and the reference plugin share the network dataDir', { timeout: 30000, skip }, () => {
  it("never hands out an address the reference plugin's store holds", async () => {
    await withBed(async ({ dataDir, ipam }) => {
      const theirs = ['r1', 'r2', 'r3'].flatMap((id) => addresses(reference('ADD', dataDir, id)));
      assert.equal(theirs.length, 6);
      const ours: string[] = [];
      for (const id of ['p1', 'p2']) ours.push(...addresses(await native(ipam, dataDir, id)));
      assert.deepEqual(
        ours.filter((a) => theirs.includes(a)),
        [],
        `native got ${ours.join(' ')}; the reference holds ${theirs.join(' ')}`,
      );
      assert.equal(await native(ipam, dataDir, 'p3'), IPAM_POOL_EXHAUSTED, 'the 5 IPv4 addresses are held');
    });
  });

  it('never lets the reference plugin hand out an address native host-local leased', async () => {
    await withBed(async ({ dataDir, ipam }) => {
      const ours: string[] = [];
      for (const id of ['p1', 'p2', 'p3']) ours.push(...addresses(await native(ipam, dataDir, id)));
      const theirs = ['r1', 'r2'].flatMap((id) => addresses(reference('ADD', dataDir, id)));
      assert.deepEqual(
        theirs.filter((a) => ours.includes(a)),
        [],
        `the reference got ${theirs.join(' ')}; native holds ${ours.join(' ')}`,
      );
      assert.match(String(reference('ADD', dataDir, 'r3')), /no IP addresses available/);
    });
  });

  it('writes each native lease in host-local format, IPv6 names as host-local writes them', async () => {
    await withBed(async ({ dataDir, ipam }) => {
      addresses(await native(ipam, dataDir, 'p1'));
      const dir = join(dataDir, NETWORK);
      assert.equal(readFileSync(join(dir, '10.77.0.2'), 'utf8'), 'p1\r\neth0:net1');
      assert.equal(readFileSync(join(dir, 'fd00:77::2'), 'utf8'), 'p1\r\neth0:net1');
    });
  });

  it("keeps the reference plugin's DEL away from native leases, and a native release frees them", async () => {
    await withBed(async ({ dataDir, ipam }) => {
      const ours = addresses(await native(ipam, dataDir, 'p1'));
      reference('DEL', dataDir, 'p1');
      assert.ok(existsSync(join(dataDir, NETWORK, ours[0] ?? '')), "the reference's DEL matches no native lease");
      unwrap(await ipam.release(NETWORK, 'p1', 'eth0:net1'));
      assert.deepEqual(
        readdirSync(join(dataDir, NETWORK)).filter((n) => /^[\d:f]/.test(n)),
        [],
      );
      const theirs = addresses(reference('ADD', dataDir, 'r1'));
      assert.ok(theirs.length === 2, 'the released addresses are free for the reference plugin again');
    });
  });

  it("writes leases from before the sharing into the dataDir at the network's first allocation", async () => {
    await withBed(async ({ root, dataDir }) => {
      const older = await Ipam.open(join(root, 'state', 'ipam'));
      const held = addresses(await native(older, dataDir, 'p1'));
      const options = { sync: true, hostLocalDataDir: join(root, 'default-networks') };
      const upgraded = await Ipam.open(join(root, 'state', 'ipam'), options);
      addresses(await native(upgraded, dataDir, 'p2'));
      assert.equal(readFileSync(join(dataDir, NETWORK, held[0] ?? ''), 'utf8'), 'p1\r\neth0:net1');
      const theirs = addresses(reference('ADD', dataDir, 'r1'));
      assert.deepEqual(
        theirs.filter((a) => held.includes(a)),
        [],
      );
      unwrap(await upgraded.release(NETWORK, 'p1', 'eth0:net1'));
      assert.ok(!existsSync(join(dataDir, NETWORK, held[0] ?? '')), 'its release removes the copy');
    });
  });

  it('uses the default dataDir (host-local: /var/lib/cni/networks) for a config naming none', async () => {
    await withBed(async ({ root, ipam }) => {
      const theirs = addresses(reference('ADD', join(root, 'default-networks'), 'r1'));
      const ours = addresses(await native(ipam, undefined, 'p1'));
      assert.deepEqual(
        ours.filter((a) => theirs.includes(a)),
        [],
      );
    });
  });

  it("refuses to allocate (code 5, naming it) when the network's dataDir cannot be read", async () => {
    await withBed(async ({ dataDir, ipam }) => {
      mkdirSync(dataDir, { recursive: true });
      writeFileSync(join(dataDir, NETWORK), 'not a directory');
      const config = unwrap(parseIpamConfig(ipamOf(dataDir)));
      const r = await ipam.allocate({ network: NETWORK, containerId: 'p1', ifname: 'eth0:net1', config });
      const error = errorOf(r);
      assert.equal(error.code, CniCode.IoFailure);
      assert.match(error.message, new RegExp(join(dataDir, NETWORK)));
    });
  });
});
