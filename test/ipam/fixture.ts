/** Shared helpers for IPAM tests: a fresh store directory per test, removed even when the test fails. */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import assert from 'node:assert/strict';
import type { Result } from '../../src/cni/errors';
import { Ipam, type IpamConfig, parseIpamConfig } from '../../src/ipam';

export async function withStoreDir<T>(body: (dir: string) => Promise<T>): Promise<T> {
  const root = await mkdtemp(join(tmpdir(), 'plexus-ipam-'));
  try {
    return await body(join(root, 'ipam'));
  } finally {
    await rm(root, { recursive: true, force: true });
  }
}

export async function withIpam<T>(body: (ipam: Ipam, dir: string) => Promise<T>): Promise<T> {
  return withStoreDir(async (dir) => body(await Ipam.open(dir), dir));
}

export function unwrap<T>(result: Result<T>): T {
  if (!result.ok) assert.fail(`expected ok, got error ${result.error.code}: ${result.error.message}`);
  return result.value;
}

export function config(raw: unknown): IpamConfig {
  return unwrap(parseIpamConfig(raw));
}

export const hostLocal = (...subnets: string[]): IpamConfig =>
  config({ type: 'host-local', ranges: subnets.map((subnet) => [{ subnet }]) });

export function errorOf<T>(result: Result<T>): { code: number; message: string } {
  if (result.ok) assert.fail(`expected an error, got ${JSON.stringify(result.value)}`);
  return { code: result.error.code, message: result.error.message };
}
