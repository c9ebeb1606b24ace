/** Requested addresses (`IP=`, the `ips` capability) matched to the range sets of a host-local network. */
import { CniCode, CniError, type Result, err, ok } from '../cni/errors';
import { type Ip, formatIp, parseCidr, parseIp } from '../common/ip';
import { type CompiledRange, describeRange } from './ranges';

export const invalid = (message: string): CniError => new CniError(CniCode.InvalidNetworkConfig, message);

export const inRange = (range: CompiledRange, ip: Ip): boolean =>
  range.subnet.family === ip.family && ip.value >= range.start && ip.value <= range.end;

/** Assigns each requested IP to the one range set containing it. */
export function matchRequested(
  network: string,
  sets: readonly (readonly CompiledRange[])[],
  requestedIps: readonly string[],
): Result<ReadonlyMap<number, Ip>> {
  const byset = new Map<number, Ip>();
  for (const text of requestedIps) {
    const cidr = text.includes('/') ? parseCidr(text) : undefined;
    const ip = cidr ?? parseIp(text);
    if (ip === undefined) return err(invalid(`requested IP ${JSON.stringify(text)} is not a valid IP address`));
    const index = sets.findIndex((set) => set.some((range) => inRange(range, ip)));
    const set = sets[index];
    if (set === undefined)
      return err(invalid(`requested IP ${formatIp(ip.family, ip.value)} is not in any range of network ${network}`));
    const range = set.find((candidate) => inRange(candidate, ip));
    if (cidr !== undefined && range !== undefined && cidr.prefix !== range.subnet.prefix) {
      return err(
        invalid(
          `requested IP ${text} has prefix /${cidr.prefix} but its range ${describeRange(range)} in network ${network} is a /${range.subnet.prefix}`,
        ),
      );
    }
    const other = byset.get(index);
    if (other !== undefined) {
      return err(
        invalid(
          `requested IPs ${formatIp(other.family, other.value)} and ${formatIp(ip.family, ip.value)} are both in range set ${index} of network ${network}: one address is allocated per range set`,
        ),
      );
    }
    byset.set(index, { family: ip.family, value: ip.value });
  }
  return ok(byset);
}
