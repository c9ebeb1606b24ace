/** Persistent tap devices through the tun driver's ioctls (the only way the kernel offers to make them). */
import * as C from './constants';
import { callFailed, invalidRequest } from './failure';
import { sys } from './syscalls';
import type { TapSpec } from './types';

/** Creates a persistent tap in the calling thread's netns; the caller sets MTU, MAC and state over rtnetlink. */
export function createTap(tap: TapSpec): void {
  if (Buffer.byteLength(tap.name) > 15) throw invalidRequest('tap', tap.name, 'interface name longer than 15 bytes');
  const fd = sys.open('/dev/net/tun', C.O_RDWR | C.O_CLOEXEC);
  if (fd < 0) throw callFailed('open', '/dev/net/tun', sys.errno());
  try {
    const ifr = Buffer.alloc(40);
    ifr.write(tap.name, 0, 'utf8');
    // Exclusive: an existing tap of that name (another pod's, another plugin's) is an error, never taken over.
    let flags = C.IFF_TAP | C.IFF_TUN_EXCL;
    if (!tap.packetInfo) flags |= C.IFF_NO_PI;
    if (tap.multiQueue) flags |= C.IFF_MULTI_QUEUE;
    if (tap.vnetHdr) flags |= C.IFF_VNET_HDR;
    ifr.writeUInt16LE(flags, 16);
    const check = (rc: number, what: string): void => {
      if (rc < 0) throw callFailed(what, tap.name, sys.errno());
    };
    check(sys.ioctlPtr(fd, C.TUNSETIFF, ifr), 'TUNSETIFF');
    if (tap.owner !== undefined) check(sys.ioctlInt(fd, C.TUNSETOWNER, tap.owner), 'TUNSETOWNER');
    if (tap.group !== undefined) check(sys.ioctlInt(fd, C.TUNSETGROUP, tap.group), 'TUNSETGROUP');
    check(sys.ioctlInt(fd, C.TUNSETPERSIST, 1), 'TUNSETPERSIST');
  } finally {
    sys.close(fd);
  }
}
