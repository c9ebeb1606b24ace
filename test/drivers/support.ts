/**
 * Test support for driver tests: attach requests built from a plugin config, and a DriverEnv whose journal is an
 * array, so a test can run the recorded undo steps in reverse exactly as the engine would.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { RuntimeConfig } from '../../src/cni/args';
import type { CniError, Result } from '../../src/cni/errors';
import type { AttachmentOptions, AttachRequest, Driver, DriverEnv, UndoStep } from '../../src/drivers/driver';
import type { CniResult } from '../../src/cni/types';
import { DriverRegistry } from '../../src/drivers/registry';
import { Ipam } from '../../src/ipam';
import { Kernel } from '../../src/kernel/kernel';
import type { PluginConfig } from '../../src/networks/nad';
import { after, before } from 'node:test';
import { ip, NetnsFixture, uniquePrefix } from '../support/netns';

export const must = <T>(r: Result<T, Error>): T => {
  if (!r.ok) throw r.error;
  return r.value;
};

/** The error of a result that must have failed. */
export const failure = <T>(r: Result<T, CniError>): CniError => {
  if (r.ok) throw new Error(`expected a failure, got ${JSON.stringify(r.value)}`);
  return r.error;
};

export const plugin = (network: string, config: Record<string, unknown>): PluginConfig =>
  ({ cniVersion: '1.1.0', name: network, ...config }) as PluginConfig;

export function attachRequest(opts: {
  readonly network: string;
  readonly config: Record<string, unknown>;
  readonly netns: string;
  readonly ifname?: string;
  /** The runtime's CNI_IFNAME (default: the pod interface, as for a default network). */
  readonly runtimeIfname?: string;
  readonly containerId?: string;
  readonly ips?: readonly string[];
  readonly mac?: string;
  readonly options?: AttachmentOptions;
  readonly runtimeConfig?: Record<string, unknown>;
}): AttachRequest {
  const p = plugin(opts.network, opts.config);
  return {
    containerId: opts.containerId ?? `c-${Math.random().toString(16).slice(2, 12)}`,
    netns: opts.netns,
    ifname: opts.ifname ?? 'net1',
    runtimeIfname: opts.runtimeIfname ?? opts.ifname ?? 'net1',
    pod: { namespace: 'default', name: 'test-pod' },
    network: {
      namespace: 'default',
      name: opts.network,
      key: `default/${opts.network}`,
      annotations: {},
      cniVersion: '1.1.0',
      cniName: opts.network,
      plugins: [p],
      source: 'test',
    },
    plugin: p,
    ips: opts.ips ?? [],
    ...(opts.mac ? { mac: opts.mac } : {}),
    runtimeConfig: new RuntimeConfig(opts.runtimeConfig ?? {}),
    ...(opts.options ? { options: opts.options } : {}),
  };
}

/** A DriverEnv whose journal is `steps`; `undo()` runs them in reverse like the engine's rollback. */
/** Undoes any recorded step, as the engine does (through a registry of every driver). */
const undoAny = new DriverRegistry().undo;

export class RecordingEnv {
  readonly steps: UndoStep[] = [];
  readonly env: DriverEnv;

  constructor(
    readonly kernel: Kernel,
    readonly ipam: Ipam,
  ) {
    this.env = { kernel, ipam, cniBinDir: '/nonexistent', record: async (step) => void this.steps.push(step) };
  }

  async undo(): Promise<void> {
    for (const step of this.steps.splice(0).reverse()) {
      const r = await undoAny(step, { kernel: this.kernel, ipam: this.ipam });
      if (!r.ok) throw r.error;
    }
  }
}

/** A throwaway IPAM store. */
export async function tempIpam(): Promise<{ ipam: Ipam; remove: () => Promise<void> }> {
  const dir = await mkdtemp(join(tmpdir(), 'plexus-driver-ipam-'));
  return { ipam: await Ipam.open(dir), remove: () => rm(dir, { recursive: true, force: true }) };
}

/**
 * What every driver test file needs: a real kernel layer, a throwaway IPAM store and a netns fixture with a
 * unique prefix, set up before the file's tests and removed after them, even when they fail.
 */
export function driverTestbed(tag: string): {
  readonly prefix: string;
  readonly fx: NetnsFixture;
  readonly kernel: Kernel;
  readonly ipam: Ipam;
} {
  const prefix = uniquePrefix(tag);
  const fx = new NetnsFixture(prefix);
  let kernel: Kernel | undefined;
  let store: { ipam: Ipam; remove: () => Promise<void> } | undefined;
  before(async () => {
    kernel = new Kernel();
    store = await tempIpam();
  });
  after(async () => {
    fx.cleanup();
    await kernel?.close();
    await store?.remove();
  });
  return {
    prefix,
    fx,
    get kernel(): Kernel {
      if (!kernel) throw new Error('the testbed is used before its before() hook ran');
      return kernel;
    },
    get ipam(): Ipam {
      if (!store) throw new Error('the testbed is used before its before() hook ran');
      return store.ipam;
    },
  };
}

/** A stand-in host NIC: a veth on the host whose peer is in a test netns, so all it sends stays in our namespaces. */
export function hostUplink(fx: NetnsFixture, name: string): void {
  const lan = fx.create('lan');
  fx.trackHostLink(name);
  ip('link', 'add', name, 'type', 'veth', 'peer', 'name', 'lan0', 'netns', lan.name);
  ip('link', 'set', name, 'up');
  ip('-n', lan.name, 'link', 'set', 'lan0', 'up');
}

/** What the engine does for one attachment: parse the network's config with the driver, then attach with the result. */
export async function attachParsed<C>(
  driver: Driver<C>,
  req: AttachRequest,
  env: DriverEnv,
): Promise<Result<CniResult>> {
  const config = driver.parse(req.network.plugins);
  return config.ok ? driver.attach(req, config.value, env) : config;
}
