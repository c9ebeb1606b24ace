/**
 * The journal: one record per attachment, each undo step written before the change it undoes (docs/architecture.md,
 * "The journal and the undo model"). journal.ts keeps the records as files, lines.ts reads and checks each line,
 * record.ts replays a record's lines, entry.ts appends to an open one, errors.ts names the I/O failures.
 */
export { Journal, LOST_MARKER } from './journal';
export { JournalEntry } from './entry';
export {
  JOURNAL_VERSION,
  type AttachmentTag,
  type AttachmentMeta,
  type CommitDetails,
  type NetworkAttachment,
} from './lines';
export {
  parseRecord,
  attachmentSteps,
  unreadableRecordError,
  type AttachmentRecord,
  type PodNetworksChange,
  type TimedEvent,
} from './record';
