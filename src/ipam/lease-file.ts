/**
 * The text of a lease file, `<containerId>\n<ifname>\n<address/prefix>\n<gateway>\n`, as host-local writes it, with
 * Plexus's owner (JSON) as an optional fifth line, which also names the host-local directory the lease is written in.
 */
import { type Ip, bitsOf, formatCidr, formatIp, parseCidr, parseIp } from '../common/ip';
import type { Lease } from './lease';

export function leaseFileContent(lease: Lease): string {
  const base = `${lease.containerId}\n${lease.ifname}\n${lease.address}\n${lease.gateway ?? ''}\n`;
  const shared = lease.hostLocalDir !== undefined ? { hostLocalDir: lease.hostLocalDir } : {};
  const extra = { ...lease.owner, ...shared };
  return Object.keys(extra).length > 0 ? `${base}${JSON.stringify(extra)}\n` : base;
}

/** Reads a lease file; the first two lines are host-local's format, the last two are Plexus's additions. */
export function parseLeaseFile(network: string, ip: Ip, content: string): Lease {
  const [containerId = '', ifname = '', addressText = '', gatewayText = '', ownerText = ''] = content
    .split(/\r?\n/)
    .map((line) => line.trim());
  const recorded = parseCidr(addressText);
  const address =
    recorded !== undefined && recorded.family === ip.family && recorded.value === ip.value
      ? formatCidr(ip.family, ip.value, recorded.prefix)
      : formatCidr(ip.family, ip.value, bitsOf(ip.family));
  const gateway = parseIp(gatewayText);
  const owned = containerId !== '' && ifname !== '';
  return {
    network,
    address,
    ...(gateway !== undefined && gateway.family === ip.family
      ? { gateway: formatIp(gateway.family, gateway.value) }
      : {}),
    containerId: owned ? containerId : '',
    ifname: owned ? ifname : '',
    ...(owned && ownerText !== '' ? ownerOf(ownerText) : {}),
  };
}

type Extra = Pick<Lease, 'owner' | 'hostLocalDir'>;

/** The optional fifth line: a JSON LeaseOwner; anything else (a torn write) is ignored, the lease stays owned. */
function ownerOf(text: string): Extra {
  try {
    const parsed = JSON.parse(text) as Record<string, unknown>;
    const owner: { network?: string; podUid?: string; pod?: string; claim?: string } = {};
    for (const key of ['network', 'podUid', 'pod', 'claim'] as const)
      if (typeof parsed[key] === 'string') owner[key] = parsed[key];
    const shared = typeof parsed.hostLocalDir === 'string' ? { hostLocalDir: parsed.hostLocalDir } : {};
    return { ...(Object.keys(owner).length > 0 || Object.keys(shared).length === 0 ? { owner } : {}), ...shared };
  } catch {
    return {};
  }
}
