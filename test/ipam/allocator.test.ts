import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { CniCode } from '../../src/cni/errors';
import { IPAM_ADDRESS_IN_USE, IPAM_POOL_EXHAUSTED, type Ipam, type IpamConfig, type IpamRequest } from '../../src/ipam';
import { config, errorOf, hostLocal, unwrap, withIpam } from './fixture';

const net24 = hostLocal('10.1.0.0/24');
const request = (containerId: string, cfg: IpamConfig = net24, extra: Partial<IpamRequest> = {}): IpamRequest => ({
  network: 'net1',
  containerId,
  ifname: 'eth0',
  config: cfg,
  ...extra,
});
const addressesOf = async (ipam: Ipam, req: IpamRequest): Promise<string[]> =>
  unwrap(await ipam.allocate(req)).ips.map((ip) => ip.address);

test('the first allocation gets .2 with the default gateway .1', async () => {
  await withIpam(async (ipam) => {
    assert.deepEqual(unwrap(await ipam.allocate(request('c1'))), {
      ips: [{ address: '10.1.0.2/24', gateway: '10.1.0.1' }],
      routes: [],
    });
  });
});

test('routes and dns of the config are returned', async () => {
  await withIpam(async (ipam) => {
    const cfg = config({
      type: 'host-local',
      subnet: '10.1.0.0/24',
      routes: [{ dst: '0.0.0.0/0' }],
      dns: { nameservers: ['10.1.0.53'] },
    });
    const result = unwrap(await ipam.allocate(request('c1', cfg)));
    assert.deepEqual(result.routes, [{ dst: '0.0.0.0/0' }]);
    assert.deepEqual(result.dns, { nameservers: ['10.1.0.53'] });
  });
});

test('an IPv6 range allocates ::2 with gateway ::1', async () => {
  await withIpam(async (ipam) => {
    assert.deepEqual(unwrap(await ipam.allocate(request('c1', hostLocal('fd00:1::/64')))).ips, [
      { address: 'fd00:1::2/64', gateway: 'fd00:1::1' },
    ]);
  });
});

test('dual-stack: two range sets give one address each', async () => {
  await withIpam(async (ipam) => {
    assert.deepEqual(await addressesOf(ipam, request('c1', hostLocal('10.1.0.0/24', 'fd00::/64'))), [
      '10.1.0.2/24',
      'fd00::2/64',
    ]);
  });
});

test('a range set with several ranges moves to the next range when the first is full', async () => {
  await withIpam(async (ipam) => {
    const cfg = config({ type: 'host-local', ranges: [[{ subnet: '10.1.0.0/30' }, { subnet: '10.2.0.0/24' }]] });
    assert.deepEqual(await addressesOf(ipam, request('c1', cfg)), ['10.1.0.2/30']);
    assert.deepEqual(await addressesOf(ipam, request('c2', cfg)), ['10.2.0.2/24']);
  });
});

test('allocation continues round-robin after the last reserved address instead of reusing a released one', async () => {
  await withIpam(async (ipam) => {
    await addressesOf(ipam, request('c1'));
    await addressesOf(ipam, request('c2'));
    unwrap(await ipam.release('net1', 'c1', 'eth0'));
    assert.deepEqual(await addressesOf(ipam, request('c3')), ['10.1.0.4/24']);
  });
});

test('round-robin wraps to the start of the range and skips the gateway', async () => {
  await withIpam(async (ipam) => {
    const cfg = config({ type: 'host-local', subnet: '10.1.0.0/24', rangeStart: '10.1.0.1', rangeEnd: '10.1.0.4' });
    assert.deepEqual(await addressesOf(ipam, request('c1', cfg)), ['10.1.0.2/24']);
    assert.deepEqual(await addressesOf(ipam, request('c2', cfg)), ['10.1.0.3/24']);
    assert.deepEqual(await addressesOf(ipam, request('c3', cfg)), ['10.1.0.4/24']);
    unwrap(await ipam.release('net1', 'c1', 'eth0'));
    assert.deepEqual(await addressesOf(ipam, request('c4', cfg)), ['10.1.0.2/24']);
  });
});

test('allocating again for the same owner returns its existing lease', async () => {
  await withIpam(async (ipam) => {
    const first = unwrap(await ipam.allocate(request('c1')));
    const again = unwrap(await ipam.allocate(request('c1')));
    assert.deepEqual(again, first);
    assert.equal((await ipam.leases('net1')).length, 1);
  });
});

test('the same container with another interface gets another address', async () => {
  await withIpam(async (ipam) => {
    assert.deepEqual(await addressesOf(ipam, request('c1')), ['10.1.0.2/24']);
    assert.deepEqual(await addressesOf(ipam, request('c1', net24, { ifname: 'net1' })), ['10.1.0.3/24']);
  });
});

test('a requested IP is honoured', async () => {
  await withIpam(async (ipam) => {
    assert.deepEqual(await addressesOf(ipam, request('c1', net24, { requestedIps: ['10.1.0.77'] })), ['10.1.0.77/24']);
  });
});

test('a requested IP with a matching prefix is honoured', async () => {
  await withIpam(async (ipam) => {
    assert.deepEqual(await addressesOf(ipam, request('c1', net24, { requestedIps: ['10.1.0.77/24'] })), [
      '10.1.0.77/24',
    ]);
  });
});

test('a requested IP outside every range fails with code 7', async () => {
  await withIpam(async (ipam) => {
    assert.deepEqual(errorOf(await ipam.allocate(request('c1', net24, { requestedIps: ['10.9.9.9'] }))), {
      code: CniCode.InvalidNetworkConfig,
      message: 'requested IP 10.9.9.9 is not in any range of network net1',
    });
  });
});

test('requesting the gateway fails with code 7', async () => {
  await withIpam(async (ipam) => {
    assert.equal(
      errorOf(await ipam.allocate(request('c1', net24, { requestedIps: ['10.1.0.1'] }))).code,
      CniCode.InvalidNetworkConfig,
    );
  });
});

test('a requested IP already leased fails with code 101 naming the holder', async () => {
  await withIpam(async (ipam) => {
    await addressesOf(ipam, request('c1', net24, { requestedIps: ['10.1.0.50'] }));
    assert.deepEqual(errorOf(await ipam.allocate(request('c2', net24, { requestedIps: ['10.1.0.50'] }))), {
      code: IPAM_ADDRESS_IN_USE,
      message: 'requested IP 10.1.0.50 is already allocated to container c1 interface eth0 in network net1',
    });
  });
});

test('a range set without a requested IP still gets a dynamic address', async () => {
  await withIpam(async (ipam) => {
    assert.deepEqual(
      await addressesOf(ipam, request('c1', hostLocal('10.1.0.0/24', 'fd00::/64'), { requestedIps: ['fd00::99'] })),
      ['10.1.0.2/24', 'fd00::99/64'],
    );
  });
});

test('a failing range set undoes what the call reserved in the others', async () => {
  await withIpam(async (ipam) => {
    const dual = hostLocal('10.1.0.0/24', 'fd00::/64');
    await addressesOf(ipam, request('c1', dual, { requestedIps: ['fd00::99'] }));
    const failed = await ipam.allocate(request('c2', dual, { requestedIps: ['fd00::99'] }));
    assert.equal(errorOf(failed).code, IPAM_ADDRESS_IN_USE);
    assert.deepEqual(
      (await ipam.leases('net1')).map((lease) => lease.containerId),
      ['c1', 'c1'],
    );
  });
});

test('a /30 has exactly one allocatable address (host-local: .1 is the gateway, .3 the broadcast), then fails with 102', async () => {
  await withIpam(async (ipam) => {
    const cfg = hostLocal('10.1.0.0/30');
    assert.deepEqual(await addressesOf(ipam, request('c1', cfg)), ['10.1.0.2/30']);
    const error = errorOf(await ipam.allocate(request('c2', cfg)));
    assert.equal(error.code, IPAM_POOL_EXHAUSTED);
    assert.equal(
      error.message,
      'no free address in network net1: range set 0 (10.1.0.0/30 10.1.0.1-10.1.0.2) is exhausted',
    );
  });
});

test('release returns the released leases and is idempotent', async () => {
  await withIpam(async (ipam) => {
    await addressesOf(ipam, request('c1'));
    assert.deepEqual(unwrap(await ipam.release('net1', 'c1', 'eth0')), [
      { network: 'net1', address: '10.1.0.2/24', gateway: '10.1.0.1', containerId: 'c1', ifname: 'eth0' },
    ]);
    assert.deepEqual(unwrap(await ipam.release('net1', 'c1', 'eth0')), []);
    assert.deepEqual(unwrap(await ipam.release('never-seen', 'c9', 'eth0')), []);
    assert.deepEqual(await ipam.leases(), []);
  });
});

test('leases are per network: the same address can be leased in two networks', async () => {
  await withIpam(async (ipam) => {
    assert.deepEqual(await addressesOf(ipam, request('c1')), ['10.1.0.2/24']);
    assert.deepEqual(await addressesOf(ipam, request('c1', net24, { network: 'net2' })), ['10.1.0.2/24']);
    assert.equal((await ipam.leases('net1')).length, 1);
    assert.equal((await ipam.leases()).length, 2);
  });
});

test('a lease is a file named by the address holding the owner', async () => {
  await withIpam(async (ipam, dir) => {
    await addressesOf(ipam, request('c1', hostLocal('10.1.0.0/24', 'fd00::/64')));
    assert.match(await readFile(join(dir, 'net1', '10.1.0.2'), 'utf8'), /^c1\neth0\n/);
    assert.match(await readFile(join(dir, 'net1', 'fd00::2'), 'utf8'), /^c1\neth0\n/);
  });
});

test('releaseUnless releases exactly the leases not kept', async () => {
  await withIpam(async (ipam) => {
    for (const id of ['c1', 'c2', 'c3']) await addressesOf(ipam, request(id));
    await addressesOf(ipam, request('c2', net24, { network: 'net2' }));
    const released = await ipam.releaseUnless((lease) => lease.containerId === 'c1');
    assert.deepEqual(released.map((lease) => `${lease.network}/${lease.containerId}`).sort(), [
      'net1/c2',
      'net1/c3',
      'net2/c2',
    ]);
    assert.deepEqual(
      (await ipam.leases()).map((lease) => lease.containerId),
      ['c1'],
    );
  });
});

test('unsafe network names are rejected with code 7', async () => {
  await withIpam(async (ipam) => {
    for (const network of ['..', '.', '', '../etc', 'a/b', '-leading-dash', 'x'.repeat(254)]) {
      assert.equal(
        errorOf(await ipam.allocate(request('c1', net24, { network }))).code,
        CniCode.InvalidNetworkConfig,
        network,
      );
      assert.equal(errorOf(await ipam.release(network, 'c1', 'eth0')).code, CniCode.InvalidNetworkConfig, network);
    }
  });
});

test('a container ID with a newline is rejected with code 4', async () => {
  await withIpam(async (ipam) => {
    assert.equal(errorOf(await ipam.allocate(request('c1\neth9'))).code, CniCode.InvalidEnvironment);
  });
});

test('static IPAM returns the configured addresses and stores nothing', async () => {
  await withIpam(async (ipam) => {
    const cfg = config({
      type: 'static',
      addresses: [{ address: '10.10.0.1/24', gateway: '10.10.0.254' }],
      routes: [{ dst: '0.0.0.0/0' }],
      dns: { nameservers: ['8.8.8.8'] },
    });
    assert.deepEqual(unwrap(await ipam.allocate(request('c1', cfg))), {
      ips: [{ address: '10.10.0.1/24', gateway: '10.10.0.254' }],
      routes: [{ dst: '0.0.0.0/0' }],
      dns: { nameservers: ['8.8.8.8'] },
    });
    assert.deepEqual(await ipam.leases(), []);
  });
});

test('static IPAM adds requested addresses, which need a prefix', async () => {
  await withIpam(async (ipam) => {
    const cfg = config({ type: 'static', addresses: [] });
    assert.deepEqual(unwrap(await ipam.allocate(request('c1', cfg, { requestedIps: ['10.10.0.9/24'] }))).ips, [
      { address: '10.10.0.9/24' },
    ]);
    assert.equal(
      errorOf(await ipam.allocate(request('c1', cfg, { requestedIps: ['10.10.0.9'] }))).code,
      CniCode.InvalidNetworkConfig,
    );
  });
});
