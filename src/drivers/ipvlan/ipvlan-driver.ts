/**
 * The native `ipvlan` driver: the reference ipvlan plugin's behaviour, run in-process. The ipvlan is created
 * directly inside the pod netns with its final name, on a master in the node's netns. ipvlan interfaces share
 * the master's MAC address, so a requested MAC cannot be honoured.
 */
import { CniCode, CniError, type Result, err } from '../../cni/errors';
import type { CniResult } from '../../cni/types';
import { attachMasterLink, checkMasterLink } from '../common/master-link';
import { onePlugin, type AttachRequest, type Driver, type DriverEnv, type NodeOption } from '../driver';
import { parseIpvlanConfig, type IpvlanConfig } from './config';
import { definedFields } from '../../common/defined-fields';

export const createIpvlanDriver = ({ node }: NodeOption = {}): Driver<IpvlanConfig> => ({
  type: 'ipvlan',
  capabilities: ['ips'],
  parse: onePlugin(parseIpvlanConfig),
  attach: (req, conf, env) => attachIpvlan(req, conf, env, node),
  check: (_attachment, env, conf) => checkMasterLink(conf, env, node),
});

async function attachIpvlan(
  req: AttachRequest,
  conf: IpvlanConfig,
  env: DriverEnv,
  node: string | undefined,
): Promise<Result<CniResult>> {
  if (req.mac) return err(macNotSettable(req));
  return attachMasterLink({ kind: 'ipvlan', conf, ...definedFields({ node: node || undefined }) }, req, env);
}

const macNotSettable = (req: AttachRequest): CniError =>
  new CniError(
    CniCode.UnsupportedField,
    `network ${req.network.key}: ipvlan interfaces share their master's MAC address, so MAC ${req.mac} cannot be set`,
    'drop the MAC request, or use macvlan',
  );
