/**
 * The reference plugins answer only once the pod's IPv6 addresses have passed duplicate address detection (polled
 * every 50 ms, for at most 5 s), so the pod can use them as soon as the runtime starts it: ipam.ConfigureIface does it
 * when an address has an IPv6 gateway (macvlan, ipvlan, host-device, tap, ptp), the bridge plugin with `enabledad`.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { CniCode, CniError, type Result, err, ok } from '../../cni/errors';
import type { KernelPort } from '../../kernel/kernel';
import type { IpamResult } from '../../ipam';
import type { AttachRequest, DriverEnv } from '../driver';
import { kernelError } from './kernel-error';

const SETTLE_POLL_MS = 50;
const SETTLE_TIMEOUT_MS = 5000;

/** Waits until no IPv6 address of `ifname` in `netns` is tentative; an address that failed DAD is an error. */
export async function settleAddresses(kernel: KernelPort, netns: string, ifname: string): Promise<Result<void>> {
  const deadline = Date.now() + SETTLE_TIMEOUT_MS;
  for (;;) {
    const r = await kernel.batch(netns, [{ op: 'addrList', name: ifname }]);
    if (!r.ok) return err(kernelError(r.error, `waiting for the IPv6 addresses of ${ifname} to pass DAD`));
    const v6 = r.value[0].filter((a) => a.family === 6);
    const failed = v6.find((a) => a.dadFailed);
    if (failed) return err(dadFailed(ifname, failed.address));
    if (!v6.some((a) => a.tentative)) return ok(undefined);
    if (Date.now() > deadline) return err(stillTentative(ifname));
    await sleep(SETTLE_POLL_MS);
  }
}

const dadFailed = (ifname: string, address: string): CniError =>
  new CniError(
    CniCode.Internal,
    `${ifname}: IPv6 address ${address} failed duplicate address detection`,
    'another host on the network has that address',
  );

const stillTentative = (ifname: string): CniError =>
  new CniError(
    CniCode.TryAgainLater,
    `${ifname}: IPv6 addresses still tentative after ${SETTLE_TIMEOUT_MS / 1000} s of duplicate address detection`,
  );

/** Whether ipam.ConfigureIface waits for DAD: some address has an IPv6 gateway. */
export const hasIpv6Gateway = (ipam: IpamResult | undefined): boolean =>
  (ipam?.ips ?? []).some((ip) => ip.gateway?.includes(':'));

/** As ipam.ConfigureIface: with an IPv6 gateway, waits for the pod interface's addresses to pass DAD. */
export async function settleLikeConfigureIface(
  req: AttachRequest,
  env: DriverEnv,
  ipam: IpamResult | undefined,
): Promise<Result<void>> {
  if (!hasIpv6Gateway(ipam)) return ok(undefined);
  const settled = await settleAddresses(env.kernel, req.netns, req.ifname);
  return settled.ok ? settled : err(settled.error.withContext(`network ${req.network.key}`));
}
