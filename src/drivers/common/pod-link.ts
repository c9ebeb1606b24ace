/**
 * A link a driver creates in the pod netns under the pod's interface name (macvlan, ipvlan, tap). Its undo step is
 * recorded before it is made, with the mark the link is created with (attachment-id.ts), so undo deletes it only if
 * it is that link: when the name was taken, the create fails and the undo leaves the other interface alone; after a
 * crash between the create and anything else, the mark still says the link is this attachment's.
 */
import type { AttachRequest, DriverEnv } from '../driver';
import { podLinkMark } from './attachment-id';

/** Records the deletion of the pod link `req.ifname` and answers the link group to create it with. */
export async function recordPodLink(req: AttachRequest, env: DriverEnv): Promise<number> {
  const mark = podLinkMark(req.containerId, req.runtimeIfname, req.ifname);
  await env.record({ kind: 'deleteLink', netns: req.netns, name: req.ifname, mark });
  return mark;
}
