/**
 * The engine's ClaimSink on the Kubernetes API: what each claimed device became in its pod, written into its claim's
 * status.devices[] (claim-status.ts) in the background, retried while the API is slow or away, never holding up the
 * CNI call that made it. Per claim, only the newest status is written: an older write still retrying gives way.
 */
import type { Logger } from 'pino';
import type { PodIdentity } from '../cni/types';
import type { ClaimedDeviceOutcome, ClaimedNetworkDevice, ClaimSink } from '../engine/claims/ports';
import type { KubeApiClient } from '../k8s/api-client';
import { BackgroundWrites, type Attempt, type RetryOptions } from '../k8s/background-writes';
import { applyClaimStatus, type DeviceNetworkStatus } from './claim-status';
import { definedFields } from '../common/defined-fields';

type ClaimKey = ClaimedNetworkDevice['claim'];

/** Statuses the API answers for good: the claim is gone (404), its allocation no longer has the device (422). */
const FINAL = [400, 403, 404, 422];

export class ClaimStatusSink implements ClaimSink {
  private readonly writes: BackgroundWrites;
  /** The newest write per claim UID: a retry of an older one stops. */
  private readonly latest = new Map<string, number>();
  private serial = 0;

  constructor(
    private readonly api: KubeApiClient,
    private readonly log: Logger,
    options: RetryOptions = { attempts: 8 },
  ) {
    this.writes = new BackgroundWrites(log, options);
  }

  settled(pod: PodIdentity, outcomes: readonly ClaimedDeviceOutcome[]): void {
    for (const [claim, mine] of byClaim(outcomes, (o) => o.device.claim)) {
      this.write(
        pod,
        claim,
        mine.map(({ device, attached, error }): DeviceNetworkStatus => ({
          pool: device.pool,
          device: device.device,
          ...definedFields({ network: attached }),
          ...(error !== undefined || !attached ? { error: error ?? 'the device is in no interface of the pod' } : {}),
        })),
      );
    }
  }

  released(pod: PodIdentity, devices: readonly ClaimedNetworkDevice[]): void {
    for (const [claim] of byClaim(devices, (d) => d.claim)) this.write(pod, claim, []);
  }

  /** Resolves when every write started so far has finished. */
  idle(): Promise<void> {
    return this.writes.settled();
  }

  private write(pod: PodIdentity, claim: ClaimKey, devices: readonly DeviceNetworkStatus[]): void {
    const mine = ++this.serial;
    this.latest.set(claim.uid, mine);
    const what = {
      claim: `${claim.namespace}/${claim.name}`,
      pod: `${pod.namespace ?? ''}/${pod.name ?? ''}`,
      devices: devices.length,
    };
    const attempt = async (): Promise<Attempt> => {
      if (this.latest.get(claim.uid) !== mine)
        return { outcome: 'stop', why: 'superseded by a newer status of the claim' };
      const r = await applyClaimStatus(this.api, claim, devices);
      if (r.ok) return { outcome: 'done' };
      const why = `ResourceClaim status: HTTP ${r.error.status || 'no answer'} ${r.error.message}`;
      return FINAL.includes(r.error.status) ? { outcome: 'stop', why } : { outcome: 'retry', why };
    };
    this.writes.start(what, attempt, () => {
      if (this.latest.get(claim.uid) === mine) this.latest.delete(claim.uid);
    });
    this.log.debug(what, 'claim status queued');
  }
}

/** Items grouped by their claim's UID, in first-seen order. */
function byClaim<T>(items: readonly T[], claimOf: (item: T) => ClaimKey): [ClaimKey, T[]][] {
  const groups = new Map<string, [ClaimKey, T[]]>();
  for (const item of items) {
    const claim = claimOf(item);
    const group = groups.get(claim.uid) ?? [claim, []];
    group[1].push(item);
    groups.set(claim.uid, group);
  }
  return [...groups.values()];
}
