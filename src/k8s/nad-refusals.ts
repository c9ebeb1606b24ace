/**
 * Says that a NAD is refused because an older one holds what it claims (a VXLAN VNI: src/networks/exclusive-claims.ts),
 * and that it is served again: a log line each, and a Warning Event NetworkNotServed on the refused NAD, so
 * `kubectl describe network-attachment-definition` shows it. Every node refuses the same NAD and names its Event alike
 * (from the NAD's uid and the clash), so the first node's POST makes the one Event and the others' meet 409.
 */
import { createHash } from 'node:crypto';
import type { Logger } from 'pino';
import { segment } from '../common/api-object';
import { clashError } from '../networks/exclusive-claims';
import type { KubeApiClient } from './api-client';
import { BackgroundWrites } from './background-writes';
import { eventObject } from './event-recorder';
import type { ClaimChange, RefusedNetwork } from '../networks/claimed-networks';

export const NETWORK_NOT_SERVED = 'NetworkNotServed';
const NAD_API_VERSION = 'k8s.cni.cncf.io/v1';
const NAD_KIND = 'NetworkAttachmentDefinition';

export class NadRefusals {
  private readonly writes: BackgroundWrites;

  constructor(
    private readonly client: KubeApiClient,
    private readonly nodeName: string,
    private readonly log: Logger,
  ) {
    this.writes = new BackgroundWrites(log, { attempts: 5 });
  }

  /** The source's callback (ApiNetworkSource's `claims.changed`). */
  readonly changed = (change: ClaimChange): void => {
    for (const refused of change.refused) {
      const { network, holder, claim } = refused.clash;
      this.log.warn({ network, holder, claim: claim.resource }, clashError(refused.clash).message);
      this.postEvent(refused);
    }
    for (const network of change.served)
      this.log.info({ network }, `network ${network} is served: no older network claims what it uses any more`);
  };

  settled(): Promise<void> {
    return this.writes.settled();
  }

  private postEvent(refused: RefusedNetwork): void {
    const { namespace, name, uid, clash } = refused;
    const digest = createHash('sha256').update(`${uid}\u0000${clash.holder}\u0000${clash.claim.resource}`);
    const body = eventObject({
      name: `${name.slice(0, 200)}.${digest.digest('hex').slice(0, 16)}`,
      involved: { apiVersion: NAD_API_VERSION, kind: NAD_KIND, namespace, name, ...(uid ? { uid } : {}) },
      type: 'Warning',
      reason: NETWORK_NOT_SERVED,
      message: `plexus: ${clashError(clash).message}`,
      at: Date.now(),
      node: this.nodeName,
    });
    const path = `/api/v1/namespaces/${segment(namespace)}/events`;
    this.writes.start({ event: NETWORK_NOT_SERVED, network: clash.network }, async () => {
      const r = await this.client.request('POST', path, 'events', { body });
      // 409: another node (or this one before a restart) wrote this Event already.
      if (r.ok || r.error.status === 409) return { outcome: 'done' };
      if ([403, 404, 422].includes(r.error.status))
        return { outcome: 'stop', why: `refused (HTTP ${r.error.status}): ${r.error.message}` };
      return { outcome: 'retry', why: r.error.message };
    });
  }
}
