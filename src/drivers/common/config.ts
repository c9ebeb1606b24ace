/**
 * Config parsing shared by the native drivers: one schema per driver, validated up front, with errors that
 * name the network and the offending field (CNI code 7) so an operator can fix the definition.
 */
import { firstIssue } from '../../common/schema-issues';
import { isIP } from 'node:net';
import { z } from 'zod';
import { CniCode, CniError, type Result, err, ok } from '../../cni/errors';
import { validateIfname } from '../../cni/request';
import { type IpamConfig, parseIpamConfig } from '../../ipam';
import type { PluginConfig } from '../../networks/nad';

/** An error in a network's plugin config: code 7, prefixed with the driver and the network it concerns. */
export const invalidConfig = (plugin: PluginConfig, message: string, details = ''): CniError =>
  new CniError(CniCode.InvalidNetworkConfig, `${plugin.type} config of network ${plugin.name}: ${message}`, details);

/** A field the reference plugin has but Plexus does not implement natively: code 2 (unsupported field). */
export const unsupportedField = (plugin: PluginConfig, message: string, details = ''): CniError =>
  new CniError(CniCode.UnsupportedField, `${plugin.type} config of network ${plugin.name}: ${message}`, details);

/**
 * An option of the reference plugin that the native driver does not run: code 2, saying how to have the reference
 * plugin run the network instead.
 */
export const notNative = (plugin: PluginConfig, option: string): CniError =>
  unsupportedField(
    plugin,
    `"${option}" is not supported natively; to use it, have the reference ${plugin.type} plugin run this network: ` +
      'annotate its NetworkAttachmentDefinition with plexus.io/delegate: "true"',
    `remove "${option}" (or set it to its default) to keep the network native; see docs/drivers.md`,
  );

/** Parses a plugin config with a schema; the first issue becomes "<type> config of network <name>: <field>: <why>". */
export function parsePluginConfig<S extends z.ZodType>(schema: S, plugin: PluginConfig): Result<z.output<S>> {
  const r = schema.safeParse(plugin);
  if (r.success) return ok(r.data);
  return err(invalidConfig(plugin, firstIssue(r.error, '(config)')));
}

/** An interface name field (`master`, `bridge`, `device`...): at most 15 bytes, no '/', ':' or whitespace. */
export function checkLinkName(plugin: PluginConfig, field: string, name: string): Result<string> {
  const r = validateIfname(name, field);
  return r.ok ? r : err(invalidConfig(plugin, r.error.message));
}

/** The `ipam` section, if it is present and not empty (the reference plugins' "{}" means "no addresses"). */
export function parseOptionalIpam(
  plugin: PluginConfig,
  raw: Readonly<Record<string, unknown>> | undefined,
): Result<IpamConfig | undefined> {
  if (!raw || Object.keys(raw).length === 0) return ok(undefined);
  const parsed = parseIpamConfig(raw);
  if (!parsed.ok) return err(parsed.error.withContext(`${plugin.type} config of network ${plugin.name}`));
  return ok(parsed.value);
}

// Field schemas the drivers share.
export const ipamField = z.record(z.string(), z.unknown()).optional();
export const mtuField = z.number().int().min(68).max(65535).optional();
export const macField = z
  .string()
  .regex(/^([0-9a-fA-F]{2}:){5}[0-9a-fA-F]{2}$/, 'must be a MAC address like aa:bb:cc:dd:ee:ff');
export const ipField = z.string().refine((s) => isIP(s) !== 0, 'must be an IP address');
export const ipFamily = (address: string): 4 | 6 => (isIP(address) === 6 ? 6 : 4);
