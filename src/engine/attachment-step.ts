/** One attachment of a pod's plan: what the planner chose, the driver that runs it and the request it receives. */
import type { AttachRequest, Driver } from '../drivers/driver';
import type { PlannedAttachment } from '../networks/planner';
import type { ClaimedNetworkDevice } from './claims/ports';

export interface AttachmentStep {
  readonly planned: PlannedAttachment;
  readonly driver: Driver;
  /** What driver.parse made of the network's config: attach takes it as it is. */
  readonly config: unknown;
  readonly request: AttachRequest;
  /** The DRA-claimed device this attachment's network gets (claims/networks.ts). */
  readonly claimed?: ClaimedNetworkDevice;
}
