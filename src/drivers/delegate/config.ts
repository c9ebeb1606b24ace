/**
 * The config a delegated plugin receives, built as libcni builds it (buildOneConfig + injectRuntimeConfig),
 * plus Multus's `args.cni` merge of the selection's cni-args. Pure: no I/O, so tests can assert the exact JSON.
 */
import type { CniResult } from '../../cni/types';
import { convertResult, isSupportedVersion, LATEST_VERSION } from '../../cni/version';
import { declaredCapabilities, type PluginConfig } from '../../networks/nad';

export { declaredCapabilities };
import type { AttachRequest } from '../driver';
import { isJsonObject } from '../../common/json-object';

type Json = Record<string, unknown>;

/**
 * The value for one declared capability, or undefined when the request has none. The well-known ones come from
 * the attachment (IPs, MAC, selection options), falling back to the runtime's runtimeConfig; anything else
 * (io.kubernetes.cri.pod-annotations, dns, aliases, cgroupPath, ...) from the runtime's runtimeConfig. All
 * lookups ignore case, because runtimes and NADs disagree on it (portMappings vs PortMappings).
 */
function capabilityValue(name: string, req: AttachRequest): unknown {
  const fromRuntime = (): unknown => req.runtimeConfig.get(name);
  switch (name.toLowerCase()) {
    case 'ips':
      return req.ips.length ? [...req.ips] : fromRuntime();
    case 'mac':
      return req.mac ?? fromRuntime();
    case 'bandwidth':
      return req.options?.bandwidth ?? fromRuntime();
    case 'portmappings':
      return req.options?.portMappings ?? fromRuntime();
    case 'deviceid':
      return req.options?.deviceID ?? fromRuntime();
    case 'infinibandguid':
      return req.options?.infinibandGUID ?? fromRuntime();
    default:
      return fromRuntime();
  }
}

/**
 * One plugin's config object: the plugin as defined (name and cniVersion already injected), with
 *  - `runtimeConfig` holding only the capabilities the plugin declares and the request has (replacing any
 *    static runtimeConfig, as libcni does; left alone when there is nothing to pass),
 *  - `args.cni` merged with the selection's cni-args (the annotation wins),
 *  - `prevResult` = the previous plugin's result in this plugin's cniVersion, for every plugin but the first.
 */
export function buildPluginConfig(plugin: PluginConfig, req: AttachRequest, prevResult: CniResult | undefined): Json {
  const out: Json = { ...plugin };
  const device = req.options?.kubeletDevice;
  if (device) {
    out.deviceID = device.deviceID;
    out.pciBusID = device.deviceID;
  }
  const runtimeConfig: Json = {};
  for (const cap of declaredCapabilities(plugin)) {
    const value = capabilityValue(cap, req);
    if (value !== undefined) runtimeConfig[cap] = value;
  }
  if (Object.keys(runtimeConfig).length) out.runtimeConfig = runtimeConfig;

  const extra = req.options?.cniArgs;
  if (extra && Object.keys(extra).length) {
    const args = isJsonObject(plugin.args) ? plugin.args : {};
    const cni = isJsonObject(args.cni) ? args.cni : {};
    out.args = { ...args, cni: { ...cni, ...extra } };
  }

  if (prevResult)
    out.prevResult = convertResult(
      prevResult,
      isSupportedVersion(plugin.cniVersion) ? plugin.cniVersion : LATEST_VERSION,
    );
  return out;
}
