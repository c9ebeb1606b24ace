/**
 * The host end of a pod's veth, shared by the drivers that connect a pod to the node with one (bridge, vxlan, ptp):
 * its stable name, its MAC, the journal step that deletes it, and the op that creates the pair with the pod's end
 * born in the pod netns under its final name.
 */
import { kernelError } from './kernel-error';
import { randomBytes } from 'node:crypto';
import { CniCode, CniError } from '../../cni/errors';
import type { KernelCallError } from '../../kernel/kernel';
import type { BatchOp } from '../../kernel/types';
import type { AttachRequest, DriverEnv } from '../driver';
import { attachmentHash } from './attachment-id';
import { definedFields } from '../../common/defined-fields';

/**
 * A random unicast, locally administered MAC, as the kernel would pick. Choosing it here means the result needs
 * no read-back of the host link, and a MAC that was set (not random) is one udev's MACAddressPolicy leaves alone,
 * so the MAC in the result stays true.
 */
export function randomMac(): string {
  const b = randomBytes(6);
  b[0] = (b[0]! & 0xfe) | 0x02;
  return [...b].map((x) => x.toString(16).padStart(2, '0')).join(':');
}

/**
 * A stable host-side name per attachment (container, runtime interface, pod interface), so a retry or recovery finds
 * the same link and no other attachment, even of the same container, ever has it.
 */
export const hostVethName = (containerId: string, runtimeIfname: string, podIfname: string): string =>
  `veth${attachmentHash(containerId, runtimeIfname, podIfname, 11)}`;

export interface HostVeth {
  readonly name: string;
  readonly mac: string;
  /** Creates the pair (run in the node's netns). */
  readonly create: BatchOp;
  /** The error to report when `create` fails. */
  readonly createFailed: (e: KernelCallError) => CniError;
}

/** Names the host end and records its deletion (before anything exists), then answers how to create the pair. */
export async function prepareHostVeth(
  req: AttachRequest,
  env: DriverEnv,
  opts: { readonly mtu?: number; readonly bridge?: string; readonly node?: string } = {},
): Promise<HostVeth> {
  const name = hostVethName(req.containerId, req.runtimeIfname, req.ifname);
  const mac = randomMac();
  await env.record({ kind: 'deleteLink', ...definedFields({ netns: opts.node || undefined }), name });
  const what = `network ${req.network.key}`;
  return {
    name,
    mac,
    create: {
      op: 'linkAdd',
      link: {
        kind: 'veth',
        name,
        mac,
        // The reference plugins' host ends have no transmit queue length (a veth has no qdisc to use one).
        txqlen: 0,
        up: true,
        ...definedFields({ bridge: opts.bridge || undefined, mtu: opts.mtu || undefined, group: env.hostLinkGroup }),
        peer: { name: req.ifname, netns: req.netns, ...definedFields({ mac: req.mac || undefined }) },
      },
    },
    createFailed: (e) =>
      e.is('EEXIST')
        ? new CniError(
            CniCode.Internal,
            `${what}: interface ${req.ifname} already exists in ${req.netns} or host link ${name} exists`,
            e.details,
          )
        : kernelError(e, `${what}: creating veth ${name} <-> ${req.ifname}`),
  };
}
