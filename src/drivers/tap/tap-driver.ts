/**
 * The native `tap` driver: the reference tap plugin's behaviour, run in-process. A persistent tap device is
 * created inside the pod netns with its final name (for a VM runtime such as KubeVirt to open later), owned by
 * `owner`/`group` when given, and optionally enslaved to a bridge that already exists in the pod netns.
 */
import { kernelError } from '../common/kernel-error';
import { CniCode, CniError, type Result, ok } from '../../cni/errors';
import type { CniResult } from '../../cni/types';
import { onePlugin, type AttachRequest, type Driver, type DriverEnv } from '../driver';
import { allocatePodIps, isMissingLink, plumbPodInterface, podResult } from '../common';
import { parseTapConfig, type TapConfig } from './config';
import { recordPodLink } from '../common/pod-link';
import { ipamRoutes, ipv6EnableSysctls, tolerantSysctl } from '../common/pod-sysctls';
import { definedFields } from '../../common/defined-fields';

/** The reference tap's only sysctl: announce the addresses by ARP when the tap comes up. */
const arpNotify = (ifname: string) => tolerantSysctl(`net/ipv4/conf/${ifname}/arp_notify`, '1');

export const createTapDriver = (): Driver<TapConfig> => ({
  type: 'tap',
  capabilities: ['ips', 'mac'],
  parse: onePlugin(parseTapConfig),
  attach: attachTap,
});

async function attachTap(req: AttachRequest, conf: TapConfig, env: DriverEnv): Promise<Result<CniResult>> {
  const what = `network ${req.network.key}`;

  const ipam = await allocatePodIps(req, env, conf.ipam);
  if (!ipam.ok) return ipam;

  const mac = req.mac ?? conf.mac;
  const group = await recordPodLink(req, env);
  const plumbed = await plumbPodInterface(req, env, {
    node: req.netns, // a tap is created by whichever netns opens /dev/net/tun: the pod's
    create: [
      {
        op: 'tapAdd',
        tap: {
          name: req.ifname,
          multiQueue: conf.multiQueue,
          // The reference makes a tap with both owner and group over netlink, with these flags; else with `ip tuntap`.
          ...(conf.owner !== undefined && conf.group !== undefined ? { vnetHdr: true, packetInfo: true } : {}),
          ...definedFields({ owner: conf.owner, group: conf.group, mtu: conf.mtu || undefined, mac: mac || undefined }),
        },
      },
      // A tap is made by ioctls, which cannot give it a link group: it gets its mark in the next op of the batch.
      { op: 'linkSet' as const, name: req.ifname, group },
      ...(conf.bridge ? [{ op: 'linkSet' as const, name: req.ifname, bridge: conf.bridge }] : []),
    ],
    createFailed: (e) => {
      if (conf.bridge && isMissingLink(e, conf.bridge)) {
        return new CniError(
          CniCode.InvalidNetworkConfig,
          `${what}: bridge ${conf.bridge} not found in the pod netns ${req.netns}`,
          'the tap plugin enslaves to a bridge inside the pod: create it earlier in the chain, or drop "bridge"',
        );
      }
      if (e.is('EEXIST') || e.is('EBUSY'))
        return new CniError(
          CniCode.Internal,
          `${what}: interface ${req.ifname} already exists in ${req.netns}`,
          e.details,
        );
      return kernelError(e, `${what}: creating tap ${req.ifname} in ${req.netns}`);
    },
    ipam: ipam.value,
    ...(ipam.value ? { before: [arpNotify(req.ifname), ...ipv6EnableSysctls(req.ifname, ipam.value)] } : {}),
    // DAD runs once a VM opens the tap (no carrier before): the reference waits 5 s for it in vain, Plexus does not.
    dadBySysctl: true,
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
