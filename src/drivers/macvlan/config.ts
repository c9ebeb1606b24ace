/** The reference `macvlan` plugin's config schema, validated up front (no `source` mode: the reference has none). */
import { z } from 'zod';
import { type Result, err, ok } from '../../cni/errors';
import type { MacvlanMode } from '../../kernel/types';
import type { PluginConfig } from '../../networks/nad';
import { macField, notNative, parsePluginConfig } from '../common';
import { type MasterLinkConfig, parseMasterLinkConfig } from '../common/master-link';

export type MacvlanConfig = MasterLinkConfig<MacvlanMode>;

/** The keys only macvlan has besides the master-link ones. */
const MacvlanSchema = z.looseObject({
  mac: macField.optional(),
  bcqueuelen: z.number().int().min(0).optional(),
});

export function parseMacvlanConfig(plugin: PluginConfig): Result<MacvlanConfig> {
  const base = parseMasterLinkConfig<MacvlanMode>(['bridge', 'private', 'vepa', 'passthru'], plugin);
  if (!base.ok) return base;
  const own = parsePluginConfig(MacvlanSchema, plugin);
  if (!own.ok) return own;
  // 0 is the reference's "not set".
  if (own.value.bcqueuelen) return err(notNative(plugin, 'bcqueuelen'));
  return ok({ ...base.value, ...(own.value.mac ? { mac: own.value.mac.toLowerCase() } : {}) });
}
