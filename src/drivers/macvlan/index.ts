/**
 * The native `macvlan` driver: the reference macvlan plugin's behaviour, run in-process. The macvlan is created
 * directly inside the pod netns with its final name (one netlink request), on a master in the node's netns.
 */
import type { Result } from '../../cni/errors';
import type { CniResult } from '../../cni/types';
import { attachMasterLink } from '../common/master-link';
import type { AttachRequest, Driver, DriverEnv } from '../driver';
import { parseMacvlanConfig } from './config';

export const macvlanDriver: Driver = {
  type: 'macvlan',
  capabilities: ['ips', 'mac'],
  validate: parseMacvlanConfig,

  async attach(req: AttachRequest, env: DriverEnv): Promise<Result<CniResult>> {
    const conf = parseMacvlanConfig(req.plugin);
    return conf.ok ? attachMasterLink('macvlan', conf.value, req, env) : conf;
  },
};
