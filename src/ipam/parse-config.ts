/**
 * The `ipam` section of a network config, validated once into precise types (config.ts).
 * Accepts the schemas of the reference `host-local` and `static` plugins so that existing
 * network definitions work unchanged; unknown keys are allowed, as CNI configs carry many.
 */
import type { Result } from '../cni/errors';
import type { IpamConfig } from './config';
import { fail, parsed, shapeOf } from './config-fields';
import { hostLocalShape, parseHostLocal, parseStatic, staticShape } from './local-config';
import { parsePlexus, parseWhereabouts, plexusShape, whereaboutsShape } from './pool-config';

/**
 * Validates the `ipam` object of a network config.
 * Errors are CniCode.InvalidNetworkConfig (7) with a message naming the bad field,
 * e.g. `ipam.ranges[0][1].subnet: "10.1.0.0/33" is not a valid CIDR`.
 */
export function parseIpamConfig(raw: unknown): Result<IpamConfig> {
  return parsed(() => parseOrThrow(raw));
}

function parseOrThrow(raw: unknown): IpamConfig {
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) return fail('ipam', 'must be an object');
  const type = (raw as { type?: unknown }).type;
  if (type === undefined) return fail('ipam.type', 'is required');
  if (type === 'host-local') return parseHostLocal(shapeOf(hostLocalShape, raw));
  if (type === 'static') return parseStatic(shapeOf(staticShape, raw));
  if (type === 'plexus') return parsePlexus(shapeOf(plexusShape, raw));
  if (type === 'whereabouts') return parseWhereabouts(shapeOf(whereaboutsShape, raw));
  return fail(
    'ipam.type',
    `${JSON.stringify(type)} is not supported by the built-in IPAM (expected "host-local", "static", "plexus" or "whereabouts")`,
  );
}
