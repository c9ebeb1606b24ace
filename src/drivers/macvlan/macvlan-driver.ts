/**
 * The native `macvlan` driver: the reference macvlan plugin's behaviour, run in-process. The macvlan is created
 * directly inside the pod netns with its final name (one netlink request), on a master in the node's netns.
 */
import { attachMasterLink, checkMasterLink } from '../common/master-link';
import { onePlugin, type Driver, type NodeOption } from '../driver';
import { parseMacvlanConfig, type MacvlanConfig } from './config';
import { definedFields } from '../../common/defined-fields';

export const createMacvlanDriver = ({ node }: NodeOption = {}): Driver<MacvlanConfig> => ({
  type: 'macvlan',
  capabilities: ['ips', 'mac'],
  parse: onePlugin(parseMacvlanConfig),
  attach: (req, conf, env) =>
    attachMasterLink({ kind: 'macvlan', conf, ...definedFields({ node: node || undefined }) }, req, env),
  check: (_attachment, env, conf) => checkMasterLink(conf, env, node),
});
