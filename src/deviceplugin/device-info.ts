/**
 * NPWG device-info files (Device Information Specification 1.1.0) written by a device plugin: one JSON file per
 * allocated device, `<base>/dp/<resource with "/" as "-">-<deviceID with "/" as "-">-device.json`, the name the
 * network-attachment-definition-client library (and so Multus) reads.
 */
import { mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { errorMessage } from '../common/error-message';

export const DEFAULT_DEVICE_INFO_DIR = '/var/run/k8s.cni.cncf.io/devinfo';
export const DEVICE_INFO_VERSION = '1.1.0';

export type DeviceInfo =
  | { readonly type: 'pci'; readonly version: string; readonly pci: { readonly 'pci-address': string } }
  | {
      readonly type: 'memif';
      readonly version: string;
      /** role of the pod's end ("slave": the pod is the memif client; the node's switch is the server). */
      readonly memif: {
        readonly role: 'master' | 'slave';
        readonly path: string;
        readonly mode: 'ethernet' | 'ip' | 'punt';
      };
    };

export const deviceInfoFile = (baseDir: string, resourceName: string, deviceID: string): string =>
  join(baseDir, 'dp', `${resourceName.replaceAll('/', '-')}-${deviceID.replaceAll('/', '-')}-device.json`);

/** Writes (write-then-rename, so a reader never sees half a file) and answers the path. */
export function writeDeviceInfo(baseDir: string, resourceName: string, deviceID: string, info: DeviceInfo): string {
  const path = deviceInfoFile(baseDir, resourceName, deviceID);
  mkdirSync(join(baseDir, 'dp'), { recursive: true, mode: 0o755 });
  const tmp = `${path}.${process.pid}.tmp`;
  writeFileSync(tmp, JSON.stringify(info), { mode: 0o444 });
  renameSync(tmp, path);
  return path;
}

/** What a reader finds: the file's content, no file, or a file that is not a device-info object (and why). */
export type DeviceInfoRead =
  | { readonly kind: 'found'; readonly info: Record<string, unknown> }
  | { readonly kind: 'absent' }
  | { readonly kind: 'malformed'; readonly path: string; readonly reason: string };

/** Reads the file of one device, written by any device plugin; a reader must not fail a pod over a bad one. */
export function loadDeviceInfo(baseDir: string, resourceName: string, deviceID: string): DeviceInfoRead {
  const path = deviceInfoFile(baseDir, resourceName, deviceID);
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return { kind: 'absent' };
    return { kind: 'malformed', path, reason: errorMessage(e) };
  }
  try {
    const v = JSON.parse(text) as unknown;
    if (v === null || typeof v !== 'object' || Array.isArray(v))
      return { kind: 'malformed', path, reason: 'not a JSON object' };
    if (typeof (v as Record<string, unknown>).type !== 'string')
      return { kind: 'malformed', path, reason: 'no "type"' };
    return { kind: 'found', info: v as Record<string, unknown> };
  } catch (e) {
    return { kind: 'malformed', path, reason: errorMessage(e) };
  }
}

/** The file's content, or undefined when there is none (or it is not a device-info object). */
export function readDeviceInfo(
  baseDir: string,
  resourceName: string,
  deviceID: string,
): Record<string, unknown> | undefined {
  const read = loadDeviceInfo(baseDir, resourceName, deviceID);
  return read.kind === 'found' ? read.info : undefined;
}

export function removeDeviceInfo(baseDir: string, resourceName: string, deviceID: string): void {
  rmSync(deviceInfoFile(baseDir, resourceName, deviceID), { force: true });
}
