/**
 * The edge of the daemon: a forwarded CNI call (environment + stdin) validated once into a typed request.
 * Anything malformed ends here as a CNI error with the spec's code and a message that says what to fix.
 */
import { interfaceNameProblem } from './ifname';
import { firstIssue } from '../common/schema-issues';
import { z } from 'zod';
import { type CniArgs, parseCniArgs, RuntimeConfig } from './args';
import { type Result, err, ok } from './errors';
import { CNI_NAME_RE } from './names';
import { requestErrors } from './request-errors';
import { type AttachmentKey, type CniCommand, CNI_COMMANDS } from './types';
import { compareVersions, type CniVersion, isSupportedVersion, LATEST_VERSION, requireVersion } from './version';
import { errorMessage } from '../common/error-message';

/** What plexus-cni sends: the CNI environment and the stdin bytes. */
export const ForwardedCallSchema = z.object({
  env: z.record(z.string(), z.string()),
  stdin: z.string(),
});
export type ForwardedCall = z.infer<typeof ForwardedCallSchema>;

/** The top level of a plugin configuration; plugin-specific keys stay in `raw`. */
const PluginConfigSchema = z
  .object({
    cniVersion: z.string().optional(),
    name: z.string().optional(),
    type: z.string().optional(),
    runtimeConfig: z.record(z.string(), z.unknown()).optional(),
    capabilities: z.record(z.string(), z.boolean()).optional(),
    args: z.record(z.string(), z.unknown()).optional(),
    prevResult: z.record(z.string(), z.unknown()).optional(),
  })
  .passthrough();

export interface CniRequestBase {
  readonly version: CniVersion;
  /** The network configuration exactly as received. */
  readonly rawConfig: string;
  readonly config: Readonly<Record<string, unknown>>;
  readonly networkName: string;
  readonly runtimeConfig: RuntimeConfig;
}

export type CniRequest =
  | (CniRequestBase & {
      readonly command: 'ADD' | 'CHECK';
      readonly containerId: string;
      readonly netns: string;
      readonly ifname: string;
      readonly args: CniArgs;
    })
  | (CniRequestBase & {
      readonly command: 'DEL';
      readonly containerId: string;
      readonly netns: string;
      readonly ifname: string;
      readonly args: CniArgs;
    })
  | (CniRequestBase & { readonly command: 'GC'; readonly validAttachments: readonly AttachmentKey[] })
  | (CniRequestBase & { readonly command: 'STATUS' })
  | (CniRequestBase & { readonly command: 'VERSION' });

/**
 * The container ID names plexusd's files (journal records, spooled DELs), and a file name has at most 255 bytes.
 * containerd, CRI-O and podman use 64 characters; 128 leaves room for what is added around the ID.
 */
export const MAX_CONTAINER_ID_LENGTH = 128;

/** Validates an interface name as the kernel and the CNI spec require (interfaceNameProblem). */
export function validateIfname(name: string, what = 'CNI_IFNAME'): Result<string> {
  const problem = interfaceNameProblem(name);
  if (problem === undefined) return ok(name);
  return err(requestErrors.badIfname(what, name, problem));
}

const needEnv = (env: Record<string, string>, key: string, command: string): Result<string> => {
  const v = env[key];
  if (v === undefined || v === '') return err(requestErrors.missingEnv(key, command));
  return ok(v);
};

/**
 * The version to answer errors in when the request may be too broken to know it: the request's own if Plexus speaks
 * it, else the latest. A version Plexus does not speak is never echoed (the runtime could not parse an answer in it
 * anyway, and it may be any string); the error's details name the versions Plexus speaks.
 */
export function bestEffortVersion(stdin: string): CniVersion {
  try {
    const v = (JSON.parse(stdin) as { cniVersion?: unknown }).cniVersion;
    return isSupportedVersion(v) ? v : LATEST_VERSION;
  } catch {
    return LATEST_VERSION;
  }
}

export function parseCniRequest(call: ForwardedCall): Result<CniRequest> {
  const { env, stdin } = call;
  const command = env.CNI_COMMAND;
  if (command === undefined || command === '') return err(requestErrors.noCommand());
  if (!(CNI_COMMANDS as readonly string[]).includes(command)) {
    return err(requestErrors.unknownCommand(command, CNI_COMMANDS));
  }
  const cmd = command as CniCommand;

  let json: unknown;
  try {
    json = JSON.parse(stdin);
  } catch (e) {
    if (cmd === 'VERSION' && stdin.trim() === '') json = {};
    else return err(requestErrors.stdinNotJson(errorMessage(e)));
  }
  const parsed = PluginConfigSchema.safeParse(json);
  if (!parsed.success) return err(requestErrors.badConfig(firstIssue(parsed.error, '(top level)')));
  const config = parsed.data;

  if (cmd === 'VERSION') {
    const v =
      config.cniVersion && requireVersion(config.cniVersion).ok ? (config.cniVersion as CniVersion) : LATEST_VERSION;
    return ok({
      command: 'VERSION',
      version: v,
      rawConfig: stdin,
      config,
      networkName: config.name ?? '',
      runtimeConfig: new RuntimeConfig({}),
    });
  }

  const version = requireVersion(config.cniVersion);
  if (!version.ok) return version;
  if (!config.name) return err(requestErrors.configWithout('name'));
  if (!config.type) return err(requestErrors.configWithout('type'));
  const minimum: Partial<Record<CniCommand, string>> = { CHECK: '0.4.0', STATUS: '1.1.0', GC: '1.1.0' };
  const min = minimum[cmd];
  if (min && compareVersions(version.value, min) < 0)
    return err(requestErrors.commandNeedsVersion(cmd, min, version.value));
  const base: CniRequestBase = {
    version: version.value,
    rawConfig: stdin,
    config,
    networkName: config.name,
    runtimeConfig: new RuntimeConfig(config.runtimeConfig ?? {}),
  };

  if (cmd === 'STATUS') return ok({ ...base, command: 'STATUS' });
  if (cmd === 'GC') {
    const list = config['cni.dev/valid-attachments'] ?? config['cni.dev/attachments'] ?? [];
    const attachments = z
      .array(z.object({ containerID: z.string(), ifname: z.string() }).passthrough())
      .safeParse(list);
    if (!attachments.success) return err(requestErrors.badGcAttachments());
    return ok({
      ...base,
      command: 'GC',
      validAttachments: attachments.data.map((a) => ({ containerId: a.containerID, ifname: a.ifname })),
    });
  }

  const containerId = needEnv(env, 'CNI_CONTAINERID', cmd);
  if (!containerId.ok) return containerId;
  if (containerId.value.length > MAX_CONTAINER_ID_LENGTH) {
    return err(requestErrors.containerIdTooLong(containerId.value, MAX_CONTAINER_ID_LENGTH));
  }
  if (!CNI_NAME_RE.test(containerId.value)) return err(requestErrors.containerIdCharacters(containerId.value));
  const ifnameRaw = needEnv(env, 'CNI_IFNAME', cmd);
  if (!ifnameRaw.ok) return ifnameRaw;
  const ifname = validateIfname(ifnameRaw.value);
  if (!ifname.ok) return ifname;
  const args = parseCniArgs(env.CNI_ARGS);
  if (!args.ok) return args;
  if (cmd === 'DEL')
    return ok({
      ...base,
      command: 'DEL',
      containerId: containerId.value,
      netns: env.CNI_NETNS ?? '',
      ifname: ifname.value,
      args: args.value,
    });
  const netns = needEnv(env, 'CNI_NETNS', cmd);
  if (!netns.ok) return netns;
  if (!netns.value.startsWith('/')) return err(requestErrors.relativeNetns(netns.value));
  return ok({
    ...base,
    command: cmd,
    containerId: containerId.value,
    netns: netns.value,
    ifname: ifname.value,
    args: args.value,
  });
}
