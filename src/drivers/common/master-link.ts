/**
 * What macvlan and ipvlan share: a link on a master in the node's netns, created directly inside the pod netns
 * with its final name, with the reference plugins' `master`, `mode`, `mtu`, `linkInContainer` and `ipam` keys.
 */
import { kernelError } from './kernel-error';
import { z } from 'zod';
import { CniCode, CniError, type Result, err, ok } from '../../cni/errors';
import type { CniResult } from '../../cni/types';
import type { IpamConfig } from '../../ipam';
import type { PluginConfig } from '../../networks/nad';
import type { AttachRequest, DriverEnv } from '../driver';
import {
  checkLinkName,
  invalidConfig,
  ipamField,
  mtuField,
  notNative,
  parseOptionalIpam,
  parsePluginConfig,
} from './config';
import { settleLikeConfigureIface } from './dad';
import { isMissingLink, masterName, masterNotFound, resolveMaster } from './host-links';
import type { KernelPort } from '../../kernel/kernel';
import type { LinkInfo } from '../../kernel/types';
import { allocatePodIps, plumbPodInterface, podResult } from './pod-interface';
import { recordPodLink } from './pod-link';
import { ipamRoutes, ipv6EnableSysctls, notifySysctls } from './pod-sysctls';
import { definedFields } from '../../common/defined-fields';

export interface MasterLinkConfig<Mode extends string> {
  /** Undefined: the interface of the host's default route, as in the reference plugins. */
  readonly master?: string;
  readonly mode: Mode;
  readonly mtu?: number;
  /** macvlan's `mac`: the pod interface's MAC unless the runtime asks for one. */
  readonly mac?: string;
  readonly ipam?: IpamConfig;
}

/** The config schema of a master-link plugin whose modes are `modes`, the first being the default. */
export function parseMasterLinkConfig<Mode extends string>(
  modes: readonly [Mode, ...Mode[]],
  plugin: PluginConfig,
): Result<MasterLinkConfig<Mode>> {
  const schema = z.looseObject({
    master: z.string().optional(),
    mode: z.enum(modes).default(modes[0]),
    mtu: mtuField,
    linkInContainer: z.boolean().default(false),
    ipam: ipamField,
  });
  const parsed = parsePluginConfig(schema, plugin);
  if (!parsed.ok) return parsed;
  const c = parsed.value;
  if (c.linkInContainer) return err(notNative(plugin, 'linkInContainer'));
  if (c.master !== undefined) {
    const name = checkLinkName(plugin, 'master', c.master);
    if (!name.ok) return name;
  }
  const ipam = parseOptionalIpam(plugin, c.ipam);
  if (!ipam.ok) return ipam;
  return ok({
    ...definedFields({ master: c.master || undefined }),
    mode: c.mode,
    ...definedFields({ mtu: c.mtu || undefined, ipam: ipam.value }),
  });
}

/** Which master link is attached, how, and where the node is. */
export interface MasterLinkAttachment<Mode extends string> {
  readonly kind: 'macvlan' | 'ipvlan';
  readonly conf: MasterLinkConfig<Mode>;
  /** The netns standing in for the node, where the master is (tests); the daemon's own when undefined. */
  readonly node?: string;
}

/** Attaches a macvlan or ipvlan: resolve the master, reserve IPs, create the link in the pod, configure it. */
export async function attachMasterLink<Mode extends string>(
  { kind, conf, node }: MasterLinkAttachment<Mode>,
  req: AttachRequest,
  env: DriverEnv,
): Promise<Result<CniResult>> {
  const what = `network ${req.network.key}`;
  const master = await masterOf({ kind, conf, ...definedFields({ node: node || undefined }) }, req, env);
  if (!master.ok) return master;
  const ipam = await allocatePodIps(req, env, conf.ipam);
  if (!ipam.ok) return ipam;

  const group = await recordPodLink(req, env);
  const base = {
    name: req.ifname,
    netns: req.netns,
    master: master.value,
    group,
    ...definedFields({ mtu: conf.mtu || undefined }),
  };
  const link =
    kind === 'macvlan'
      ? { ...base, kind, mode: conf.mode as never, ...((req.mac ?? conf.mac) ? { mac: req.mac ?? conf.mac } : {}) }
      : { ...base, kind, mode: conf.mode as never };
  const plumbed = await plumbPodInterface(req, env, {
    ...definedFields({ node: node || undefined }),
    create: [{ op: 'linkAdd', link }],
    createFailed: (e) =>
      isMissingLink(e, master.value)
        ? masterNotFound(what, master.value)
        : e.is('EEXIST')
          ? new CniError(CniCode.Internal, `${what}: interface ${req.ifname} already exists in ${req.netns}`, e.details)
          : kernelError(
              e,
              `${what}: creating ${kind} ${req.ifname} (mode ${conf.mode}) on ${master.value} in ${req.netns}`,
            ),
    ipam: ipam.value,
    ...(ipam.value ? { before: [...notifySysctls(req.ifname), ...ipv6EnableSysctls(req.ifname, ipam.value)] } : {}),
    dadBySysctl: true,
  });
  if (!plumbed.ok) return plumbed;
  const settled = await settleLikeConfigureIface(req, env, ipam.value);
  if (!settled.ok) return settled;
  return ok(
    podResult({
      ifname: req.ifname,
      netns: req.netns,
      link: plumbed.value.link,
      ipam: ipam.value,
      routes: ipamRoutes(ipam.value),
    }),
  );
}

/**
 * The master's name: the configured one (checked by the kernel when the link is created: see isMissingLink), or the
 * default route's link. With an `mtu`, the master is read to refuse an MTU above its own, as the reference does
 * (the kernel's refusal would be a bare EINVAL).
 */
async function masterOf<Mode extends string>(
  { conf, node }: MasterLinkAttachment<Mode>,
  req: AttachRequest,
  env: DriverEnv,
): Promise<Result<string>> {
  const what = `network ${req.network.key}`;
  if (!conf.mtu) return masterName(env.kernel, conf.master, what, node);
  const master = await resolveMaster(env.kernel, conf.master, what, node);
  if (!master.ok) return master;
  if (conf.mtu > master.value.mtu) return err(mtuAboveMaster(req, conf.mtu, master.value));
  return ok(master.value.name);
}

/** CHECK as the reference macvlan's and ipvlan's: the master the network's config names (or defaults to) is there. */
export async function checkMasterLink<Mode extends string>(
  conf: MasterLinkConfig<Mode> | undefined,
  env: { readonly kernel: KernelPort },
  node: string | undefined,
): Promise<Result<void>> {
  if (!conf) return ok(undefined);
  const master = await resolveMaster(env.kernel, conf.master, 'CHECK failed', node);
  return master.ok ? ok(undefined) : master;
}

const mtuAboveMaster = (req: AttachRequest, mtu: number, master: LinkInfo): CniError =>
  invalidConfig(
    req.plugin,
    `mtu ${mtu} is above the MTU of master ${master.name} (${master.mtu})`,
    `set "mtu" to at most ${master.mtu}, or leave it out`,
  );
