/** The reference `ipvlan` plugin's config schema, validated up front. */
import type { Result } from '../../cni/errors';
import type { IpvlanMode } from '../../kernel/types';
import type { PluginConfig } from '../../networks/nad';
import { type MasterLinkConfig, parseMasterLinkConfig } from '../common/master-link';

export type IpvlanConfig = MasterLinkConfig<IpvlanMode>;

export const parseIpvlanConfig = (plugin: PluginConfig): Result<IpvlanConfig> =>
  parseMasterLinkConfig<IpvlanMode>(['l2', 'l3', 'l3s'], plugin);
