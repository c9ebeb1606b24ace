/**
 * What the socket API asks of the engine, and nothing more: the CNI verbs (cni-handler.ts), and plexusctl's reads and
 * GC (server.ts). AttachmentEngine is the one implementation, plugged in by src/node; test/api fakes this port, so
 * the API's validation and routing are checked without a kernel or a journal.
 */
import type { AttachmentEngine } from '../engine/engine';

/** The CNI verbs the API runs once a request has been parsed. */
export type CniVerbs = Pick<AttachmentEngine, 'add' | 'del' | 'check' | 'gc' | 'status'>;

/** The CNI verbs, and what plexusctl reads (attachments, adopted sandboxes, networks) and asks (GC). */
export type EngineVerbs = CniVerbs & Pick<AttachmentEngine, 'records' | 'adopted' | 'listNetworks' | 'sweep'>;
