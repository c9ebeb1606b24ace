/**
 * The subjects of `npm run bench` (scripts/bench.ts): plexusd with its networks and the reference bridge plugin, each
 * with the networks of the multi-interface sections (4 to 6) when those run, and those sections' variants. Everything
 * made here is registered with the run's teardown as it is made.
 */
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { referencePlugins, referencePluginsDir } from '../../../test/support/plugin-dir';

/** Which reference plugins the bench runs, for its header. */
const referenceSource = (): string => `reference plugins from ${referencePluginsDir().source} (${referencePlugins()})`;
import type { Plugin } from '../cni';
import { deleteLinkIfPresent, freeTenNet } from '../host';
import { type MultiRuntime, plexusRuntime, referenceRuntime } from '../multinet';
import { Plexusd, hostLocalLeftovers, repoRoot, shimBinary, writeNetworkDefinition } from '../plexusd';
import { type Subject, describeSubject } from '../subject';
import type { Teardown } from '../teardown';
import { teardownsSettled } from './del-teardown';
import type { MultiVariant } from './multi';

export interface SetupContext {
  readonly teardown: Teardown;
  readonly prefix: string;
  /** The run's temp directory. */
  readonly root: string;
  /** A veth standing in for a host uplink (the macvlan master), shared by both runtimes. */
  readonly uplink: string;
  /** Second octets of the 10.x.0.0/16 nets taken so far; each setup adds its own. */
  readonly taken: number[];
  /** Whether the multi-interface sections run (their networks are made too). */
  readonly multi: boolean;
}

/** What a runtime brings to the multi-interface sections. */
interface MultiNetworks {
  readonly bridges: readonly string[];
  readonly leftovers: () => Promise<string[]>;
  /** The 10.x.0.0/16 of its secondary networks (multi only). */
  readonly subnet?: number;
}

export interface PlexusSetup {
  readonly subject: Subject;
  readonly daemon: Plexusd;
  readonly multi: MultiNetworks & { readonly plugin: Plugin; readonly settled: () => Promise<unknown> };
}

export interface ReferenceSetup {
  readonly subject: Subject;
  /** Only when the multi-interface sections run: the reference plugin of each network. */
  readonly multi?: MultiNetworks & { readonly networks: Readonly<Record<string, Plugin>> };
}

/** plexus's default network in the bench: a native bridge with host-local over 10.<second>.0.0/16. */
export const podnetConfig = (bridge: string, second: number): Record<string, unknown> => ({
  cniVersion: '1.1.0',
  name: 'podnet',
  type: 'bridge',
  bridge,
  isGateway: true,
  isDefaultGateway: true,
  ipMasq: false,
  ipam: { type: 'host-local', ranges: [[{ subnet: `10.${second}.0.0/16` }]] },
});

function takeNet(ctx: SetupContext): number {
  const second = freeTenNet(150, 199, ctx.taken);
  ctx.taken.push(second);
  return second;
}

function bridgeNamed(ctx: SetupContext, name: string): string {
  ctx.teardown.add(`delete bridge ${name}`, () => deleteLinkIfPresent(name));
  return name;
}

/** plexusd with `default/podnet` (a native bridge) and, for sections 4-6, mv, br2, ptpnet and a delegated ptpdel. */
export async function setUpPlexus(ctx: SetupContext, stateSync: boolean | undefined): Promise<PlexusSetup> {
  const { prefix, root, uplink } = ctx;
  const second = takeNet(ctx);
  const networksDir = join(root, 'networks');
  await mkdir(networksDir);
  const bridge = bridgeNamed(ctx, `${prefix}pb`);
  await writeNetworkDefinition(networksDir, 'default', 'podnet', podnetConfig(bridge, second));
  const pxHostLocal = join(root, 'px-host-local');
  const bridges = [bridge];
  let subnet: number | undefined;
  if (ctx.multi) {
    const s2 = takeNet(ctx);
    subnet = s2;
    const bridge2 = bridgeNamed(ctx, `${prefix}p2`);
    bridges.push(bridge2);
    const ipam = (i: number, extra: Record<string, unknown> = {}): Record<string, unknown> => ({
      type: 'host-local',
      ranges: [[{ subnet: `10.${s2}.${i}.0/24` }]],
      ...extra,
    });
    await writeNetworkDefinition(networksDir, 'default', 'mv', {
      cniVersion: '1.1.0',
      name: 'mv',
      type: 'macvlan',
      master: uplink,
      mode: 'bridge',
      ipam: ipam(1),
    });
    await writeNetworkDefinition(networksDir, 'default', 'br2', {
      cniVersion: '1.1.0',
      name: 'br2',
      type: 'bridge',
      bridge: bridge2,
      isGateway: true,
      ipMasq: false,
      ipam: ipam(2),
    });
    await writeNetworkDefinition(networksDir, 'default', 'ptpnet', {
      cniVersion: '1.0.0',
      name: 'ptpnet',
      type: 'ptp',
      ipMasq: false,
      ipam: ipam(3),
    });
    // The same kind of network, forced to delegation: plexusd execs the reference ptp (+ host-local) for it.
    await writeNetworkDefinition(
      networksDir,
      'default',
      'ptpdel',
      { cniVersion: '1.0.0', name: 'ptpdel', type: 'ptp', ipMasq: false, ipam: ipam(4, { dataDir: pxHostLocal }) },
      { 'plexus.io/delegate': 'true' },
    );
  }
  const daemon = await Plexusd.start(ctx.teardown, {
    root: join(root, 'plexusd'),
    networksDir,
    defaultNetwork: 'default/podnet',
    cniBinDir: referencePlugins(),
    logLevel: 'error',
    ...(stateSync !== undefined ? { stateSync } : {}),
  });
  const settled = (): Promise<unknown> => teardownsSettled(daemon.stateDir);
  const subject: Subject = {
    name: 'plexus',
    tag: 'px',
    plugin: {
      binary: shimBinary(),
      config: { cniVersion: '1.1.0', name: 'plexus', type: 'plexus-cni', socketPath: daemon.socket },
      env: { CNI_PATH: `${join(repoRoot(), 'bin')}:${referencePlugins()}` },
    },
    bridge,
    leftovers: () => daemon.leftovers(),
    settled,
  };
  console.log(`  plexus:    bin/plexus-cni -> plexusd pid ${daemon.pid}, bridge ${bridge}, 10.${second}.0.0/16`);
  const leftovers = async (): Promise<string[]> => [
    ...(await daemon.leftovers()),
    ...(await hostLocalLeftovers(pxHostLocal, 'ptpdel')),
  ];
  return {
    subject,
    daemon,
    multi: { plugin: subject.plugin, bridges, leftovers, settled, ...(subnet !== undefined ? { subnet } : {}) },
  };
}

/** The reference bridge plugin with host-local and, for sections 4-6, the reference macvlan, bridge and ptp. */
export function setUpReference(ctx: SetupContext): ReferenceSetup {
  const { prefix, root, uplink } = ctx;
  const second = takeNet(ctx);
  const bridge = bridgeNamed(ctx, `${prefix}rb`);
  const dataDir = join(root, 'host-local');
  const subject = describeSubject('reference', 'rf', {
    binary: join(referencePlugins(), 'bridge'),
    // The reference plugins 1.9.1 speak CNI 1.1.0, as the Plexus subject is configured.
    config: {
      cniVersion: '1.1.0',
      name: `${prefix}-ref`,
      type: 'bridge',
      bridge,
      isGateway: true,
      isDefaultGateway: true,
      ipMasq: false,
      ipam: { type: 'host-local', ranges: [[{ subnet: `10.${second}.0.0/16` }]], dataDir },
    },
    env: { CNI_PATH: referencePlugins() },
  });
  console.log(`  reference: ${referenceSource()}: bridge + host-local, bridge ${bridge}, 10.${second}.0.0/16`);
  if (!ctx.multi) return { subject };
  const s2 = takeNet(ctx);
  const bridge2 = bridgeNamed(ctx, `${prefix}r2`);
  const ipam = (i: number): Record<string, unknown> => ({
    type: 'host-local',
    ranges: [[{ subnet: `10.${s2}.${i}.0/24` }]],
    dataDir,
  });
  const plugin = (type: string, name: string, config: Record<string, unknown>): Plugin => ({
    binary: join(referencePlugins(), type),
    config: { cniVersion: '1.1.0', name, type, ...config },
    env: { CNI_PATH: referencePlugins() },
  });
  const networks = {
    bridge: subject.plugin,
    mv: plugin('macvlan', `${prefix}-rmv`, { master: uplink, mode: 'bridge', ipam: ipam(1) }),
    br2: plugin('bridge', `${prefix}-rbr2`, { bridge: bridge2, isGateway: true, ipMasq: false, ipam: ipam(2) }),
    ptp: plugin('ptp', `${prefix}-rptp`, { ipMasq: false, ipam: ipam(3) }),
  };
  const names = Object.values(networks).map((p) => String(p.config['name']));
  const leftovers = async (): Promise<string[]> =>
    (await Promise.all(names.map((n) => hostLocalLeftovers(dataDir, n)))).flat();
  return { subject, multi: { networks, bridges: [bridge, bridge2], leftovers, subnet: s2 } };
}

const VARIANTS = [
  { key: '1', networks: 'bridge', selection: [] as string[], reference: ['bridge'] },
  { key: '2', networks: 'bridge + macvlan', selection: ['mv'], reference: ['bridge', 'mv'] },
  {
    key: '4',
    networks: 'bridge + macvlan + bridge2 + ptp (all native in plexus)',
    selection: ['mv', 'br2', 'ptpnet'],
    reference: ['bridge', 'mv', 'br2', 'ptp'],
  },
  {
    key: '4d',
    networks: 'bridge + macvlan + bridge2 + ptp (plexus delegates ptp)',
    selection: ['mv', 'br2', 'ptpdel'],
    reference: ['bridge', 'mv', 'br2', 'ptp'],
  },
  {
    key: 'burst',
    networks: 'bridge + macvlan + bridge2',
    selection: ['mv', 'br2'],
    reference: ['bridge', 'mv', 'br2'],
  },
];

/**
 * The multi-interface variants (sections 4 and 6) and the runtimes of the 3-network burst (section 5): the same
 * networks through Plexus (one call, the annotation) and through the reference runtime (a plugin exec per network).
 */
export function multiVariants(
  ctx: SetupContext,
  plexus: PlexusSetup | undefined,
  reference: ReferenceSetup | undefined,
): { variants: MultiVariant[]; burstRuntimes: MultiRuntime[] } {
  const variants: MultiVariant[] = [];
  let burstRuntimes: MultiRuntime[] = [];
  if (!ctx.multi) return { variants, burstRuntimes };
  const build = (d: (typeof VARIANTS)[number]): MultiRuntime[] => {
    const out: MultiRuntime[] = [];
    if (plexus) {
      const { plugin, bridges, leftovers, settled } = plexus.multi;
      out.push(
        plexusRuntime({
          name: 'plexus',
          tag: 'px',
          plugin,
          selection: d.selection.join(', '),
          interfaces: d.reference.length,
          bridges: [...bridges],
          leftovers,
          settled,
        }),
      );
    }
    const ref = reference?.multi;
    if (ref) {
      const networks = d.reference.map((k, i) => ({
        ifname: i === 0 ? 'eth0' : `net${i}`,
        plugin: ref.networks[k] as Plugin,
      }));
      out.push(
        referenceRuntime({
          name: 'reference',
          tag: 'rf',
          networks,
          bridges: [...ref.bridges],
          leftovers: ref.leftovers,
        }),
      );
    }
    return out;
  };
  for (const d of VARIANTS) {
    if (d.key === 'burst') burstRuntimes = build(d);
    else variants.push({ key: d.key, networks: d.networks, runtimes: build(d) });
  }
  if (variants.some((v) => v.runtimes.length > 0)) {
    const { prefix, uplink } = ctx;
    console.log(
      `  multi-interface: uplink ${uplink} (veth); plexus networks mv, br2 (${prefix}p2), ptpnet (native), ptpdel (delegated) in 10.${String(plexus?.multi.subnet ?? '-')}.0.0/16; ` +
        `reference runtime macvlan, bridge (${prefix}r2), ptp in 10.${String(reference?.multi?.subnet ?? '-')}.0.0/16`,
    );
  }
  return { variants, burstRuntimes };
}
