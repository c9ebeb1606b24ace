/**
 * Whereabouts' objects on the API (k8snetworkplumbingwg/whereabouts, group whereabouts.cni.cncf.io), read as what they
 * hold: an IPPool's `spec.allocations` are keyed by the decimal offset of the address from the address its
 * `spec.range` names, each naming its pod (`podref`); an OverlappingRangeIPReservation is named by the address it
 * holds (IPv6 with `:` as `-`, and a trailing `:` written `:0`), prefixed `<network_name>-` for a named network.
 * Validated here, once: a field of another shape holds nothing, as it holds nothing for Whereabouts either.
 */
import { z } from 'zod';
import { type Family, bitsOf, formatIp, parseCidr, parseIp } from '../../common/ip';
import type { ObjectMeta } from '../../common/api-object';

export const WHEREABOUTS_GROUP_VERSION = 'whereabouts.cni.cncf.io/v1alpha1';
export const WHEREABOUTS_POOLS = 'ippools';
export const WHEREABOUTS_RESERVATIONS = 'overlappingrangeipreservations';

/** An address Whereabouts holds, and for whom (the pod and the object, for a refusal to name). */
export interface WhereaboutsHold {
  readonly family: Family;
  readonly value: bigint;
  readonly holder: string;
}

export interface WhereaboutsObject {
  readonly metadata?: ObjectMeta;
  readonly spec?: unknown;
}

const allocationShape = z.looseObject({ podref: z.string().optional(), ifname: z.string().optional() });
const poolSpecShape = z.looseObject({
  range: z.string(),
  allocations: z.record(z.string(), allocationShape).optional(),
});
const reservationSpecShape = z.looseObject({ podref: z.string().optional(), ifname: z.string().optional() });

const objectName = (obj: WhereaboutsObject): string => `${obj.metadata?.namespace ?? ''}/${obj.metadata?.name ?? ''}`;
const holderText = (kind: string, obj: WhereaboutsObject, podref?: string, ifname?: string): string =>
  `pod ${podref ?? '(unnamed)'}${ifname ? ` (${ifname})` : ''}, in Whereabouts' ${kind} ${objectName(obj)}`;

/** The addresses an IPPool's allocations hold. Offsets that are not decimal integers are skipped, as Whereabouts does. */
export function holdsOfPool(obj: WhereaboutsObject): WhereaboutsHold[] {
  const spec = poolSpecShape.safeParse(obj.spec);
  if (!spec.success) return [];
  const first = parseCidr(spec.data.range);
  if (first === undefined) return [];
  const max = (1n << BigInt(bitsOf(first.family))) - 1n;
  return Object.entries(spec.data.allocations ?? {}).flatMap(([offset, a]) => {
    if (!/^\d{1,39}$/.test(offset)) return [];
    const value = first.value + BigInt(offset);
    if (value > max) return [];
    return [{ family: first.family, value, holder: holderText('IPPool', obj, a.podref, a.ifname) }];
  });
}

/**
 * The address an OverlappingRangeIPReservation holds, read from its name. A network name may itself read as part of
 * an address (`beef-cafe-fd00--5`): every address a suffix of the name spells is held, so none is missed.
 */
export function holdsOfReservation(obj: WhereaboutsObject): WhereaboutsHold[] {
  const name = obj.metadata?.name ?? '';
  const spec = reservationSpecShape.safeParse(obj.spec ?? {});
  const holder = holderText(
    'OverlappingRangeIPReservation',
    obj,
    spec.success ? spec.data.podref : undefined,
    spec.success ? spec.data.ifname : undefined,
  );
  const parts = name.split('-');
  const holds: WhereaboutsHold[] = [];
  for (let i = 0; i < parts.length; i++) {
    const text = parts.slice(i).join('-');
    const ip = parseIp(text.includes('.') && !text.includes('-') ? text : text.replace(/-/g, ':'));
    if (ip !== undefined) holds.push({ family: ip.family, value: ip.value, holder });
  }
  return holds;
}

const discoveryShape = z.looseObject({ resources: z.array(z.looseObject({ name: z.string() })).optional() });

/** Which of Whereabouts' collections an API discovery answer lists (none, from an answer of another shape). */
export function servedCollections(body: unknown): string[] {
  const parsed = discoveryShape.safeParse(body);
  const names = new Set(parsed.success ? (parsed.data.resources ?? []).map((r) => r.name) : []);
  return [WHEREABOUTS_POOLS, WHEREABOUTS_RESERVATIONS].filter((r) => names.has(r));
}

/** An address as the key of a hold: `10.1.0.7`, `fd00::7`. */
export const holdKey = (hold: { readonly family: Family; readonly value: bigint }): string =>
  formatIp(hold.family, hold.value);
