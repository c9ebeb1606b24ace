import { test } from 'node:test';
import assert from 'node:assert/strict';
import { appendFile, mkdir, mkdtemp, readdir, readFile, rm, stat, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { execFileSync } from 'node:child_process';
import { closeSync, openSync, writeSync } from 'node:fs';
import { CniError } from '../../src/cni/errors';
import { join } from 'node:path';
import type { CniResult } from '../../src/cni/types';
import { Journal, type JournalEntry, parseRecord, type AttachmentMeta } from '../../src/engine/journal';
import type { UndoStep } from '../../src/drivers/driver';

/** A fresh journal directory, removed even when the test fails. */
async function withJournal(body: (journal: Journal, dir: string) => Promise<void>, sync = true): Promise<void> {
  const root = await mkdtemp(join(tmpdir(), 'plexus-journal-'));
  try {
    const dir = join(root, 'journal');
    await body(await Journal.open(dir, sync), dir);
  } finally {
    await rm(root, { recursive: true, force: true });
  }
}

const meta = (containerId = 'c0ffee01', ifname = 'eth0'): AttachmentMeta => ({
  containerId,
  ifname,
  netns: '/var/run/netns/pod1',
  pod: { namespace: 'team-a', name: 'web-0', uid: '6f1c2b9e' },
  cniNetwork: 'plexus',
  networks: ['team-a/blue'],
  startedAt: '2024-05-01T10:00:00.000Z',
});

const steps: UndoStep[] = [
  { kind: 'releaseIpam', network: 'blue', containerId: 'c0ffee01', ifname: 'eth0' },
  { kind: 'deleteLink', name: 'veth1234' },
  { kind: 'deleteRoute', netns: '/var/run/netns/pod1', route: { dst: '0.0.0.0/0', gw: '10.1.0.1' } },
];

const blue = { network: 'team-a/blue', ifname: 'eth0' };

const result: CniResult = {
  interfaces: [{ name: 'eth0', mac: '0a:58:0a:01:00:07', sandbox: '/var/run/netns/pod1' }],
  ips: [{ address: '10.1.0.7/24', gateway: '10.1.0.1', interface: 0 }],
  routes: [{ dst: '0.0.0.0/0', gw: '10.1.0.1' }],
};

/** Writes a full record: begin, every undo step, one timed event, commit. */
async function writeCommitted(journal: Journal, m = meta()): Promise<void> {
  const entry = await journal.begin(m);
  try {
    for (const step of steps) await entry.record(step, blue);
    await entry.event('attach team-a/blue as eth0 (bridge)', 12.34567);
    await entry.commit(result, '1.0.0');
  } finally {
    await entry.close();
  }
}

for (const sync of [true, false]) {
  test(`begin, record, event and commit round-trip through load (journalSync ${sync})`, async () => {
    await withJournal(async (journal) => {
      await writeCommitted(journal);
      const record = await journal.load('c0ffee01', 'eth0');
      assert.ok(record);
      assert.deepEqual(record.meta, meta());
      assert.deepEqual(record.undo, steps);
      assert.deepEqual(record.result, result);
      assert.equal(record.cniVersion, '1.0.0');
      assert.equal(record.deleting, false);
      assert.deepEqual(
        record.events.map((e) => e.what),
        ['begin', 'attach team-a/blue as eth0 (bridge)', 'committed'],
      );
      assert.equal(record.events[0]?.at, '2024-05-01T10:00:00.000Z');
      assert.equal(record.events[1]?.ms, 12.346);
    }, sync);
  });
}

test('markDeleting on a reopened record is seen by load', async () => {
  await withJournal(async (journal) => {
    await writeCommitted(journal);
    const entry = await journal.reopen('c0ffee01', 'eth0');
    await entry.markDeleting();
    await entry.close();
    const record = await journal.load('c0ffee01', 'eth0');
    assert.equal(record?.deleting, true);
    assert.deepEqual(record?.result, result);
    assert.deepEqual(
      record?.events.map((e) => e.what),
      ['begin', 'attach team-a/blue as eth0 (bridge)', 'committed', 'deleting'],
    );
  });
});

test('a record begun but not committed has its undo steps and no result', async () => {
  await withJournal(async (journal) => {
    const entry = await journal.begin(meta());
    await entry.record(steps[0]!, blue);
    await entry.close();
    const record = await journal.load('c0ffee01', 'eth0');
    assert.deepEqual(record?.undo, [steps[0]]);
    assert.equal(record?.result, undefined);
    assert.equal(record?.cniVersion, undefined);
    assert.equal(record && 'result' in record, false);
  });
});

test('remove deletes the record', async () => {
  await withJournal(async (journal) => {
    await writeCommitted(journal);
    await journal.remove('c0ffee01', 'eth0');
    assert.equal(await journal.load('c0ffee01', 'eth0'), undefined);
    assert.deepEqual(await journal.list(), []);
    await journal.remove('c0ffee01', 'eth0'); // removing what is gone succeeds
  });
});

test('load of an unknown attachment is undefined', async () => {
  await withJournal(async (journal) => {
    assert.equal(await journal.load('nope', 'eth0'), undefined);
  });
});

test('list returns every record', async () => {
  await withJournal(async (journal) => {
    await writeCommitted(journal, meta('c1', 'eth0'));
    await writeCommitted(journal, meta('c1', 'net1'));
    await writeCommitted(journal, meta('c2', 'eth0'));
    assert.deepEqual((await journal.list()).map((r) => `${r.meta.containerId}/${r.meta.ifname}`).sort(), [
      'c1/eth0',
      'c1/net1',
      'c2/eth0',
    ]);
  });
});

test('begin fails when a record for the same attachment exists', async () => {
  await withJournal(async (journal) => {
    await writeCommitted(journal);
    await assert.rejects(journal.begin(meta()), { code: 'EEXIST' });
    assert.deepEqual((await journal.load('c0ffee01', 'eth0'))?.result, result);
  });
});

test('listContainer returns every record of one container and none of another whose ID it prefixes', async () => {
  await withJournal(async (journal) => {
    assert.deepEqual(await journal.listContainer('c0ffee01'), []);
    await writeCommitted(journal);
    await writeCommitted(journal, meta('c0ffee01', 'net1'));
    await writeCommitted(journal, meta('c0ffee0123', 'eth0'));
    assert.deepEqual((await journal.listContainer('c0ffee01')).map((r) => r.meta.ifname).sort(), ['eth0', 'net1']);
    await journal.remove('c0ffee01', 'eth0');
    assert.deepEqual(
      (await journal.listContainer('c0ffee01')).map((r) => r.meta.ifname),
      ['net1'],
    );
  });
});

test('an interface name with odd characters round-trips and is one file', async () => {
  await withJournal(async (journal, dir) => {
    const odd = ['net%1', 'ä-net', 'n?e#t*1', "it's"];
    for (const ifname of odd) await writeCommitted(journal, meta('c1', ifname));
    for (const ifname of odd) {
      assert.equal((await journal.load('c1', ifname))?.meta.ifname, ifname);
    }
    assert.equal((await readdir(dir)).length, odd.length);
    assert.deepEqual((await journal.list()).map((r) => r.meta.ifname).sort(), [...odd].sort());
  });
});

test('records of distinct attachments never share a file', async () => {
  await withJournal(async (journal) => {
    await writeCommitted(journal, meta('a_', 'b'));
    await writeCommitted(journal, meta('a', '_b'));
    assert.equal((await journal.load('a', '_b'))?.meta.containerId, 'a');
    assert.equal((await journal.load('a_', 'b'))?.meta.containerId, 'a_');
  });
});

test('the journal directory is created with mode 0700 and records with mode 0600', async () => {
  await withJournal(async (journal, dir) => {
    await writeCommitted(journal);
    assert.equal((await stat(dir)).mode & 0o777, 0o700);
    const [name] = await readdir(dir);
    assert.equal((await stat(join(dir, name!))).mode & 0o777, 0o600);
  });
});

test('a torn last line is ignored', async () => {
  await withJournal(async (journal, dir) => {
    const entry = await journal.begin(meta());
    await entry.record(steps[0]!, blue);
    await entry.close();
    const [name] = await readdir(dir);
    await appendFile(join(dir, name!), '{"t":"committed","result":{"interfaces":[');
    const record = await journal.load('c0ffee01', 'eth0');
    assert.deepEqual(record?.undo, [steps[0]]);
    assert.equal(record?.result, undefined);
  });
});

test('parseRecord ignores a torn last line', () => {
  const text = `${JSON.stringify({ t: 'begin', meta: meta() })}\n${JSON.stringify({ t: 'undo', step: steps[1], at: 'x' })}\n{"t":"undo","step":{"kind":"dele`;
  assert.deepEqual(parseRecord(text)?.undo, [steps[1]]);
});

test('parseRecord without a begin line is undefined', () => {
  assert.equal(parseRecord(''), undefined);
  assert.equal(parseRecord(`${JSON.stringify({ t: 'undo', step: steps[1], at: 'x' })}\n`), undefined);
  assert.equal(parseRecord('{"t":"begin","meta":{"contai'), undefined);
});

test('list drops a file that has no begin line', async () => {
  await withJournal(async (journal, dir) => {
    await writeCommitted(journal);
    await writeFile(join(dir, 'deadbeef@eth0.jsonl'), '');
    await writeFile(join(dir, 'deadbeef@net1.jsonl'), '{"t":"begin","me');
    assert.deepEqual(
      (await journal.list()).map((r) => r.meta.containerId),
      ['c0ffee01'],
    );
    assert.deepEqual((await readdir(dir)).sort(), ['c0ffee01@eth0.jsonl']);
  });
});

test('list ignores files that are not .jsonl', async () => {
  await withJournal(async (journal, dir) => {
    await writeFile(join(dir, 'notes.txt'), 'keep me');
    assert.deepEqual(await journal.list(), []);
    assert.equal(await readFile(join(dir, 'notes.txt'), 'utf8'), 'keep me');
  });
});

test('every line is written as format v1, and each undo step names its attachment', async () => {
  await withJournal(async (journal, dir) => {
    await writeCommitted(journal);
    const lines = (await readFile(join(dir, (await readdir(dir))[0]!), 'utf8'))
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { v?: number; t: string; a?: unknown });
    assert.ok(
      lines.every((l) => l.v === 1),
      'a version on every line',
    );
    assert.deepEqual(
      lines.filter((l) => l.t === 'undo').map((l) => l.a),
      [blue, blue, blue],
    );
    const record = await journal.load('c0ffee01', 'eth0');
    assert.deepEqual(record?.undoOwners, [blue, blue, blue]);
    assert.equal(record?.unreadable, undefined);
  });
});

// A record exactly as plexusd wrote it before journal v1 (no "v", no attachment on undo lines).
const V0_RECORD = [
  '{"t":"begin","meta":{"containerId":"c0ffee01","ifname":"eth0","netns":"/var/run/netns/pod1","pod":{"namespace":"team-a","name":"web-0"},"cniNetwork":"plexus","networks":["team-a/blue"],"startedAt":"2026-11-01T10:00:00.000Z"}}',
  '{"t":"undo","step":{"kind":"releaseIpam","network":"blue","containerId":"c0ffee01","ifname":"eth0"},"at":"2026-11-01T10:00:00.001Z"}',
  '{"t":"undo","step":{"kind":"deleteLink","name":"veth1234"},"at":"2026-11-01T10:00:00.002Z"}',
  '{"t":"event","what":"attach team-a/blue as eth0 (bridge)","ms":1.5,"at":"2026-11-01T10:00:00.003Z"}',
  '{"t":"committed","result":{"interfaces":[{"name":"eth0","sandbox":"/var/run/netns/pod1"}],"ips":[],"routes":[]},"cniVersion":"1.0.0","at":"2026-11-01T10:00:00.004Z"}',
  '',
].join('\n');

test('a v0 record written before this format is read whole, its steps owned by no attachment', () => {
  const record = parseRecord(V0_RECORD);
  assert.ok(record);
  assert.deepEqual(record.undo, [steps[0], steps[1]]);
  assert.deepEqual(record.undoOwners, [undefined, undefined]);
  assert.equal(record.cniVersion, '1.0.0');
  assert.equal(record.unreadable, undefined, 'v0 is a format this daemon reads');
});

test('a v0 record can be appended to in v1 and still reads whole (an upgrade mid-transaction)', async () => {
  await withJournal(async (journal, dir) => {
    await writeFile(join(dir, 'c0ffee01@eth0.jsonl'), V0_RECORD);
    const entry = await journal.reopen('c0ffee01', 'eth0');
    await entry.markDeleting();
    await entry.close();
    const record = await journal.load('c0ffee01', 'eth0');
    assert.equal(record?.deleting, true);
    assert.deepEqual(record?.undo, [steps[0], steps[1]]);
  });
});

test('a line of a newer format makes the record unreadable, naming the line and versions', () => {
  const text = `${V0_RECORD}{"v":2,"t":"undo","step":{"kind":"deleteLink","name":"x"},"at":"y"}\n`;
  const record = parseRecord(text);
  assert.equal(record?.unreadable, 'line 6: journal format v2; this plexusd reads up to v1');
  assert.deepEqual(record?.undo, [steps[0], steps[1]], 'what it could read is still listed');
});

test('a detached line retires the steps of that attachment only', async () => {
  await withJournal(async (journal) => {
    const red = { network: 'team-a/red', ifname: 'net1' };
    const entry = await journal.begin(meta());
    await entry.record(steps[0]!, blue);
    await entry.record({ kind: 'releaseIpam', network: 'red', containerId: 'c0ffee01', ifname: 'net1' }, red);
    await entry.record({ kind: 'deleteLink', netns: '/var/run/netns/pod1', name: 'net1' }, red);
    await entry.record(steps[1]!, blue);
    await entry.detached(red);
    await entry.close();
    const record = await journal.load('c0ffee01', 'eth0');
    assert.deepEqual(record?.undo, [steps[0], steps[1]]);
    assert.deepEqual(record?.undoOwners, [blue, blue]);
    assert.deepEqual(
      record?.events.map((e) => e.what),
      ['begin', 'detached team-a/red as net1'],
    );
  });
});

// What is on disk is input: a record plexusd cannot use is kept, named by file and line, and never read as less.

const lineOf = (line: Record<string, unknown>): string => `${JSON.stringify({ v: 1, ...line })}\n`;
const BEGIN = lineOf({ t: 'begin', meta: meta() });
const UNDO_LEASE = lineOf({ t: 'undo', step: steps[0], a: blue, at: 'x' });
const UNDO_LINK = lineOf({ t: 'undo', step: steps[1], a: blue, at: 'y' });
const COMMITTED = lineOf({ t: 'committed', result, cniVersion: '1.0.0', at: 'z' });

test('a line that parses as JSON but lacks a field makes the record unreadable, naming file and line', async () => {
  await withJournal(async (journal, dir) => {
    await writeFile(join(dir, 'c0ffee01@eth0.jsonl'), `${BEGIN}${UNDO_LEASE}${lineOf({ t: 'detached', at: 'x' })}`);
    const [record] = await journal.list();
    assert.equal(record?.meta.containerId, 'c0ffee01');
    assert.equal(
      record?.unreadable,
      `${join(dir, 'c0ffee01@eth0.jsonl')}, line 3: a: Invalid input: expected object, received undefined`,
    );
  });
});

test('a begin line without its fields is unreadable, and the record is known by its file name', async () => {
  await withJournal(async (journal, dir) => {
    await writeFile(join(dir, 'c0ffee01@net%2F1.jsonl'), `${lineOf({ t: 'begin' })}${UNDO_LEASE}`);
    const [record] = await journal.list();
    assert.deepEqual([record?.meta.containerId, record?.meta.ifname], ['c0ffee01', 'net/1']);
    assert.match(record?.unreadable ?? '', /, line 1: meta: /);
    assert.deepEqual(record?.undo, [], 'nothing of it is offered for undo');
  });
});

test('a record whose every line is of a newer format is kept, not dropped as empty', async () => {
  await withJournal(async (journal, dir) => {
    const newer = `${BEGIN}${UNDO_LEASE}${COMMITTED}`.replaceAll('{"v":1,', '{"v":2,');
    await writeFile(join(dir, 'c0ffee01@eth0.jsonl'), newer);
    const [record] = await journal.list();
    assert.match(
      record?.unreadable ?? '',
      /c0ffee01@eth0\.jsonl, line 1: journal format v2; this plexusd reads up to v1$/,
    );
    assert.equal(await readFile(join(dir, 'c0ffee01@eth0.jsonl'), 'utf8'), newer, 'the file is kept as it is');
  });
});

test('a line cut short in the middle of a record makes it unreadable; only the last line may be torn', () => {
  const cut = `${BEGIN}${UNDO_LEASE.slice(0, 30)}\n${UNDO_LINK}${COMMITTED}`;
  assert.match(parseRecord(cut)?.unreadable ?? '', /^line 2: not JSON/);
  const torn = parseRecord(`${BEGIN}${UNDO_LEASE}${UNDO_LINK.slice(0, 30)}`);
  assert.equal(torn?.unreadable, undefined);
  assert.equal(torn?.tornLine, 3);
  assert.deepEqual(torn?.undo, [steps[0]]);
});

test('a complete last line without its newline is used; garbage that is complete JSON is not ignored', () => {
  assert.deepEqual(parseRecord(`${BEGIN}${UNDO_LEASE.trimEnd()}`)?.undo, [steps[0]]);
  assert.match(
    parseRecord(`${BEGIN}{"v":1,"t":"undo","step":{"kind":"deleteLink"}}`)?.unreadable ?? '',
    /^line 2: step\.name: /,
  );
  assert.match(parseRecord(`${BEGIN}42\n`)?.unreadable ?? '', /^line 2: /);
  assert.match(parseRecord(`${BEGIN}null\n`)?.unreadable ?? '', /^line 2: /);
});

test('a torn last line is cut off when the record is reopened, so what is appended after it stays readable', async () => {
  await withJournal(async (journal, dir) => {
    await writeFile(join(dir, 'c0ffee01@eth0.jsonl'), `${BEGIN}${UNDO_LEASE}${UNDO_LINK.slice(0, 30)}`);
    const entry = await journal.reopen('c0ffee01', 'eth0');
    await entry.markDeleting();
    await entry.close();
    const record = await journal.load('c0ffee01', 'eth0');
    assert.equal(record?.unreadable, undefined);
    assert.equal(record?.deleting, true);
    assert.deepEqual(record?.undo, [steps[0]]);
  });
});

test('a record file that holds no record (a crash before its first line) does not block a new begin', async () => {
  await withJournal(async (journal, dir) => {
    await writeFile(join(dir, 'c0ffee01@eth0.jsonl'), '');
    assert.equal(await journal.load('c0ffee01', 'eth0'), undefined);
    await writeCommitted(journal);
    assert.deepEqual((await journal.load('c0ffee01', 'eth0'))?.result, result);
  });
});

test('a file that is not a regular file or cannot be read is an unreadable record of the container its name says', async () => {
  await withJournal(async (journal, dir) => {
    await mkdir(join(dir, 'c0ffee01@eth0.jsonl'));
    // Records are read with blocking calls: a FIFO must be refused, never opened for a read that waits for a writer.
    execFileSync('mkfifo', [join(dir, 'c0ffee02@eth0.jsonl')]);
    await writeCommitted(journal, meta('c0ffee03', 'eth0'));
    await symlink(join(dir, 'c0ffee03@eth0.jsonl'), join(dir, 'c0ffee04@eth0.jsonl'));
    const records = await journal.list();
    assert.deepEqual(
      records.map((r) => [r.meta.containerId, r.unreadable?.match(/(not a regular file)/)?.[1]]),
      [
        ['c0ffee01', 'not a regular file'],
        ['c0ffee02', 'not a regular file'],
        ['c0ffee03', undefined],
        ['c0ffee04', 'not a regular file'],
      ],
    );
  });
});

test('an append the disk has room for only in part is cut back: the record stays readable, the append fails with 5', async () => {
  const root = await mkdtemp(join(tmpdir(), 'plexus-journal-full-'));
  execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=256k', 'plexus-journal-full', root]);
  let entry: JournalEntry | undefined;
  try {
    const journal = await Journal.open(join(root, 'journal'), false);
    entry = await journal.begin(meta());
    await entry.record(steps[0]!, blue);
    const path = join(root, 'journal', 'c0ffee01@eth0.jsonl');
    const before = await readFile(path, 'utf8');
    // Fill every other page, so the record's last page has what is left of it (under 4 KiB) and nothing more.
    const fd = openSync(join(root, 'filler'), 'w');
    try {
      for (;;) writeSync(fd, Buffer.alloc(4096));
    } catch (e) {
      assert.equal((e as NodeJS.ErrnoException).code, 'ENOSPC');
    } finally {
      closeSync(fd);
    }
    const big: UndoStep = {
      kind: 'driver',
      driver: 'delegate',
      step: 'delegateDel',
      v: 1,
      data: { config: 'y'.repeat(8192) },
    };
    await assert.rejects(
      entry.record(big, blue),
      (e: unknown) => e instanceof CniError && e.code === 5 && /ENOSPC/.test(e.message) && e.message.includes(path),
    );
    assert.equal(await readFile(path, 'utf8'), before, 'the part that was written is cut off again');
    await rm(join(root, 'filler'));
    const record = await journal.load('c0ffee01', 'eth0');
    assert.equal(record?.unreadable, undefined);
    assert.deepEqual(record?.undo, [steps[0]]);
  } finally {
    await entry?.close();
    execFileSync('umount', [root]);
    await rm(root, { recursive: true, force: true });
  }
});

test('a begin the disk has no room for leaves no file, and the same begin succeeds once there is room', async () => {
  const root = await mkdtemp(join(tmpdir(), 'plexus-journal-full-'));
  execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=64k', 'plexus-journal-full', root]);
  try {
    const journal = await Journal.open(join(root, 'journal'), true);
    const fd = openSync(join(root, 'filler'), 'w');
    try {
      for (;;) writeSync(fd, Buffer.alloc(4096));
    } catch {
      /* full */
    } finally {
      closeSync(fd);
    }
    await assert.rejects(
      journal.begin(meta()),
      (e: unknown) => e instanceof CniError && e.code === 5 && /free space/.test(e.details),
    );
    assert.deepEqual(await readdir(join(root, 'journal')), []);
    assert.match((await journal.writable()) ?? '', /ENOSPC/);
    await rm(join(root, 'filler'));
    assert.equal(await journal.writable(), undefined);
    await writeCommitted(journal);
    assert.deepEqual((await journal.load('c0ffee01', 'eth0'))?.result, result);
  } finally {
    execFileSync('umount', [root]);
    await rm(root, { recursive: true, force: true });
  }
});

test('a journal directory removed underneath is made again by the next begin, marked LOST, and then every lease is held', async () => {
  await withJournal(async (journal, dir) => {
    await rm(dir, { recursive: true });
    assert.deepEqual(await journal.list(), []);
    const lease = { network: 'blue', address: '10.1.0.7/24', containerId: 'c9', ifname: 'eth0' };
    assert.equal((await journal.leaseHolders()).holds(lease), true, 'a missing directory holds every lease');
    await writeCommitted(journal);
    assert.match(await readFile(join(dir, 'LOST'), 'utf8'), /removed while plexusd ran/);
    assert.equal((await journal.leaseHolders()).holds(lease), true);
    await rm(join(dir, 'LOST'));
    assert.equal((await journal.leaseHolders()).holds(lease), false);
  });
});

test('no truncation and no garbled character of a record makes the reader throw, and a garbled middle line is never skipped', () => {
  const text = `${BEGIN}${UNDO_LEASE}${UNDO_LINK}${lineOf({ t: 'event', what: 'x', at: 'y' })}${COMMITTED}`;
  for (let cut = 0; cut <= text.length; cut++) {
    const record = parseRecord(text.slice(0, cut));
    assert.equal(record?.unreadable, undefined, `a cut at ${cut} is a torn tail, not an unreadable record`);
  }
  const newlines = [...text].flatMap((c, i) => (c === '\n' ? [i] : []));
  const lastLineStart = newlines[newlines.length - 2]! + 1;
  for (let at = 0; at < lastLineStart; at++) {
    for (const junk of ['\u0000', '}', '"', 'x', '\n']) {
      const garbled = `${text.slice(0, at)}${junk}${text.slice(at + 1)}`;
      if (garbled === text) continue;
      const record = parseRecord(garbled);
      // Every change either still validates (a string's content) or makes the record unreadable; none throws.
      if (record && !record.unreadable)
        assert.equal(record.undo.length, 2, `garbled at ${at} with ${JSON.stringify(junk)}`);
    }
  }
});

test('while the pod netns exists, a last line cut on a page boundary is a crash mid-append; cut anywhere else, the record is unreadable', async () => {
  await withJournal(async (journal, dir) => {
    const live = lineOf({ t: 'begin', meta: { ...meta(), netns: dir } }); // a path that exists stands for a live netns
    const complete = `${live}${UNDO_LEASE}`;
    const pad = lineOf({ t: 'event', what: 'y'.repeat(5000), at: 'x' });
    const crash = `${complete}${pad}`.slice(0, 4096);
    await writeFile(join(dir, 'c0ffee01@eth0.jsonl'), crash);
    const kept = await journal.load('c0ffee01', 'eth0');
    assert.equal(kept?.unreadable, undefined, 'a write cut by SIGKILL or a full disk stops on a page boundary');
    assert.deepEqual(kept?.undo, [steps[0]]);
    await writeFile(join(dir, 'c0ffee01@eth0.jsonl'), crash.slice(0, 4000));
    assert.match(
      (await journal.load('c0ffee01', 'eth0'))?.unreadable ?? '',
      /line 3: cut short while the pod's network namespace .* exists/,
    );
  });
});
