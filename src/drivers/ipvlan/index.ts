/**
 * The native `ipvlan` driver: the reference ipvlan plugin's behaviour, run in-process. The ipvlan is created
 * directly inside the pod netns with its final name, on a master in the node's netns. ipvlan interfaces share
 * the master's MAC address, so a requested MAC cannot be honoured.
 */
import { CniCode, CniError, Result, err, ok } from '../../cni/errors';
import type { CniResult } from '../../cni/types';
import type { AttachRequest, Driver, DriverEnv } from '../driver';
import { allocatePodIps, isMissingLink, masterName, masterNotFound, plumbPodInterface, podResult } from '../common';
import { parseIpvlanConfig } from './config';

export const ipvlanDriver: Driver = {
  type: 'ipvlan',
  capabilities: ['ips'],
  validate: parseIpvlanConfig,

  async attach(req: AttachRequest, env: DriverEnv): Promise<Result<CniResult>> {
    const parsed = parseIpvlanConfig(req.plugin);
    if (!parsed.ok) return parsed;
    const conf = parsed.value;
    const what = `network ${req.network.key}`;
    if (req.mac) return err(new CniError(CniCode.UnsupportedField, `${what}: ipvlan interfaces share their master's MAC address, so MAC ${req.mac} cannot be set`, 'drop the MAC request, or use macvlan'));

    const master = await masterName(env.kernel, conf.master, what);
    if (!master.ok) return master;

    const ipam = await allocatePodIps(req, env, conf.ipam);
    if (!ipam.ok) return ipam;

    await env.record({ kind: 'deleteLink', netns: req.netns, name: req.ifname });
    const plumbed = await plumbPodInterface(req, env, {
      create: [{ op: 'linkAdd', link: { kind: 'ipvlan', name: req.ifname, netns: req.netns, master: master.value, mode: conf.mode, ...(conf.mtu ? { mtu: conf.mtu } : {}) } }],
      createFailed: (e) =>
        isMissingLink(e, master.value)
          ? masterNotFound(what, master.value)
          : e.is('EEXIST')
          ? new CniError(CniCode.Internal, `${what}: interface ${req.ifname} already exists in ${req.netns}`, e.details)
          : e.withContext(`${what}: creating ipvlan ${req.ifname} (mode ${conf.mode}) on ${master.value} in ${req.netns}`),
      ipam: ipam.value,
    });
    if (!plumbed.ok) return plumbed;
    return ok(podResult({ ifname: req.ifname, netns: req.netns, link: plumbed.value.link, ipam: ipam.value, routes: plumbed.value.routes }));
  },
};
