/** CNI spec versions Plexus speaks, and the one place results are converted between them. */
import { CniCode, CniError, type Result, err, ok } from './errors';
import type { CniResult } from './types';

export const SUPPORTED_VERSIONS = ['0.3.0', '0.3.1', '0.4.0', '1.0.0', '1.1.0'] as const;
export type CniVersion = (typeof SUPPORTED_VERSIONS)[number];
export const LATEST_VERSION: CniVersion = '1.1.0';

export const isSupportedVersion = (v: unknown): v is CniVersion =>
  typeof v === 'string' && (SUPPORTED_VERSIONS as readonly string[]).includes(v);

export function compareVersions(a: string, b: string): number {
  const pa = a.split('.').map(Number);
  const pb = b.split('.').map(Number);
  for (let i = 0; i < 3; i++) {
    const d = (pa[i] ?? 0) - (pb[i] ?? 0);
    if (d !== 0) return d;
  }
  return 0;
}

/** A version as the runtime sent it, cut short: it may be any string of any length. */
const shownVersion = (v: unknown): string => {
  const text = JSON.stringify(typeof v === 'string' ? v : String(v));
  return text.length > 34 ? `${text.slice(0, 33)}…" (${String(v).length} characters)` : text;
};

const supported = (): string => `supported versions: ${SUPPORTED_VERSIONS.join(', ')}`;
const incompatibleVersion = (v: unknown): CniError =>
  new CniError(CniCode.IncompatibleVersion, `incompatible CNI version ${shownVersion(v)}`, supported());
const noVersion = (): CniError =>
  new CniError(CniCode.InvalidNetworkConfig, 'network configuration has no cniVersion', supported());

export function requireVersion(v: unknown): Result<CniVersion> {
  if (v === undefined || v === '') return err(noVersion());
  if (!isSupportedVersion(v)) return err(incompatibleVersion(v));
  return ok(v);
}

/**
 * Converts a result (kept internally in the 1.1.0 shape) to the version the caller asked for.
 * 1.0.0 lacks the 1.1 interface/route fields; 0.3.x and 0.4.0 carry `version` on each IP.
 */
export function convertResult(result: CniResult, to: CniVersion): Record<string, unknown> {
  const v11 = compareVersions(to, '1.1.0') >= 0;
  const interfaces = result.interfaces.map((i) => {
    const base: Record<string, unknown> = { name: i.name };
    if (i.mac !== undefined) base.mac = i.mac;
    if (v11 && i.mtu !== undefined) base.mtu = i.mtu;
    if (i.sandbox !== undefined) base.sandbox = i.sandbox;
    if (v11 && i.socketPath !== undefined) base.socketPath = i.socketPath;
    if (v11 && i.pciID !== undefined) base.pciID = i.pciID;
    return base;
  });
  const ips = result.ips.map((ip) => {
    const base: Record<string, unknown> = {};
    if (compareVersions(to, '1.0.0') < 0) base.version = ip.address.includes(':') ? '6' : '4';
    base.address = ip.address;
    if (ip.gateway !== undefined) base.gateway = ip.gateway;
    if (ip.interface !== undefined) base.interface = ip.interface;
    return base;
  });
  const routes = result.routes.map((r) => {
    const base: Record<string, unknown> = { dst: r.dst };
    if (r.gw !== undefined) base.gw = r.gw;
    if (v11) {
      for (const k of ['mtu', 'advmss', 'priority', 'table', 'scope'] as const) if (r[k] !== undefined) base[k] = r[k];
    }
    return base;
  });
  const out: Record<string, unknown> = { cniVersion: to, interfaces, ips };
  if (routes.length) out.routes = routes;
  if (result.dns && Object.keys(result.dns).length) out.dns = result.dns;
  return out;
}
