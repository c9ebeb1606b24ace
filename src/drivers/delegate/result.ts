/**
 * Parsing what a delegated plugin prints: results of any supported CNI version into the internal 1.1 shape,
 * and error objects. Plugin output is untrusted input, so it is validated here, once, with a schema.
 *
 * Version differences handled (as libcni's types/040, types/100 and the 1.1 additions):
 *   0.3.x/0.4.0  ips[].version ("4"|"6"), checked against the address when present, then dropped;
 *   1.0.0        no ips[].version;
 *   1.1.0        interfaces[].mtu/socketPath/pciID and routes[].mtu/advmss/priority/table/scope.
 * Fields a version does not define are ignored, as Go's decoder ignores them.
 */
import { firstIssue } from '../../common/schema-issues';
import { isIP } from 'node:net';
import { z } from 'zod';
import { CniCode, CniError, type Result, err, ok } from '../../cni/errors';
import { compareVersions, isSupportedVersion, type CniVersion } from '../../cni/version';
import type { CniDns, CniInterface, CniIp, CniResult, CniRoute } from '../../cni/types';
import { definedFields } from '../../common/defined-fields';

const isCidr = (s: string): boolean => {
  const slash = s.lastIndexOf('/');
  if (slash <= 0) return false;
  const family = isIP(s.slice(0, slash));
  const prefix = s.slice(slash + 1);
  if (!family || !/^\d{1,3}$/.test(prefix)) return false;
  return Number(prefix) <= (family === 4 ? 32 : 128);
};
const cidr = z.string().refine(isCidr, 'must be an address in CIDR notation');
const address = z.string().refine((s) => isIP(s) !== 0, 'must be an IP address');
const uint = z.number().int().nonnegative();

const interfaceSchema = z.object({
  name: z.string().min(1),
  mac: z.string().optional(),
  sandbox: z.string().optional(),
  mtu: uint.optional(),
  socketPath: z.string().optional(),
  pciID: z.string().optional(),
});
const ipSchema = z.object({
  version: z.enum(['4', '6']).optional(),
  address: cidr,
  gateway: address.optional(),
  interface: uint.optional(),
});
const routeSchema = z.object({
  dst: cidr,
  gw: address.optional(),
  mtu: uint.optional(),
  advmss: uint.optional(),
  priority: uint.optional(),
  table: uint.optional(),
  scope: uint.optional(),
});
const dnsSchema = z.object({
  nameservers: z.array(z.string()).optional(),
  domain: z.string().optional(),
  search: z.array(z.string()).optional(),
  options: z.array(z.string()).optional(),
});
// null is what Go prints for an empty slice or pointer; treat it as absent.
const list = <T extends z.ZodType>(item: T) => z.array(item).nullish();
const resultSchema = z.object({
  cniVersion: z.string().optional(),
  interfaces: list(interfaceSchema),
  ips: list(ipSchema),
  routes: list(routeSchema),
  dns: dnsSchema.nullish(),
});

/**
 * Parses a plugin's ADD result printed for config version `version` into the internal 1.1 shape.
 * A result without cniVersion is taken to be in `version` (libcni does the same for old IPAM plugins);
 * a result in another version than the config asked for is an error, as is anything malformed.
 */
export function parseCniResult(json: unknown, version: CniVersion): Result<CniResult> {
  const bad = (msg: string, details = ''): Result<never> => err(new CniError(CniCode.Internal, msg, details));
  const parsed = resultSchema.safeParse(json);
  if (!parsed.success) {
    return bad(`result is not a CNI ${version} result: ${firstIssue(parsed.error, '(root)')}`);
  }
  const r = parsed.data;
  const resultVersion = r.cniVersion ?? version;
  if (!isSupportedVersion(resultVersion)) return bad(`result has unsupported cniVersion "${resultVersion}"`);
  if (resultVersion !== version)
    return bad(`result has cniVersion ${resultVersion}, but the config asked for ${version}`);
  const v1 = compareVersions(version, '1.0.0') >= 0;
  const v11 = compareVersions(version, '1.1.0') >= 0;

  const interfaces: CniInterface[] = (r.interfaces ?? []).map((i) => ({
    name: i.name,
    ...(i.mac !== undefined && i.mac !== '' ? { mac: i.mac } : {}),
    ...(i.sandbox !== undefined && i.sandbox !== '' ? { sandbox: i.sandbox } : {}),
    ...(v11 && i.mtu ? { mtu: i.mtu } : {}),
    ...(v11 && i.socketPath ? { socketPath: i.socketPath } : {}),
    ...(v11 && i.pciID ? { pciID: i.pciID } : {}),
  }));
  const ips: CniIp[] = [];
  for (const [n, ip] of (r.ips ?? []).entries()) {
    const family = ip.address.includes(':') ? '6' : '4';
    if (!v1 && ip.version !== undefined && ip.version !== family)
      return bad(`ips[${n}]: version "${ip.version}" does not match address ${ip.address}`);
    if (ip.interface !== undefined && ip.interface >= interfaces.length) {
      return bad(
        `ips[${n}]: interface index ${ip.interface} is out of range (the result has ${interfaces.length} interfaces)`,
      );
    }
    ips.push({
      address: ip.address,
      ...definedFields({ gateway: ip.gateway, interface: ip.interface }),
    });
  }
  const routes: CniRoute[] = (r.routes ?? []).map((rt) => {
    const out: { -readonly [K in keyof CniRoute]: CniRoute[K] } = { dst: rt.dst };
    if (rt.gw !== undefined) out.gw = rt.gw;
    if (v11)
      for (const k of ['mtu', 'advmss', 'priority', 'table', 'scope'] as const) if (rt[k] !== undefined) out[k] = rt[k];
    return out;
  });
  let dns: CniDns | undefined;
  if (r.dns) {
    const d: { -readonly [K in keyof CniDns]: CniDns[K] } = {};
    if (r.dns.nameservers?.length) d.nameservers = r.dns.nameservers;
    if (r.dns.domain) d.domain = r.dns.domain;
    if (r.dns.search?.length) d.search = r.dns.search;
    if (r.dns.options?.length) d.options = r.dns.options;
    if (Object.keys(d).length) dns = d;
  }
  return ok({ interfaces, ips, routes, ...definedFields({ dns }) });
}

const errorSchema = z.object({
  code: z.number().int().nonnegative(),
  msg: z.string(),
  details: z.string().optional(),
});

/** Parses a plugin's error object ({cniVersion, code, msg, details}); undefined when the text is not one. */
export function parsePluginError(text: string): { code: number; msg: string; details: string } | undefined {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    return undefined;
  }
  const parsed = errorSchema.safeParse(json);
  if (!parsed.success) return undefined;
  return { code: parsed.data.code, msg: parsed.data.msg, details: parsed.data.details ?? '' };
}
