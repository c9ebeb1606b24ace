/** The reference `macvlan` plugin's config schema, validated up front. */
import type { Result } from '../../cni/errors';
import type { MacvlanMode } from '../../kernel/types';
import type { PluginConfig } from '../../networks/nad';
import { type MasterLinkConfig, parseMasterLinkConfig } from '../common/master-link';

export type MacvlanConfig = MasterLinkConfig<MacvlanMode>;

export const parseMacvlanConfig = (plugin: PluginConfig): Result<MacvlanConfig> =>
  parseMasterLinkConfig<MacvlanMode>(['bridge', 'private', 'vepa', 'passthru', 'source'], plugin);
