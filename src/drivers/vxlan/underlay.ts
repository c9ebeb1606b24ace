/**
 * A node's underlay for a cluster-mode vxlan network: the address its peers send the network's traffic to (its VTEP
 * address, which it publishes) and the MTU its VTEP can carry. The address is the network's `local`, else the address
 * of `underlayInterface` (named per node, may differ), else the Node's InternalIP; the MTU is that interface's, less the
 * encapsulation (50 bytes over IPv4, 70 over IPv6). No usable address is code 11: the node cannot serve the network now.
 */
import { CniCode, CniError, err, ok, type Result } from '../../cni/errors';
import type { KernelPort } from '../../kernel/kernel';
import type { AddrInfo, LinkInfo } from '../../kernel/types';
import { ipFamily } from '../common';
import { kernelError } from '../common/kernel-error';
import type { VxlanConfig } from './config';
import type { VtepDirectory } from './vtep-directory';

export interface Underlay {
  /** The VTEP address this node publishes for the network. */
  readonly address: string;
  /** The MTU of a VTEP over it (the underlay's less the encapsulation); undefined when the link is not known. */
  readonly vtepMtu?: number;
}

/** The bytes VXLAN adds to each frame: outer IP, UDP and VXLAN headers and the inner Ethernet header. */
export const encapsulation = (address: string): number => (ipFamily(address) === 6 ? 70 : 50);

const noUnderlay = (node: string, why: string, fix: string): CniError =>
  new CniError(CniCode.TryAgainLater, `node ${node} has no usable underlay address for VXLAN: ${why}`, fix);

/** The node's underlay for `conf`: read from the node's links and addresses (one kernel trip) and the directory. */
export async function findUnderlay(
  conf: VxlanConfig,
  kernel: KernelPort,
  where: { readonly netns: string | undefined; readonly directory: VtepDirectory },
): Promise<Result<Underlay>> {
  const r = await kernel.batch(where.netns, [{ op: 'linkList' }, { op: 'addrList' }]);
  if (!r.ok) return err(kernelError(r.error, `reading the links and addresses of node ${where.directory.node}`));
  const [links, addresses] = r.value;
  return underlayOf(conf, { links, addresses, directory: where.directory });
}

/** The node's links and addresses, read once for every network of a round. */
export interface NodeAddressing {
  readonly links: readonly LinkInfo[];
  readonly addresses: readonly AddrInfo[];
  readonly directory: VtepDirectory;
}

/** The underlay of `conf` among the node's links and addresses. */
export function underlayOf(conf: VxlanConfig, node: NodeAddressing): Result<Underlay> {
  const { links, addresses, directory } = node;
  if (conf.underlayInterface !== undefined) {
    const link = links.find((l) => l.name === conf.underlayInterface);
    if (!link)
      return err(
        new CniError(
          CniCode.InvalidNetworkConfig,
          `underlayInterface ${conf.underlayInterface} not found on the host`,
          'fix "underlayInterface"',
        ),
      );
    const address = conf.local ?? firstUsable(addresses.filter((a) => a.index === link.index));
    if (!address)
      return err(
        noUnderlay(
          directory.node,
          `underlayInterface ${link.name} has no global IP address`,
          `give ${link.name} an address on the underlay`,
        ),
      );
    return ok({ address, vtepMtu: link.mtu - encapsulation(address) });
  }
  const address = conf.local ?? directory.nodeAddress();
  if (!address)
    return err(
      noUnderlay(
        directory.node,
        'the Node has no InternalIP (or the API has not answered yet) and the network names no underlayInterface',
        'set "underlayInterface" in the network, or wait for the kubelet to report the Node\'s addresses',
      ),
    );
  const holder = linkHolding(address, links, addresses);
  if (!holder)
    return err(
      noUnderlay(
        directory.node,
        `its address ${address} is on none of its interfaces`,
        'set "underlayInterface" to the interface the nodes reach each other by',
      ),
    );
  return ok({ address, vtepMtu: holder.mtu - encapsulation(address) });
}

/** The first global address of a list, IPv4 before IPv6 (link-local and tentative ones cannot carry VXLAN). */
function firstUsable(addresses: readonly AddrInfo[]): string | undefined {
  const usable = addresses
    .filter((a) => !a.tentative && !a.dadFailed)
    .map((a) => a.address.split('/')[0] ?? '')
    .filter((a) => a !== '' && !a.toLowerCase().startsWith('fe80:') && !a.startsWith('127.') && a !== '::1');
  return usable.find((a) => ipFamily(a) === 4) ?? usable[0];
}

function linkHolding(
  address: string,
  links: readonly LinkInfo[],
  addresses: readonly AddrInfo[],
): LinkInfo | undefined {
  const held = addresses.find((a) => a.address.split('/')[0] === address);
  return held ? links.find((l) => l.index === held.index) : undefined;
}
