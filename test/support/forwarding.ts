/**
 * The reference bridge (isGateway) and ptp plugins, and the native ptp driver, turn the host's IP forwarding on, as
 * they must. A test file that runs them calls this once: the sysctls are put back as they were after its tests.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { after, before } from 'node:test';

const SYSCTLS = ['/proc/sys/net/ipv4/ip_forward', '/proc/sys/net/ipv6/conf/all/forwarding'];

export function restoreForwardingAfterwards(): void {
  let saved: string[] = [];
  before(() => {
    saved = SYSCTLS.map((f) => readFileSync(f, 'utf8'));
  });
  after(() => {
    SYSCTLS.forEach((f, i) => writeFileSync(f, saved[i]!));
  });
}
