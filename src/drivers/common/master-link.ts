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
import { checkLinkName, ipamField, mtuField, parseOptionalIpam, parsePluginConfig, unsupportedField } from './config';
import { isMissingLink, masterName, masterNotFound } from './host-links';
import { allocatePodIps, plumbPodInterface, podResult } from './pod-interface';
import { recordPodLink } from './pod-link';
import { ipamRoutes, ipv6EnableSysctls, notifySysctls } from './pod-sysctls';

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
  if (c.linkInContainer) {
    return err(
      unsupportedField(
        plugin,
        'linkInContainer: a master inside the pod netns is not supported natively',
        'set "linkInContainer": false, or run the reference plugin through the delegate driver',
      ),
    );
  }
  if (c.master !== undefined) {
    const name = checkLinkName(plugin, 'master', c.master);
    if (!name.ok) return name;
  }
  const ipam = parseOptionalIpam(plugin, c.ipam);
  if (!ipam.ok) return ipam;
  return ok({
    ...(c.master ? { master: c.master } : {}),
    mode: c.mode,
    ...(c.mtu ? { mtu: c.mtu } : {}),
    ...(ipam.value ? { ipam: ipam.value } : {}),
  });
}

/** Attaches a macvlan or ipvlan: resolve the master, reserve IPs, create the link in the pod, configure it. */
export async function attachMasterLink<Mode extends string>(
  kind: 'macvlan' | 'ipvlan',
  conf: MasterLinkConfig<Mode>,
  req: AttachRequest,
  env: DriverEnv,
): Promise<Result<CniResult>> {
  const what = `network ${req.network.key}`;
  const master = await masterName(env.kernel, conf.master, what);
  if (!master.ok) return master;
  const ipam = await allocatePodIps(req, env, conf.ipam);
  if (!ipam.ok) return ipam;

  const group = await recordPodLink(req, env);
  const base = {
    name: req.ifname,
    netns: req.netns,
    master: master.value,
    group,
    ...(conf.mtu ? { mtu: conf.mtu } : {}),
  };
  const link =
    kind === 'macvlan'
      ? { ...base, kind, mode: conf.mode as never, ...((req.mac ?? conf.mac) ? { mac: req.mac ?? conf.mac } : {}) }
      : { ...base, kind, mode: conf.mode as never };
  const plumbed = await plumbPodInterface(req, env, {
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
  });
  if (!plumbed.ok) return plumbed;
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
