/**
 * What every IPAM config parser shares: the shapes and parsers of routes, DNS and excluded CIDRs, and how a parser
 * fails (ConfigError, thrown and turned into a CNI error at the edge: configError).
 */
import { fieldPath } from '../common/schema-issues';
import { z } from 'zod';
import { CniCode, CniError, err, ok, type Result } from '../cni/errors';
import { familyName, formatCidr, formatIp, networkOf, parseCidr, parseIp } from '../common/ip';
import type { DnsSpec, IpamRoute } from './config';
import { definedFields } from '../common/defined-fields';

export const rangeShape = z.looseObject({
  subnet: z.string(),
  rangeStart: z.string().optional(),
  rangeEnd: z.string().optional(),
  gateway: z.string().optional(),
});
export const routeShape = z.looseObject({ dst: z.string(), gw: z.string().optional() });
export const dnsShape = z.looseObject({
  nameservers: z.array(z.string()).optional(),
  domain: z.string().optional(),
  search: z.array(z.string()).optional(),
  options: z.array(z.string()).optional(),
});
/** Thrown inside the config parsers only, turned into a Result by parseIpamConfig and compileRanges. */
export class ConfigError extends Error {}

export const fail = (path: string, message: string): never => {
  throw new ConfigError(`${path}: ${message}`);
};

export function shapeOf<T>(schema: z.ZodType<T>, raw: unknown): T {
  const parsed = schema.safeParse(raw);
  if (parsed.success) return parsed.data;
  const issue = parsed.error.issues[0];
  return fail(fieldPath(issue?.path ?? [], 'ipam'), issue?.message ?? 'invalid');
}

/** Runs a parser: its ConfigError is an InvalidNetworkConfig (7) error; anything else it throws is a bug, rethrown. */
export function parsed<T>(parse: () => T): Result<T> {
  try {
    return ok(parse());
  } catch (thrown) {
    if (thrown instanceof ConfigError) return err(new CniError(CniCode.InvalidNetworkConfig, thrown.message));
    throw thrown;
  }
}

export function parseExcludes(path: string, exclude: readonly string[] | undefined): string[] {
  return (exclude ?? []).map((text, i) => {
    const cidr = parseCidr(text) ?? (parseIp(text) ? parseCidr(`${text}/${text.includes(':') ? 128 : 32}`) : undefined);
    if (cidr === undefined) return fail(`${path}[${i}]`, `${JSON.stringify(text)} is not a valid CIDR`);
    return formatCidr(cidr.family, networkOf(cidr), cidr.prefix);
  });
}

export function parseRoutes(routes: readonly z.infer<typeof routeShape>[] | undefined): IpamRoute[] {
  return (routes ?? []).map((route, i) => {
    const path = `ipam.routes[${i}]`;
    const dst = parseCidr(route.dst);
    if (dst === undefined) return fail(`${path}.dst`, `${JSON.stringify(route.dst)} is not a valid CIDR`);
    const canonical = formatCidr(dst.family, networkOf(dst), dst.prefix);
    if (route.gw === undefined) return { dst: canonical };
    const gw = parseIp(route.gw);
    if (gw === undefined) return fail(`${path}.gw`, `${JSON.stringify(route.gw)} is not a valid IP address`);
    if (gw.family !== dst.family)
      fail(`${path}.gw`, `${route.gw} is ${familyName(gw.family)} but dst ${route.dst} is ${familyName(dst.family)}`);
    return { dst: canonical, gw: formatIp(gw.family, gw.value) };
  });
}

export function parseDns(dns: z.infer<typeof dnsShape>): DnsSpec {
  const nameservers = dns.nameservers?.map((text, i) => {
    const ip = parseIp(text);
    if (ip === undefined)
      return fail(`ipam.dns.nameservers[${i}]`, `${JSON.stringify(text)} is not a valid IP address`);
    return formatIp(ip.family, ip.value);
  });
  return definedFields({ nameservers, domain: dns.domain, search: dns.search, options: dns.options });
}
