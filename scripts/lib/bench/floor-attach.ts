/**
 * The rtnetlink requests of one bridge attachment, as plexusd's kernel code sends them for a bridge ADD
 * (src/drivers/common/bridge-port.ts, pod-interface.ts), through src/kernel: the Node.js side of the floor
 * (floor-batch.ts runs it in a loop, floor-daemon.ts behind plexus-cni's socket).
 */
import { randomMac } from '../../../src/drivers/common/host-veth';
import { inNetns, openNetns } from '../../../src/kernel/netns';
import { RtnlSocket } from '../../../src/kernel/rtnetlink';

export interface AttachTarget {
  /** The bridge the host end is enslaved to (it exists, up). */
  readonly bridge: string;
  /** First two octets of the pods' /16 ("10.<n>"); the gateway is .0.1. */
  readonly net: string;
}

/** The address of the i-th pod in the target's /16. */
export const podAddress = (t: AttachTarget, i: number): string =>
  `${t.net}.${1 + Math.floor(i / 250)}.${2 + (i % 250)}`;

/**
 * A veth with its host end `hostName` on the bridge and up, its peer born in `netns` as eth0; an rtnetlink socket in
 * the pod's netns; eth0 up, the i-th address, the default route; eth0 read back. `received` is the thread's one
 * receive buffer (src/kernel/rtnetlink receiveBuffer), as each kernel thread of plexusd has.
 */
export function attachBridgePod(
  host: RtnlSocket,
  t: AttachTarget,
  hostName: string,
  netns: string,
  i: number,
  received: Buffer,
): void {
  host.addLink(
    { kind: 'veth', name: hostName, mac: randomMac(), up: true, bridge: t.bridge, peer: { name: 'eth0', netns } },
    openNetns,
  );
  const pod = inNetns(netns, () => RtnlSocket.open(received));
  try {
    pod.setLink('eth0', { up: true });
    pod.addAddress('eth0', `${podAddress(t, i)}/16`, { noDad: true });
    pod.addRoute({ dst: '0.0.0.0/0', dev: 'eth0', gw: `${t.net}.0.1` });
    pod.getLink('eth0');
  } finally {
    pod.close();
  }
}
