import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { hostVethName } from '../../src/drivers/bridge';
import { createPtpDriver } from '../../src/drivers/ptp';

const ptpDriver = createPtpDriver();
import { restoreForwardingAfterwards } from '../support/forwarding';
import { ip, ipTry } from '../support/netns';
import { attachRequest, driverTestbed, failure, must, RecordingEnv, attachParsed } from './support';
import { DEBIAN_PLUGINS } from '../support/plugin-dir';

const bed = driverTestbed('ppt');
const { prefix, fx } = bed;
const octet = 150 + Math.floor(Math.random() * 50);
restoreForwardingAfterwards();
let dataDir = '';
before(() => {
  dataDir = mkdtempSync(join(tmpdir(), 'plexus-ptp-ref-'));
});
after(() => {
  rmSync(dataDir, { recursive: true, force: true });
});

/** Routes of a netns (or the host, for one device) with the subnet's first three octets replaced by "S". */
function routes(args: string[], subnet3: string, v6prefix: string): string[] {
  return ip('-o', ...args)
    .split('\n')
    .filter(Boolean)
    .map((l) =>
      l
        .replaceAll(`${subnet3}.`, 'S.')
        .replaceAll(v6prefix, 'P:')
        .replace(/veth[0-9a-f]+/g, 'VETH')
        .replace(/\s+/g, ' ')
        .replace(/ proto (boot|static)/, '')
        .trim(),
    )
    .filter((l) => !l.startsWith('fe80::') && !l.includes('fe80::/64'))
    .sort();
}

const ptpConfig = (subnet3: string, v6: string): Record<string, unknown> => ({
  type: 'ptp',
  ipam: {
    type: 'host-local',
    ranges: [[{ subnet: `${subnet3}.0/24` }], [{ subnet: `${v6}/64` }]],
    routes: [{ dst: '0.0.0.0/0' }],
    dataDir,
  },
});

describe('ptp driver', () => {
  it('routes the pod through its gateway exactly as the reference ptp plugin does, on both sides', async () => {
    const ours = { pod: fx.create('ours'), s3: `10.${octet}.61`, v6: `fd00:${octet.toString(16)}:61::` };
    const ref = { pod: fx.create('ref'), s3: `10.${octet}.62`, v6: `fd00:${octet.toString(16)}:62::` };
    const rec = new RecordingEnv(bed.kernel, bed.ipam);
    const req = attachRequest({
      network: `${prefix}-p`,
      config: ptpConfig(ours.s3, ours.v6),
      netns: ours.pod.path,
      ifname: 'eth0',
    });
    const host = hostVethName(req.containerId, req.runtimeIfname, req.ifname);
    fx.trackHostLink(host);
    const result = must(await attachParsed(ptpDriver, req, rec.env));

    const refConf = JSON.stringify({ cniVersion: '1.0.0', name: `${prefix}-r`, ...ptpConfig(ref.s3, ref.v6) });
    const refEnv = {
      ...process.env,
      CNI_CONTAINERID: `${prefix}ref`,
      CNI_NETNS: ref.pod.path,
      CNI_IFNAME: 'eth0',
      CNI_PATH: DEBIAN_PLUGINS,
    };
    const refResult = JSON.parse(
      execFileSync(join(DEBIAN_PLUGINS, 'ptp'), [], {
        input: refConf,
        env: { ...refEnv, CNI_COMMAND: 'ADD' },
        encoding: 'utf8',
      }),
    ) as { interfaces: { name: string }[] };
    const refHost = refResult.interfaces[0]!.name;
    fx.trackHostLink(refHost);
    try {
      for (const family of ['-4', '-6']) {
        assert.deepEqual(
          routes(['-n', ours.pod.name, family, 'route', 'show'], ours.s3, ours.v6),
          routes(['-n', ref.pod.name, family, 'route', 'show'], ref.s3, ref.v6),
          `pod routes ${family}`,
        );
        assert.deepEqual(
          routes([family, 'route', 'show', 'dev', host], ours.s3, ours.v6),
          routes([family, 'route', 'show', 'dev', refHost], ref.s3, ref.v6),
          `host routes ${family}`,
        );
        const hostAddrs = (dev: string, s3: string, v6: string): string[] =>
          routes([family, 'addr', 'show', 'dev', dev], s3, v6)
            .map((l) => /inet6? (\S+)/.exec(l)?.[1] ?? '')
            .filter((a) => !a.startsWith('fe80'));
        assert.deepEqual(
          hostAddrs(host, ours.s3, ours.v6),
          hostAddrs(refHost, ref.s3, ref.v6),
          `host addresses ${family}`,
        );
      }
      assert.deepEqual(
        result.interfaces.map((i) => i.name),
        [host, 'eth0'],
      );
      assert.equal(result.ips.length, 2);
      assert.ok(result.ips.every((x) => x.interface === 1));
      // IPAM's routes as IPAM gave them, as the reference reports them (ptp-differential.test.ts).
      assert.deepEqual(result.routes, [{ dst: '0.0.0.0/0' }]);
      // Traffic: the pod reaches its gateway (the host veth) and the host reaches the pod, over both families.
      const podIp = result.ips[0]!.address.split('/')[0]!;
      assert.equal(ours.pod.exec('ping', '-c1', '-W2', `${ours.s3}.1`).status, 0);
      assert.equal(ours.pod.exec('ping', '-6', '-c1', '-W2', `${ours.v6}1`).status, 0);
      assert.equal(execFileSync('ping', ['-c1', '-W2', podIp], { encoding: 'utf8' }).includes('1 received'), true);
    } finally {
      execFileSync(join(DEBIAN_PLUGINS, 'ptp'), [], {
        input: refConf,
        env: { ...refEnv, CNI_COMMAND: 'DEL' },
        encoding: 'utf8',
      });
    }

    await rec.undo();
    assert.equal(ipTry('link', 'show', host).status, 1, 'the host veth is gone');
    assert.equal(must(await bed.kernel.getLink(ours.pod.path, 'eth0')), null);
    assert.equal(ip('route', 'show', 'dev', 'lo', 'table', 'main').includes(ours.s3), false);
    assert.equal(
      ip('-4', 'route', 'show').includes(`${ours.s3}.`),
      false,
      'the host route to the pod went with the veth',
    );
    assert.deepEqual(await bed.ipam.leases(`${prefix}-p`), []);
  });

  it('rejects ipMasq (not implemented: code 2) and a config without IPAM (7) before touching anything', async () => {
    const pod = fx.create('bad');
    const rec = new RecordingEnv(bed.kernel, bed.ipam);
    const masq = failure(
      await attachParsed(
        ptpDriver,
        attachRequest({
          network: `${prefix}-m`,
          config: { type: 'ptp', ipMasq: true, ipam: { type: 'host-local', subnet: `10.${octet}.63.0/24` } },
          netns: pod.path,
        }),
        rec.env,
      ),
    );
    assert.equal(masq.code, 2);
    assert.match(masq.message, /"ipMasq" is not supported natively/);
    const noIpam = failure(
      await attachParsed(
        ptpDriver,
        attachRequest({ network: `${prefix}-n`, config: { type: 'ptp' }, netns: pod.path }),
        rec.env,
      ),
    );
    assert.equal(noIpam.code, 7);
    assert.match(noIpam.message, /ptp needs an IPAM section/);
    assert.deepEqual(rec.steps, []);
  });

  it('fails with 7 when IPAM gives an address without a gateway, and its undo releases the address', async () => {
    const pod = fx.create('nogw');
    const rec = new RecordingEnv(bed.kernel, bed.ipam);
    const e = failure(
      await attachParsed(
        ptpDriver,
        attachRequest({
          network: `${prefix}-s`,
          config: { type: 'ptp', ipam: { type: 'static', addresses: [{ address: `10.${octet}.64.5/24` }] } },
          netns: pod.path,
        }),
        rec.env,
      ),
    );
    assert.equal(e.code, 7);
    assert.match(e.message, /no gateway/);
    await rec.undo();
    assert.deepEqual(await bed.ipam.leases(`${prefix}-s`), []);
    assert.equal(ipTry('-n', pod.name, 'link', 'show', 'net1').status, 1, 'nothing was plumbed');
  });
});
