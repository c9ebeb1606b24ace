/**
 * The native `macvlan` driver: the reference macvlan plugin's behaviour, run in-process. The macvlan is created
 * directly inside the pod netns with its final name (one netlink request), on a master in the node's netns.
 */
import type { Result } from '../../cni/errors';
import type { CniResult } from '../../cni/types';
import { attachMasterLink } from '../common/master-link';
import { onePlugin, type AttachRequest, type Driver, type DriverEnv } from '../driver';
import { parseMacvlanConfig, type MacvlanConfig } from './config';

export const macvlanDriver: Driver<MacvlanConfig> = {
  type: 'macvlan',
  capabilities: ['ips', 'mac'],
  parse: onePlugin(parseMacvlanConfig),
  attach: (req, conf, env) => attachMasterLink('macvlan', conf, req, env),
};
