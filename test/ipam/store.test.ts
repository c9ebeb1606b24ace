import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdir, readdir, readFile, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Ipam, IPAM_POOL_EXHAUSTED, type IpamConfig, type IpamRequest } from '../../src/ipam';
import { config, errorOf, hostLocal, unwrap, withIpam, withStoreDir } from './fixture';

const request = (containerId: string, cfg: IpamConfig, network = 'net1'): IpamRequest => ({
  network,
  containerId,
  ifname: 'eth0',
  config: cfg,
});

test('open creates the store directory with mode 0700', async () => {
  await withStoreDir(async (dir) => {
    await Ipam.open(dir);
    assert.equal((await stat(dir)).mode & 0o777, 0o700);
  });
});

test('leases survive reopening the store and are not allocated again', async () => {
  await withStoreDir(async (dir) => {
    const cfg = hostLocal('10.1.0.0/24', 'fd00::/64');
    const first = await Ipam.open(dir);
    unwrap(await first.allocate(request('c1', cfg)));
    unwrap(await first.allocate(request('c2', cfg)));
    const before = await first.leases();

    const reopened = await Ipam.open(dir);
    assert.deepEqual(await reopened.leases(), before);
    assert.deepEqual(
      unwrap(await reopened.allocate(request('c3', cfg))).ips.map((ip) => ip.address),
      ['10.1.0.4/24', 'fd00::4/64'],
    );
    assert.deepEqual(
      unwrap(await reopened.allocate(request('c1', cfg))).ips.map((ip) => ip.address),
      ['10.1.0.2/24', 'fd00::2/64'],
    );
  });
});

test('the round-robin hint survives reopening, also when a shorter address overwrites a longer one', async () => {
  await withStoreDir(async (dir) => {
    const cfg = config({
      type: 'host-local',
      ranges: [[{ subnet: '10.1.0.0/24', rangeStart: '10.1.0.8', rangeEnd: '10.1.0.10' }]],
    });
    const first = await Ipam.open(dir, { sync: false });
    for (const c of ['c1', 'c2', 'c3']) unwrap(await first.allocate(request(c, cfg)));
    unwrap(await first.release('net1', 'c2', 'eth0'));
    // Wraps around past .8 to .9: the hint "10.1.0.9" replaces "10.1.0.10" in place.
    assert.deepEqual(
      unwrap(await first.allocate(request('c4', cfg))).ips.map((ip) => ip.address),
      ['10.1.0.9/24'],
    );
    assert.equal((await readFile(join(dir, 'net1', 'last_reserved_ip.0'), 'utf8')).trim(), '10.1.0.9');
    unwrap(await first.release('net1', 'c1', 'eth0'));
    unwrap(await first.release('net1', 'c3', 'eth0'));
    // After .9 comes .10; a lost or garbled hint would start again at .8.
    const reopened = await Ipam.open(dir, { sync: false });
    assert.deepEqual(
      unwrap(await reopened.allocate(request('c5', cfg))).ips.map((ip) => ip.address),
      ['10.1.0.10/24'],
    );
  });
});

test('a release survives reopening the store', async () => {
  await withStoreDir(async (dir) => {
    const cfg = hostLocal('10.1.0.0/24');
    const first = await Ipam.open(dir);
    unwrap(await first.allocate(request('c1', cfg)));
    unwrap(await first.release('net1', 'c1', 'eth0'));
    assert.deepEqual(await (await Ipam.open(dir)).leases(), []);
  });
});

test('an empty lease file blocks its address, is owned by nobody, and releaseUnless removes it', async () => {
  await withStoreDir(async (dir) => {
    await mkdir(join(dir, 'net1'), { recursive: true });
    await writeFile(join(dir, 'net1', '10.1.0.2'), '');
    const ipam = await Ipam.open(dir);
    assert.deepEqual(await ipam.leases(), [{ network: 'net1', address: '10.1.0.2/32', containerId: '', ifname: '' }]);
    assert.deepEqual(
      unwrap(await ipam.allocate(request('c1', hostLocal('10.1.0.0/24')))).ips.map((ip) => ip.address),
      ['10.1.0.3/24'],
    );
    const released = await ipam.releaseUnless((lease) => lease.containerId !== '');
    assert.deepEqual(
      released.map((lease) => lease.address),
      ['10.1.0.2/32'],
    );
    assert.deepEqual(
      await readdir(join(dir, 'net1')).then((names) => names.filter((name) => !name.startsWith('last_')).sort()),
      ['10.1.0.3'],
    );
  });
});

test('a host-local style lease file (id CRLF ifname) is read with its owner', async () => {
  await withStoreDir(async (dir) => {
    await mkdir(join(dir, 'net1'), { recursive: true });
    await writeFile(join(dir, 'net1', '10.1.0.9'), 'abc\r\neth0');
    const ipam = await Ipam.open(dir);
    assert.deepEqual(
      unwrap(await ipam.release('net1', 'abc', 'eth0')).map((lease) => lease.address),
      ['10.1.0.9/32'],
    );
  });
});

test('a temporary file left by a dead writer is removed at open', async () => {
  await withStoreDir(async (dir) => {
    await mkdir(join(dir, 'net1'), { recursive: true });
    // PIDs are below 2^22 on Linux, so this one cannot be alive.
    await writeFile(join(dir, 'net1', '.lease-99999999-0'), 'c1\neth0\n');
    await Ipam.open(dir);
    assert.deepEqual(await readdir(join(dir, 'net1')), []);
  });
});

test('an address taken on disk by another process after open is skipped', async () => {
  await withIpam(async (ipam, dir) => {
    const cfg = hostLocal('10.1.0.0/24');
    unwrap(await ipam.allocate(request('c1', cfg)));
    await writeFile(join(dir, 'net1', '10.1.0.3'), 'other\neth0\n');
    assert.deepEqual(
      unwrap(await ipam.allocate(request('c2', cfg))).ips.map((ip) => ip.address),
      ['10.1.0.4/24'],
    );
    assert.ok((await ipam.leases()).some((lease) => lease.containerId === 'other' && lease.address === '10.1.0.3/32'));
  });
});

test('200 concurrent allocations in a /24 all succeed with distinct addresses', async () => {
  await withIpam(async (ipam) => {
    const cfg = hostLocal('10.1.0.0/24');
    const results = await Promise.all(Array.from({ length: 200 }, (_, i) => ipam.allocate(request(`c${i}`, cfg))));
    const addresses = results.map((result) => unwrap(result).ips[0]?.address);
    assert.equal(new Set(addresses).size, 200);
  });
});

test('300 concurrent allocations in a /24: exactly 253 succeed, distinct, and the rest fail with 102', async () => {
  await withIpam(async (ipam) => {
    const cfg = hostLocal('10.1.0.0/24');
    const results = await Promise.all(Array.from({ length: 300 }, (_, i) => ipam.allocate(request(`c${i}`, cfg))));
    const succeeded = results.filter((result) => result.ok);
    assert.equal(succeeded.length, 253); // .2-.254: .0 network, .1 gateway, .255 broadcast
    assert.equal(new Set(succeeded.map((result) => unwrap(result).ips[0]?.address)).size, 253);
    for (const failed of results.filter((result) => !result.ok))
      assert.equal(errorOf(failed).code, IPAM_POOL_EXHAUSTED);
    assert.equal((await ipam.leases('net1')).length, 253);
  });
});

test('concurrent allocations in different networks proceed independently', async () => {
  await withIpam(async (ipam) => {
    const cfg = hostLocal('10.1.0.0/24');
    const results = await Promise.all(
      Array.from({ length: 40 }, (_, i) => ipam.allocate(request('c1', cfg, `net${i % 4}`))),
    );
    for (const result of results)
      assert.deepEqual(
        unwrap(result).ips.map((ip) => ip.address),
        ['10.1.0.2/24'],
      );
    assert.equal((await ipam.leases()).length, 4);
  });
});

test('allocate and release in a /16 holding 5000 leases cost about what they cost in an empty /16', async () => {
  // The claim is that neither call scans the leases a network holds. Wall-clock bounds fail on a loaded machine, so
  // the calls on the full network are timed against the same calls on an empty one, alternated so both see the same
  // load: a scan of 5000 leases would cost many times an empty network's call.
  await withStoreDir(async (dir) => {
    await mkdir(join(dir, 'big'), { recursive: true });
    const names: string[] = [];
    for (let i = 2; names.length < 5000; i++) names.push(`10.2.${i >> 8}.${i & 255}`);
    for (let i = 0; i < names.length; i += 200) {
      await Promise.all(
        names.slice(i, i + 200).map((name, j) => writeFile(join(dir, 'big', name), `old${i + j}\neth0\n10.2.0.0/16\n`)),
      );
    }
    const ipam = await Ipam.open(dir);
    assert.equal((await ipam.leases('big')).length, 5000);
    const cfg = hostLocal('10.2.0.0/16');
    const times = {
      big: { allocate: [] as number[], release: [] as number[] },
      empty: { allocate: [] as number[], release: [] as number[] },
    };
    for (let i = 0; i < 60; i++) {
      for (const network of i % 2 === 0 ? (['big', 'empty'] as const) : (['empty', 'big'] as const)) {
        let start = performance.now();
        unwrap(await ipam.allocate(request(`new${i}`, cfg, network)));
        times[network].allocate.push(performance.now() - start);
        start = performance.now();
        unwrap(await ipam.release(network, `new${i}`, 'eth0'));
        times[network].release.push(performance.now() - start);
      }
    }
    const median = (list: number[]): number => [...list].sort((a, b) => a - b)[Math.floor(list.length / 2)] ?? Infinity;
    for (const call of ['allocate', 'release'] as const) {
      const full = median(times.big[call]);
      const empty = median(times.empty[call]);
      assert.ok(
        full < 3 * empty + 1,
        `median ${call}: ${full.toFixed(2)} ms with 5000 leases, ${empty.toFixed(2)} ms with none`,
      );
    }
  });
});
