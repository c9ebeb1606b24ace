/**
 * The native `macvlan` driver: the reference macvlan plugin's behaviour, run in-process. The macvlan is created
 * directly inside the pod netns with its final name (one netlink request), on a master in the node's netns.
 */
import { CniCode, CniError, Result, ok } from '../../cni/errors';
import type { CniResult } from '../../cni/types';
import type { AttachRequest, Driver, DriverEnv } from '../driver';
import { allocatePodIps, isMissingLink, masterName, masterNotFound, plumbPodInterface, podResult } from '../common';
import { parseMacvlanConfig } from './config';

export const macvlanDriver: Driver = {
  type: 'macvlan',
  capabilities: ['ips', 'mac'],
  validate: parseMacvlanConfig,

  async attach(req: AttachRequest, env: DriverEnv): Promise<Result<CniResult>> {
    const parsed = parseMacvlanConfig(req.plugin);
    if (!parsed.ok) return parsed;
    const conf = parsed.value;
    const what = `network ${req.network.key}`;

    const master = await masterName(env.kernel, conf.master, what);
    if (!master.ok) return master;

    const ipam = await allocatePodIps(req, env, conf.ipam);
    if (!ipam.ok) return ipam;

    await env.record({ kind: 'deleteLink', netns: req.netns, name: req.ifname });
    const plumbed = await plumbPodInterface(req, env, {
      create: [
        {
          op: 'linkAdd',
          link: {
            kind: 'macvlan', name: req.ifname, netns: req.netns, master: master.value, mode: conf.mode,
            ...(conf.mtu ? { mtu: conf.mtu } : {}),
            ...(req.mac ? { mac: req.mac } : {}),
          },
        },
      ],
      createFailed: (e) =>
        isMissingLink(e, master.value)
          ? masterNotFound(what, master.value)
          : e.is('EEXIST')
          ? new CniError(CniCode.Internal, `${what}: interface ${req.ifname} already exists in ${req.netns}`, e.details)
          : e.withContext(`${what}: creating macvlan ${req.ifname} (mode ${conf.mode}) on ${master.value} in ${req.netns}`),
      ipam: ipam.value,
    });
    if (!plumbed.ok) return plumbed;
    return ok(podResult({ ifname: req.ifname, netns: req.netns, link: plumbed.value.link, ipam: ipam.value, routes: plumbed.value.routes }));
  },
};
