/** The errors of a CNI request that is refused at the edge (request.ts): what is wrong, in the runtime's words. */
import { CniCode, CniError } from './errors';

const environment = (msg: string, details?: string): CniError => new CniError(CniCode.InvalidEnvironment, msg, details);
const config = (msg: string): CniError => new CniError(CniCode.InvalidNetworkConfig, msg);

export const requestErrors = {
  noCommand: (): CniError => environment('CNI_COMMAND is not set'),
  unknownCommand: (command: string, known: readonly string[]): CniError =>
    environment(`CNI_COMMAND "${command}" is not one of ${known.join(', ')}`),
  missingEnv: (key: string, command: string): CniError =>
    environment(`${key} is required for ${command} but is not set`),
  badIfname: (what: string, name: string, problem: string): CniError =>
    environment(name === '' ? `${what} is empty` : `${what} ${JSON.stringify(name)} ${problem}`),
  containerIdTooLong: (id: string, max: number): CniError =>
    environment(
      `CNI_CONTAINERID is ${id.length} characters long; at most ${max} are allowed`,
      "the container ID names files of plexusd's state; container runtimes use 64 characters",
    ),
  containerIdCharacters: (id: string): CniError =>
    environment(
      `CNI_CONTAINERID "${id}" has invalid characters ` +
        '(allowed: letters, digits, "_", ".", "-", starting with a letter or digit)',
    ),
  relativeNetns: (netns: string): CniError => environment(`CNI_NETNS "${netns}" is not an absolute path`),
  stdinNotJson: (why: string): CniError =>
    new CniError(CniCode.DecodeFailure, 'network configuration on stdin is not valid JSON', why),
  badConfig: (issue: string): CniError => config(`network configuration: ${issue}`),
  configWithout: (field: 'name' | 'type'): CniError => config(`network configuration has no "${field}"`),
  commandNeedsVersion: (command: string, min: string, version: string): CniError =>
    new CniError(
      CniCode.IncompatibleVersion,
      `${command} needs CNI version ${min} or later, the configuration says ${version}`,
    ),
  badGcAttachments: (): CniError => config('GC: cni.dev/valid-attachments must be a list of {containerID, ifname}'),
};
