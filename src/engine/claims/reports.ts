/** The engine's side of DRA claims at run time: the devices a pod's prepared claims hold, and telling the sink. */
import type { PodIdentity } from '../../cni/types';
import type { ClaimedDeviceOutcome, ClaimedNetworkDevice, PodClaims } from './ports';
import type { EngineContext } from '../context';
import { errorMessage } from '../../common/error-message';

/** The devices of the pod's prepared claims (none without DRA, or without the pod's UID). */
export const claimedDevicesOf = (
  ctx: EngineContext,
  podUid: string | undefined,
  named?: PodClaims,
): readonly ClaimedNetworkDevice[] => (podUid && ctx.claims?.forPod(podUid, named)) || [];

/** Tells the claim sink, after the fact: a sink that throws is logged, never fails the call. */
export function reportClaims(ctx: EngineContext, pod: PodIdentity, outcomes: readonly ClaimedDeviceOutcome[]): void {
  if (outcomes.length === 0 || !ctx.claimSink) return;
  try {
    ctx.claimSink.settled(pod, outcomes);
  } catch (e) {
    ctx.log.warn({ err: errorMessage(e) }, 'the claim sink failed; the pod is attached regardless');
  }
}
