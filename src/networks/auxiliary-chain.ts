/**
 * Multus's auxiliary chain (its daemon setting `auxiliaryCNIChainName`, v4.3.0 pkg/multus CmdAdd): after a pod's
 * networks, a conflist named after the chain runs a `passthru` plugin (an empty result) and then the `.conf` files of
 * `<dir of clusterNetwork>/<chain name>/`, under the interface name `net<position>`. It is run only when the directory
 * has such a file. Plexus gives the chain's first plugin passthru's empty result itself (passthru's DEL does nothing),
 * so no passthru binary is needed; the chain runs as a delegated network, journaled and undone as any other.
 */
import { basename, dirname } from 'node:path';
import { type Result, err, ok } from '../cni/errors';
import type { CniVersion } from '../cni/version';
import type { NetworkDefinition } from './nad';
import { DELEGATE_ANNOTATION } from './planner';
import { subdirectoryPlugins } from './subdirectory-chain';

/** Network keys of auxiliary chains: a ":" is in no NAD's key and no CNI network name. */
const KEY_PREFIX = 'auxiliary:';

/** Whether a network key is an auxiliary chain's: it has no interface of its own, nor a network-status entry. */
export const isAuxiliaryChain = (key: string): boolean => key.startsWith(KEY_PREFIX);

/** The chain kept in `chainDir` (its name is the directory's), or undefined when it has no `.conf` file. */
export function auxiliaryChainNetwork(chainDir: string, cniVersion: CniVersion): Result<NetworkDefinition | undefined> {
  const cniName = basename(chainDir);
  const plugins = subdirectoryPlugins(dirname(chainDir), { cniName, cniVersion });
  if (!plugins.ok) return err(plugins.error.withContext(`the auxiliary chain ${chainDir}`));
  if (plugins.value.length === 0) return ok(undefined);
  return ok({
    namespace: '',
    name: cniName,
    key: `${KEY_PREFIX}${cniName}`,
    annotations: { [DELEGATE_ANNOTATION]: 'true' },
    cniVersion,
    cniName,
    plugins: plugins.value,
    source: chainDir,
  });
}
