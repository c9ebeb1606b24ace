/**
 * The kernel worker thread: every blocking kernel call runs here, in order, off the daemon's event loop.
 * One message = one batch of operations in one netns, so a pod's plumbing costs one thread hop.
 */
import { parentPort } from 'node:worker_threads';
import { BatchRunner, type BatchRequest } from './batch-runner';

export type { BatchReply, BatchRequest } from './batch-runner';

const runner = new BatchRunner();

parentPort?.on('message', (req: BatchRequest) => {
  parentPort?.postMessage(runner.run(req));
});
