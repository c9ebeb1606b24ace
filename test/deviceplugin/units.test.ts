/**
 * The device side without a kubelet: device-info files, the protos' wire format (field numbers checked against
 * hand-encoded bytes), the allocation book, the resources config, memif and host-device Allocate, and the engine's
 * assignment of kubelet devices to networks.
 */
import { codecOf } from '../../src/kubelet/grpc';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { devicePluginPackage, podResourcesPackage } from '../../src/deviceplugin/api';
import { AllocationBook } from '../../src/deviceplugin/allocations';
import { parseResources, type HostDeviceResource, type MemifResource } from '../../src/deviceplugin/config';
import { deviceInfoFile, loadDeviceInfo, readDeviceInfo, writeDeviceInfo } from '../../src/deviceplugin/device-info';
import { devicesOfPod } from '../../src/deviceplugin/pod-resources';
import { endpointFor } from '../../src/deviceplugin/plugin-server';
import { HostDevicePool } from '../../src/deviceplugin/host-device-pool';
import { MemifDevices } from '../../src/deviceplugin/memif-devices';
import { envSuffix } from '../../src/deviceplugin/resources';
import { assignDevices, RESOURCE_NAME_ANNOTATION } from '../../src/engine/kubelet-devices';
import type { AttachmentStep } from '../../src/engine/plan';

const root = mkdtempSync(join(tmpdir(), 'plexus-dp-unit-'));
after(() => rmSync(root, { recursive: true, force: true }));
let n = 0;
const freshDir = (): string => mkdtempSync(join(root, `d${n++}-`));

// Protobuf wire helpers: tag = field << 3 | wire type (2: length-delimited, 0: varint).
const lengthPrefix = (n: number): Buffer => {
  const out: number[] = [];
  for (; n >= 0x80; n >>>= 7) out.push((n & 0x7f) | 0x80);
  out.push(n);
  return Buffer.from(out);
};
const ld = (field: number, payload: Buffer | string): Buffer => {
  const b = Buffer.isBuffer(payload) ? payload : Buffer.from(payload);
  return Buffer.concat([Buffer.from([(field << 3) | 2]), lengthPrefix(b.length), b]);
};
const varint = (field: number, v: number): Buffer => Buffer.from([(field << 3) | 0, v]);

describe('NPWG device-info files', () => {
  it('are named <resource>-<device>-device.json under dp/, "/" written as "-"', () => {
    assert.equal(
      deviceInfoFile('/var/run/k8s.cni.cncf.io/devinfo', 'plexus.io/memif', 'memif3'),
      '/var/run/k8s.cni.cncf.io/devinfo/dp/plexus.io-memif-memif3-device.json',
    );
    assert.equal(
      deviceInfoFile('/b', 'intel.com/sriov', '0000:03:00.1'),
      '/b/dp/intel.com-sriov-0000:03:00.1-device.json',
    );
  });

  it('hold the spec 1.1.0 document, read-only, and read back as written', () => {
    const dir = freshDir();
    const info = {
      type: 'memif',
      version: '1.1.0',
      memif: { role: 'slave', path: '/run/memif/memif0/memif.sock', mode: 'ethernet' },
    } as const;
    const path = writeDeviceInfo(dir, 'plexus.io/memif', 'memif0', info);
    assert.deepEqual(JSON.parse(readFileSync(path, 'utf8')), info);
    assert.equal(statSync(path).mode & 0o777, 0o444);
    assert.deepEqual(readDeviceInfo(dir, 'plexus.io/memif', 'memif0'), info);
    assert.equal(readDeviceInfo(dir, 'plexus.io/memif', 'memif9'), undefined);
  });

  it('read by anyone: a missing file is absent, one that is not a device-info object is malformed and says why', () => {
    const dir = freshDir();
    writeDeviceInfo(dir, 'intel.com/sriov', '0000:03:00.1', {
      type: 'pci',
      version: '1.1.0',
      pci: { 'pci-address': '0000:03:00.1' },
    });
    assert.deepEqual(loadDeviceInfo(dir, 'intel.com/sriov', '0000:03:00.1'), {
      kind: 'found',
      info: { type: 'pci', version: '1.1.0', pci: { 'pci-address': '0000:03:00.1' } },
    });
    assert.deepEqual(loadDeviceInfo(dir, 'intel.com/sriov', '0000:03:00.2'), { kind: 'absent' });
    for (const [id, text, reason] of [
      ['a', '{"type": "pci",', /JSON/],
      ['b', '["pci"]', /not a JSON object/],
      ['c', '{"version": "1.1.0"}', /no "type"/],
    ] as const) {
      writeFileSync(deviceInfoFile(dir, 'intel.com/sriov', id), text);
      const read = loadDeviceInfo(dir, 'intel.com/sriov', id);
      assert.equal(read.kind, 'malformed', id);
      if (read.kind === 'malformed') {
        assert.equal(read.path, deviceInfoFile(dir, 'intel.com/sriov', id));
        assert.match(read.reason, reason);
      }
      assert.equal(readDeviceInfo(dir, 'intel.com/sriov', id), undefined);
    }
  });
});

describe('the kubelet protos', () => {
  it('RegisterRequest puts version, endpoint, resource_name, options at fields 1-4', () => {
    const { request } = codecOf(devicePluginPackage(), 'Registration', 'Register');
    const bytes = request.requestSerialize({
      version: 'v1beta1',
      endpoint: 'e.sock',
      resource_name: 'plexus.io/memif',
      options: { pre_start_required: false, get_preferred_allocation_available: true },
    });
    assert.deepEqual(
      bytes,
      Buffer.concat([
        ld(1, 'v1beta1'),
        ld(2, 'e.sock'),
        ld(3, 'plexus.io/memif'),
        ld(4, Buffer.concat([varint(1, 0), varint(2, 1)])),
      ]),
    );
  });

  it('ListAndWatchResponse: devices at 1, each ID 1, health 2, topology 3 with NUMA node IDs', () => {
    const { request } = codecOf(devicePluginPackage(), 'DevicePlugin', 'ListAndWatch');
    const msg = { devices: [{ ID: 'memif0', health: 'Healthy', topology: { nodes: [{ ID: '1' }] } }] };
    const bytes = request.responseSerialize(msg);
    assert.deepEqual(bytes, ld(1, Buffer.concat([ld(1, 'memif0'), ld(2, 'Healthy'), ld(3, ld(1, varint(1, 1)))])));
    assert.deepEqual(request.responseDeserialize(bytes), msg);
  });

  it('AllocateRequest and ContainerAllocateResponse (envs 1, mounts 2, devices 3, annotations 4, cdi 5) round-trip', () => {
    const { request } = codecOf(devicePluginPackage(), 'DevicePlugin', 'Allocate');
    const req = Buffer.concat([ld(1, Buffer.concat([ld(1, 'memif0'), ld(1, 'memif1')]))]);
    assert.deepEqual(request.requestDeserialize(req), { container_requests: [{ devices_ids: ['memif0', 'memif1'] }] });
    const response = {
      container_responses: [
        {
          envs: { MEMIF_SOCKET: '/run/memif/memif0/memif.sock' },
          mounts: [{ container_path: '/run/memif/memif0', host_path: '/run/plexus/memif/memif0', read_only: false }],
          devices: [{ container_path: '/dev/x', host_path: '/dev/y', permissions: 'rw' }],
          annotations: { a: 'b' },
          cdi_devices: [{ name: 'vendor.com/class=dev' }],
        },
      ],
    };
    const bytes = request.responseSerialize(response);
    const inner = Buffer.concat([
      ld(1, Buffer.concat([ld(1, 'MEMIF_SOCKET'), ld(2, '/run/memif/memif0/memif.sock')])),
      ld(2, Buffer.concat([ld(1, '/run/memif/memif0'), ld(2, '/run/plexus/memif/memif0'), varint(3, 0)])),
      ld(3, Buffer.concat([ld(1, '/dev/x'), ld(2, '/dev/y'), ld(3, 'rw')])),
      ld(4, Buffer.concat([ld(1, 'a'), ld(2, 'b')])),
      ld(5, ld(1, 'vendor.com/class=dev')),
    ]);
    assert.deepEqual(bytes, ld(1, inner));
    assert.deepEqual(request.responseDeserialize(bytes), response);
  });

  it('PreferredAllocationRequest: available 1, must-include 2, size 3; the response deviceIDs 1', () => {
    const { request } = codecOf(devicePluginPackage(), 'DevicePlugin', 'GetPreferredAllocation');
    const bytes = ld(1, Buffer.concat([ld(1, 'a'), ld(1, 'b'), ld(2, 'b'), varint(3, 2)]));
    assert.deepEqual(request.requestDeserialize(bytes), {
      container_requests: [{ available_deviceIDs: ['a', 'b'], must_include_deviceIDs: ['b'], allocation_size: 2 }],
    });
    assert.deepEqual(
      request.responseSerialize({ container_responses: [{ deviceIDs: ['b', 'a'] }] }),
      ld(1, Buffer.concat([ld(1, 'b'), ld(1, 'a')])),
    );
  });

  it('pod-resources List: pods at 1; name 1, namespace 2, containers 3; container devices at 2 (resource 1, IDs 2)', () => {
    const { request } = codecOf(podResourcesPackage(), 'PodResourcesLister', 'List');
    const container = Buffer.concat([
      ld(1, 'c'),
      ld(2, Buffer.concat([ld(1, 'plexus.io/fastnic'), ld(2, 'nic1'), ld(2, 'nic0')])),
    ]);
    const bytes = ld(1, Buffer.concat([ld(1, 'p'), ld(2, 'ns'), ld(3, container)]));
    const decoded = request.responseDeserialize(bytes) as { pod_resources: Parameters<typeof devicesOfPod>[0][] };
    assert.equal(decoded.pod_resources[0]!.name, 'p');
    assert.equal(decoded.pod_resources[0]!.namespace, 'ns');
    assert.deepEqual([...devicesOfPod(decoded.pod_resources[0]!)], [['plexus.io/fastnic', ['nic1', 'nic0']]]);
    assert.deepEqual(request.responseSerialize(decoded), bytes);
  });
});

describe('the allocation book', () => {
  it('prefers must-include devices, then those idle longest (never allocated first), in natural order', () => {
    let now = 1000;
    const book = new AllocationBook(undefined, () => now);
    book.record(new Map([['memif0', {}]]));
    now = 2000;
    book.record(new Map([['memif1', {}]]));
    const available = ['memif0', 'memif1', 'memif2', 'memif10', 'memif3'];
    assert.deepEqual(book.preferred(available, [], 3), ['memif2', 'memif3', 'memif10']);
    assert.deepEqual(book.preferred(available, [], 5), ['memif2', 'memif3', 'memif10', 'memif0', 'memif1']);
    assert.deepEqual(book.preferred(available, ['memif1'], 2), ['memif1', 'memif2']);
  });

  it('survives a restart (its file), counts allocations, and forgets devices no longer offered', () => {
    const dir = freshDir();
    const a = AllocationBook.forResource(dir, 'plexus.io/memif');
    a.record(
      new Map([
        ['memif0', { secret: 's0', socket: '/x/memif0/memif.sock' }],
        ['memif5', {}],
      ]),
    );
    a.record(new Map([['memif0', { secret: 's1', socket: '/x/memif0/memif.sock' }]]));
    assert.ok(existsSync(join(dir, 'devices', 'plexus.io_memif.json')));
    const b = AllocationBook.forResource(dir, 'plexus.io/memif');
    assert.equal(b.get('memif0')?.secret, 's1');
    assert.equal(b.get('memif0')?.count, 2);
    b.retainOnly(new Set(['memif0']));
    assert.equal(AllocationBook.forResource(dir, 'plexus.io/memif').get('memif5'), undefined);
  });
});

describe('the device plugin config', () => {
  it('takes memif counts and host-device pools, with defaults', () => {
    const r = parseResources({
      resources: [
        { name: 'plexus.io/memif', kind: 'memif', count: 4 },
        { name: 'plexus.io/fastnic', kind: 'host-device', devices: ['eth3', '0000:03:00.1'] },
      ],
    });
    assert.ok(r.ok);
    assert.deepEqual(r.value[0], {
      name: 'plexus.io/memif',
      kind: 'memif',
      count: 4,
      socketDir: '/run/plexus/memif',
      containerPath: '/run/memif',
      mode: 'ethernet',
      healthFromSwitch: false,
    });
  });

  it('refuses what the kubelet would, naming the field', () => {
    const bad: [unknown, RegExp][] = [
      [{ resources: [{ name: 'memif', kind: 'memif', count: 1 }] }, /resources\.0\.name: must be domain\/name/],
      [{ resources: [{ name: 'kubernetes.io/x', kind: 'memif', count: 1 }] }, /reserved/],
      [{ resources: [{ name: 'plexus.io/m', kind: 'memif', count: 0 }] }, /count/],
      [
        { resources: [{ name: 'plexus.io/n', kind: 'host-device', devices: ['a b'] }] },
        /interface name or a PCI address/,
      ],
      [
        {
          resources: [
            { name: 'plexus.io/n', kind: 'host-device', devices: ['x'] },
            { name: 'plexus.io/m', kind: 'host-device', devices: ['x'] },
          ],
        },
        /device x is in more than one/,
      ],
      [
        {
          resources: [
            { name: 'plexus.io/n', kind: 'memif', count: 1 },
            { name: 'plexus.io/n', kind: 'memif', count: 2 },
          ],
        },
        /names a resource twice/,
      ],
      [{ resources: [{ name: 'plexus.io/n', kind: 'gpu' }] }, /kind/],
    ];
    for (const [doc, message] of bad) {
      const r = parseResources(doc);
      assert.equal(r.ok, false, JSON.stringify(doc));
      if (!r.ok) assert.match(r.error.message, message);
    }
  });
});

describe('Allocate', () => {
  it('memif: a fresh socket directory per device, a new secret of at most 23 characters, env, mount and device-info', () => {
    const [sockets, info, state] = [freshDir(), freshDir(), freshDir()];
    const config: MemifResource = {
      name: 'plexus.io/memif',
      kind: 'memif',
      count: 3,
      socketDir: sockets,
      containerPath: '/run/memif',
      mode: 'ethernet',
      healthFromSwitch: false,
    };
    const memif = new MemifDevices(config, { deviceInfoDir: info, stateDir: state });
    assert.deepEqual(
      memif.devices().map((d) => `${d.ID}:${d.health}`),
      ['memif0:Healthy', 'memif1:Healthy', 'memif2:Healthy'],
    );
    const first = memif.allocate(['memif1']);
    assert.ok(first.ok);
    const secret = first.value.envs.MEMIF_SECRET!;
    assert.match(secret, /^[A-Za-z0-9]{20}$/);
    assert.ok(secret.length <= 23);
    assert.equal(first.value.envs.MEMIF_SOCKET, '/run/memif/memif1/memif.sock');
    assert.equal(first.value.envs.PLEXUS_DEVICES_PLEXUS_IO_MEMIF, 'memif1');
    assert.deepEqual(first.value.mounts, [
      { container_path: '/run/memif/memif1', host_path: join(sockets, 'memif1'), read_only: false },
    ]);
    assert.deepEqual(readDeviceInfo(info, 'plexus.io/memif', 'memif1'), {
      type: 'memif',
      version: '1.1.0',
      memif: { role: 'slave', path: '/run/memif/memif1/memif.sock', mode: 'ethernet' },
    });
    assert.deepEqual(memif.allocation('memif1'), { socket: join(sockets, 'memif1', 'memif.sock'), secret });

    // Allocated again (to the next pod): the old socket is gone and the secret is new.
    const again = memif.allocate(['memif1', 'memif2']);
    assert.ok(again.ok);
    assert.notEqual(again.value.envs.MEMIF_SECRET!.split(',')[0], secret);
    assert.equal(again.value.envs.MEMIF_SOCKET, '/run/memif/memif1/memif.sock,/run/memif/memif2/memif.sock');
    const unknown = memif.allocate(['memif7']);
    assert.equal(unknown.ok, false);
  });

  it('memif with healthFromSwitch: every device follows the switch, and a change is announced', async () => {
    let up = false;
    const config: MemifResource = {
      name: 'plexus.io/memif',
      kind: 'memif',
      count: 2,
      socketDir: freshDir(),
      containerPath: '/run/memif',
      mode: 'ethernet',
      healthFromSwitch: true,
    };
    const memif = new MemifDevices(config, {
      deviceInfoDir: freshDir(),
      healthIntervalMs: 20,
      switchReady: async () => up,
    });
    let changes = 0;
    const stop = memif.watch(() => changes++);
    try {
      const health = async (want: string): Promise<void> => {
        for (let i = 0; i < 100 && memif.devices().some((d) => d.health !== want); i++)
          await new Promise((r) => setTimeout(r, 10));
        assert.deepEqual(
          memif.devices().map((d) => d.health),
          [want, want],
        );
      };
      await health('Unhealthy');
      up = true;
      await health('Healthy');
      assert.equal(changes, 2, 'down, then up: each announced once');
    } finally {
      stop();
    }
    // Without the option the switch is not asked.
    const plain = new MemifDevices(
      { ...config, healthFromSwitch: false },
      { deviceInfoDir: freshDir(), switchReady: () => Promise.reject(new Error('asked')) },
    );
    const stopPlain = plain.watch(() => assert.fail('no change expected'));
    stopPlain();
    assert.deepEqual(
      plain.devices().map((d) => d.health),
      ['Healthy', 'Healthy'],
    );
  });

  it('host-device pool: env names the devices (PCIDEVICE_ for PCI ones), PCI device-info, unknown devices refused', () => {
    const info = freshDir();
    const config: HostDeviceResource = {
      name: 'plexus.io/fast-nic',
      kind: 'host-device',
      devices: ['plexusnone0', '0000:FF:1F.7'],
    };
    const pool = new HostDevicePool(config, { deviceInfoDir: info });
    assert.deepEqual(
      pool.devices().map((d) => `${d.ID}:${d.health}`),
      ['plexusnone0:Unhealthy', '0000:ff:1f.7:Unhealthy'],
    );
    const r = pool.allocate(['plexusnone0', '0000:ff:1f.7']);
    assert.ok(r.ok);
    assert.equal(envSuffix('plexus.io/fast-nic'), 'PLEXUS_IO_FAST_NIC');
    assert.deepEqual(r.value.envs, {
      PLEXUS_DEVICES_PLEXUS_IO_FAST_NIC: 'plexusnone0,0000:ff:1f.7',
      PCIDEVICE_PLEXUS_IO_FAST_NIC: '0000:ff:1f.7',
    });
    assert.deepEqual(readDeviceInfo(info, 'plexus.io/fast-nic', '0000:ff:1f.7'), {
      type: 'pci',
      version: '1.1.0',
      pci: { 'pci-address': '0000:ff:1f.7' },
    });
    assert.equal(pool.allocate(['eth0']).ok, false);
  });

  it('a device missing from the host is healthy while the kubelet has it in a pod', async () => {
    const pool = new HostDevicePool(
      { name: 'plexus.io/n', kind: 'host-device', devices: ['plexusnone1'] },
      { deviceInfoDir: freshDir(), inUse: async () => true },
    );
    assert.equal(await pool.refresh(), true);
    assert.equal(pool.devices()[0]!.health, 'Healthy');
  });

  it('each resource has its own socket name', () => {
    assert.equal(endpointFor('plexus.io/memif'), 'plexus-plexus.io-memif.sock');
  });
});

describe('devices for networks that name a resource', () => {
  const step = (network: string, ifname: string, resource?: string, isDefault = false): AttachmentStep =>
    ({
      planned: {
        network: { key: `default/${network}`, annotations: resource ? { [RESOURCE_NAME_ANNOTATION]: resource } : {} },
        ifname,
        isDefault,
      },
      request: { options: {} },
    }) as unknown as AttachmentStep;
  const pod = { namespace: 'default', name: 'p' };

  it("hands out the pod's devices of each resource in plan order, one per network, and asks once", async () => {
    let asked = 0;
    const source = {
      devicesOf: async () => {
        asked++;
        return {
          ok: true as const,
          value: new Map([
            ['plexus.io/nic', ['nicB', 'nicA']],
            ['plexus.io/memif', ['memif4']],
          ]),
        };
      },
    };
    const r = await assignDevices(
      [
        step('pod', 'eth0', undefined, true),
        step('a', 'net1', 'plexus.io/nic'),
        step('m', 'net2', 'plexus.io/memif'),
        step('b', 'net3', 'plexus.io/nic'),
      ],
      pod,
      source,
    );
    assert.ok(r.ok);
    assert.deepEqual(
      r.value.map((s) => s.request.options?.deviceID),
      [undefined, 'nicB', 'memif4', 'nicA'],
    );
    assert.deepEqual(r.value[1]!.request.options?.kubeletDevice, { resourceName: 'plexus.io/nic', deviceID: 'nicB' });
    assert.equal(asked, 1);
  });

  it('a network added to a running pod takes a device no attachment of the pod uses yet, or fails naming the busy ones', async () => {
    const source = {
      devicesOf: async () => ({ ok: true as const, value: new Map([['plexus.io/memif', ['memif0', 'memif3']]]) }),
    };
    const taken = [{ resourceName: 'plexus.io/memif', deviceID: 'memif0' }];
    const r = await assignDevices([step('m2', 'net2', 'plexus.io/memif')], pod, source, taken);
    assert.ok(r.ok);
    assert.deepEqual(r.value[0]!.request.options?.kubeletDevice, {
      resourceName: 'plexus.io/memif',
      deviceID: 'memif3',
    });
    const none = await assignDevices([step('m3', 'net3', 'plexus.io/memif')], pod, source, [
      ...taken,
      { resourceName: 'plexus.io/memif', deviceID: 'memif3' },
    ]);
    assert.ok(!none.ok);
    assert.equal(none.error.code, 7);
    assert.match(none.error.message, /allocated pod default\/p 0 more \(2 in use by its networks\) for 1 network/);
  });

  it('asks nothing when no network names a resource', async () => {
    const r = await assignDevices([step('pod', 'eth0')], pod, { devicesOf: async () => assert.fail('asked') });
    assert.ok(r.ok);
  });

  it('fails with 7 naming the resource when the pod got fewer devices than networks need', async () => {
    const source = { devicesOf: async () => ({ ok: true as const, value: new Map([['plexus.io/nic', ['nicA']]]) }) };
    const r = await assignDevices(
      [step('a', 'net1', 'plexus.io/nic'), step('b', 'net2', 'plexus.io/nic')],
      pod,
      source,
    );
    assert.equal(r.ok, false);
    if (!r.ok) {
      assert.equal(r.error.code, 7);
      assert.match(
        r.error.message,
        /network default\/b \(net2\) needs a device of plexus\.io\/nic .* allocated pod default\/p 1 for 2 network/,
      );
    }
  });
});
