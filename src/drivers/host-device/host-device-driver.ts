/**
 * The native `host-device` driver: the reference host-device plugin's behaviour, run in-process. An existing
 * host netdev (a NIC, an SR-IOV VF, ...) is moved into the pod netns and renamed to the pod's interface name in
 * one netlink request; undo (returnLinkToHost) moves it back under its original name.
 */
import { kernelError } from '../common/kernel-error';
import { CniCode, CniError, type Result, err, ok } from '../../cni/errors';
import type { CniResult } from '../../cni/types';
import { onePlugin, stepKind, type AttachRequest, type Driver, type DriverEnv, type NodeOption } from '../driver';
import { allocatePodIps, plumbPodInterface, podResult } from '../common';
import { parseHostDeviceConfig, selectorFor, type HostDeviceConfig } from './config';
import { describeSelector, findHostDevice } from './find';
import { settleLikeConfigureIface } from '../common/dad';
import { ipamRoutes, ipv6EnableSysctls } from '../common/pod-sysctls';

import { returnLinkKind, returnLinkStep } from './undo';
import { definedFields } from '../../common/defined-fields';

/**
 * A host-device driver. `node` stands a netns in for the node the device is taken from (tests); its undo returns
 * devices to the daemon's netns all the same.
 */
export const createHostDeviceDriver = ({ node }: NodeOption = {}): Driver<HostDeviceConfig> => ({
  type: 'host-device',
  capabilities: ['ips', 'deviceID'],
  parse: onePlugin(parseHostDeviceConfig),
  undo: { returnLink: stepKind(returnLinkKind) },
  attach: (req, conf, env) => attachHostDevice(req, conf, env, node),
});

async function attachHostDevice(
  req: AttachRequest,
  conf: HostDeviceConfig,
  env: DriverEnv,
  node: string | undefined,
): Promise<Result<CniResult>> {
  const what = `network ${req.network.key}`;
  const fromRuntime = req.runtimeConfig.get('deviceID');
  const selector = selectorFor(
    req.plugin,
    conf,
    req.options?.deviceID ?? (typeof fromRuntime === 'string' ? fromRuntime : undefined),
  );
  if (!selector.ok) return selector;

  const state = await env.kernel.batch(node, [{ op: 'linkList' }]);
  if (!state.ok) return err(kernelError(state.error, `${what}: listing host links`));
  const device = await findHostDevice(selector.value, state.value[0]);
  if (!device.ok) return err(device.error.withContext(what));
  const hostName = device.value.name;

  // Checked before anything is recorded: undoing a move onto an existing pod interface would take that one instead.
  const existing = await env.kernel.getLink(req.netns, req.ifname);
  if (!existing.ok) return err(kernelError(existing.error, `${what}: looking up ${req.ifname} in ${req.netns}`));
  if (existing.value)
    return err(new CniError(CniCode.Internal, `${what}: interface ${req.ifname} already exists in ${req.netns}`));

  const ipam = await allocatePodIps(req, env, conf.ipam);
  if (!ipam.ok) return ipam;

  const mac = device.value.mac ? { mac: device.value.mac } : {};
  const up = device.value.up ? { up: true } : {};
  await env.record(returnLinkStep({ netns: req.netns, name: req.ifname, hostName, ...mac, ...up }));
  const plumbed = await plumbPodInterface(req, env, {
    ...definedFields({ node: node || undefined }),
    create: [{ op: 'linkSet', name: hostName, netns: req.netns, newName: req.ifname }],
    createFailed: (e) =>
      kernelError(
        e,
        `${what}: moving ${describeSelector(selector.value)} (${hostName}) into ${req.netns} as ${req.ifname}`,
      ),
    ipam: ipam.value,
    before: ipv6EnableSysctls(req.ifname, ipam.value),
    dadBySysctl: true,
  });
  if (!plumbed.ok) return plumbed;
  const settled = await settleLikeConfigureIface(req, env, ipam.value);
  if (!settled.ok) return settled;
  const pciID = selector.value.by === 'pciBusID' ? selector.value.pciAddress : undefined;
  return ok(
    podResult({
      ifname: req.ifname,
      netns: req.netns,
      link: plumbed.value.link,
      ipam: ipam.value,
      routes: ipamRoutes(ipam.value),
      ...definedFields({ pciID: pciID || undefined }),
    }),
  );
}
