// Specification of bin/plexus-cni, the native CNI executable that forwards each CNI call to plexusd.
// A fake daemon (a Node http server on a unix socket) stands in for plexusd: it speaks exactly the
// protocol in docs/shim.md, records what the shim sent and answers what each test needs.
import { before, describe, test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import {
  chmodSync,
  chownSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
} from 'node:fs';
import { createServer, type IncomingHttpHeaders, type Server, type ServerResponse } from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { skipUnlessPresent } from '../support/prerequisites';

const repoRoot = path.resolve(__dirname, '../../..');
const shimBinary = path.join(repoRoot, 'bin', 'plexus-cni');
const asanBinary = path.join(repoRoot, 'shim', 'build', 'plexus-cni-asan');
const debugBinary = path.join(repoRoot, 'shim', 'build', 'plexus-cni-debug');
const LOCAL_VERSIONS = ['0.3.0', '0.3.1', '0.4.0', '1.0.0', '1.1.0'];

interface RecordedRequest {
  readonly method: string;
  readonly url: string;
  readonly headers: IncomingHttpHeaders;
  readonly body: Buffer;
}

interface ForwardedBody {
  readonly env: Record<string, string>;
  readonly stdin: string;
}

interface FakeDaemon {
  readonly socketPath: string;
  readonly requests: RecordedRequest[];
}

type Answer = (request: RecordedRequest, res: ServerResponse, index: number) => void;

interface ShimRun {
  readonly code: number | null;
  readonly stdout: Buffer;
  readonly stderr: string;
  readonly elapsedMs: number;
}

interface CniError {
  readonly cniVersion: string;
  readonly code: number;
  readonly msg: string;
  readonly details?: string;
}

function tempDir(t: TestContext): string {
  const dir = mkdtempSync(path.join(tmpdir(), 'plexus-shim-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

function answerJson(res: ServerResponse, body: string, exitCode: number): void {
  // As plexusd does: always a Content-Length (the shim refuses chunked replies).
  res.writeHead(200, {
    'Content-Type': 'application/json',
    'Content-Length': Buffer.byteLength(body),
    'X-CNI-Exit-Code': String(exitCode),
  });
  res.end(body);
}

/** Starts a fake plexusd on socketPath; it is stopped when the test ends, pass or fail. */
async function startDaemon(t: TestContext, socketPath: string, answer: Answer): Promise<FakeDaemon> {
  const requests: RecordedRequest[] = [];
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const recorded = {
        method: req.method ?? '',
        url: req.url ?? '',
        headers: req.headers,
        body: Buffer.concat(chunks),
      };
      requests.push(recorded);
      answer(recorded, res, requests.length - 1);
    });
  });
  t.after(
    () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  );
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(socketPath, () => resolve());
  });
  return { socketPath, requests };
}

interface RunOptions {
  readonly env: Record<string, string>;
  readonly stdin: string | Buffer;
  readonly command?: readonly string[]; // defaults to [bin/plexus-cni]
}

/** Runs the shim asynchronously: the fake daemon lives in this process, so spawnSync would deadlock it. */
function runShim(options: RunOptions): Promise<ShimRun> {
  const [file, ...args] = options.command ?? [shimBinary];
  assert.ok(file !== undefined);
  const started = process.hrtime.bigint();
  return new Promise((resolve, reject) => {
    const child = spawn(file, args, { env: { PATH: process.env['PATH'] ?? '/usr/bin:/bin', ...options.env } });
    const stdout: Buffer[] = [];
    const stderr: Buffer[] = [];
    child.stdout.on('data', (chunk: Buffer) => stdout.push(chunk));
    child.stderr.on('data', (chunk: Buffer) => stderr.push(chunk));
    // The shim may stop reading early (oversized config); that is its right, not a test failure.
    child.stdin.on('error', () => undefined);
    child.on('error', reject);
    child.on('close', (code) =>
      resolve({
        code,
        stdout: Buffer.concat(stdout),
        stderr: Buffer.concat(stderr).toString('utf8'),
        elapsedMs: Number(process.hrtime.bigint() - started) / 1e6,
      }),
    );
    child.stdin.end(options.stdin);
  });
}

function parseForwarded(request: RecordedRequest): ForwardedBody {
  return JSON.parse(request.body.toString('utf8')) as ForwardedBody;
}

function parseCniError(run: ShimRun): CniError {
  return JSON.parse(run.stdout.toString('utf8')) as CniError;
}

function onlyRequest(daemon: FakeDaemon): RecordedRequest {
  assert.equal(daemon.requests.length, 1);
  const request = daemon.requests[0];
  assert.ok(request !== undefined);
  return request;
}

const ADD_ENV: Readonly<Record<string, string>> = {
  CNI_COMMAND: 'ADD',
  CNI_CONTAINERID: 'c0ffee',
  CNI_NETNS: '/var/run/netns/pod',
  CNI_IFNAME: 'eth0',
  CNI_PATH: '/opt/cni/bin',
};

const addEnv = (socketPath: string): Record<string, string> => ({ ...ADD_ENV, PLEXUS_SOCKET: socketPath });

function hasValgrind(): boolean {
  return spawnSync('valgrind', ['--version'], { stdio: 'ignore' }).status === 0;
}

before(() => {
  const build = spawnSync('make', ['-s', '-C', 'shim'], { cwd: repoRoot, encoding: 'utf8' });
  assert.equal(build.status, 0, `make -s -C shim failed:\n${build.stdout}${build.stderr}`);
});

describe('plexus-cni forwards each CNI call to plexusd', () => {
  test('sends POST /v1/cni with every CNI_* variable and the exact stdin bytes, using the top-level socketPath only', async (t) => {
    const dir = tempDir(t);
    const daemon = await startDaemon(t, path.join(dir, 'plexus.sock'), (_req, res) => answerJson(res, '{}', 0));
    const stdin =
      '{\n\t"cniVersion": "1.0.0",\n' +
      '\t"name": "tricky \\"net\\" \\\\ name",\n' +
      `\t"socketPath": ${JSON.stringify(daemon.socketPath)},\n` +
      '\t"plugins": [{"type": "plexus", "socketPath": "/nonexistent/nested.sock"}],\n' +
      '\t"args": {"socketPath": "/nonexistent/args.sock", "list": ["}", "]", "{"]},\n' +
      '\t"note": "line1\\nline2\\ttab ü 日本 😀 \\u0001 \\"socketPath\\": \\"/nonexistent/in-string.sock\\""\n' +
      '}\r\n\x01\x7f';
    const env = {
      CNI_COMMAND: 'ADD',
      CNI_CONTAINERID: 'c0ffee',
      CNI_NETNS: '/var/run/netns/pod "quoted"',
      CNI_IFNAME: 'net1',
      CNI_ARGS: 'K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0;IP=10.0.0.5',
      CNI_PATH: '/opt/cni/bin:/usr/libexec/cni',
    };

    const run = await runShim({ env, stdin });

    assert.equal(run.code, 0, run.stdout.toString());
    const request = onlyRequest(daemon);
    assert.equal(request.method, 'POST');
    assert.equal(request.url, '/v1/cni');
    assert.equal(request.headers['content-type'], 'application/json');
    assert.equal(request.headers['host'], 'plexusd');
    assert.equal(request.headers['connection'], 'close');
    assert.equal(request.headers['content-length'], String(request.body.length));
    const forwarded = parseForwarded(request);
    assert.deepEqual(forwarded, { env, stdin });
  });

  test('forwards an empty CNI_NETNS as "" and leaves an unset one out', async (t) => {
    const dir = tempDir(t);
    const daemon = await startDaemon(t, path.join(dir, 'plexus.sock'), (_req, res) => answerJson(res, '', 0));

    const withEmpty = await runShim({
      env: {
        CNI_COMMAND: 'DEL',
        CNI_CONTAINERID: 'c1',
        CNI_IFNAME: 'eth0',
        CNI_NETNS: '',
        PLEXUS_SOCKET: daemon.socketPath,
      },
      stdin: '{}',
    });
    const withoutNetns = await runShim({
      env: { CNI_COMMAND: 'DEL', CNI_CONTAINERID: 'c1', CNI_IFNAME: 'eth0', PLEXUS_SOCKET: daemon.socketPath },
      stdin: '{}',
    });

    assert.equal(withEmpty.code, 0);
    assert.equal(withoutNetns.code, 0);
    const [first, second] = daemon.requests.map(parseForwarded);
    assert.deepEqual(first?.env, { CNI_COMMAND: 'DEL', CNI_CONTAINERID: 'c1', CNI_NETNS: '', CNI_IFNAME: 'eth0' });
    assert.deepEqual(second?.env, { CNI_COMMAND: 'DEL', CNI_CONTAINERID: 'c1', CNI_IFNAME: 'eth0' });
  });

  test('prints the daemon body exactly and exits 0 when X-CNI-Exit-Code is 0', async (t) => {
    const dir = tempDir(t);
    const body = '{"cniVersion":"1.1.0","interfaces":[{"name":"eth0","mac":"0a:58:0a:00:00:05"}],"note":"ü\\n"}\n\n';
    const daemon = await startDaemon(t, path.join(dir, 'plexus.sock'), (_req, res) => answerJson(res, body, 0));

    const run = await runShim({ env: addEnv(daemon.socketPath), stdin: '{}' });

    assert.equal(run.code, 0);
    assert.deepEqual(run.stdout, Buffer.from(body, 'utf8'));
  });

  test('prints the daemon body exactly and exits 1 when X-CNI-Exit-Code is 1', async (t) => {
    const dir = tempDir(t);
    const body = '{"cniVersion":"1.1.0","code":7,"msg":"invalid network config","details":"x"}';
    const daemon = await startDaemon(t, path.join(dir, 'plexus.sock'), (_req, res) => answerJson(res, body, 1));

    const run = await runShim({ env: addEnv(daemon.socketPath), stdin: '{}' });

    assert.equal(run.code, 1);
    assert.equal(run.stdout.toString('utf8'), body);
  });

  test('exits 1 with the body printed when a 200 reply lacks X-CNI-Exit-Code', async (t) => {
    const dir = tempDir(t);
    const daemon = await startDaemon(t, path.join(dir, 'plexus.sock'), (_req, res) => {
      res.writeHead(200, { 'Content-Type': 'application/json', 'Content-Length': 11 });
      res.end('{"ok":true}');
    });

    const run = await runShim({ env: addEnv(daemon.socketPath), stdin: '{}' });

    assert.equal(run.code, 1);
    assert.equal(run.stdout.toString('utf8'), '{"ok":true}');
  });

  test('refuses a chunked reply (plexusd always sends Content-Length) as code 11, never printing its framing', async (t) => {
    const dir = tempDir(t);
    const daemon = await startDaemon(t, path.join(dir, 'plexus.sock'), (_req, res) => {
      res.writeHead(200, { 'X-CNI-Exit-Code': '0' });
      res.write('{"part":');
      setTimeout(() => res.end('"two"}'), 20);
    });

    const run = await runShim({ env: addEnv(daemon.socketPath), stdin: '{}' });

    assert.equal(run.code, 1);
    const error = parseCniError(run);
    assert.equal(error.code, 11);
    assert.equal(error.msg, 'plexusd returned an unexpected reply');
    assert.match(String(error.details), /chunked transfer encoding is not supported/);
  });

  test('reports an unexpected HTTP status as code 11 with the status line in details', async (t) => {
    const dir = tempDir(t);
    const daemon = await startDaemon(t, path.join(dir, 'plexus.sock'), (_req, res) => {
      res.writeHead(500, 'Internal Server Error');
      res.end('boom');
    });

    const run = await runShim({ env: addEnv(daemon.socketPath), stdin: '{"cniVersion":"1.0.0"}' });

    assert.equal(run.code, 1);
    const error = parseCniError(run);
    assert.equal(error.code, 11);
    assert.equal(error.msg, 'plexusd returned an unexpected reply');
    assert.match(error.details ?? '', /HTTP\/1\.1 500 Internal Server Error/);
  });
});

describe('plexus-cni finds its socket', () => {
  test('uses socketPath from the network config', async (t) => {
    const dir = tempDir(t);
    const daemon = await startDaemon(t, path.join(dir, 'from-config.sock'), (_req, res) => answerJson(res, '{}', 0));
    const run = await runShim({
      env: { ...ADD_ENV },
      stdin: JSON.stringify({ cniVersion: '1.1.0', socketPath: daemon.socketPath }),
    });

    assert.equal(run.code, 0, run.stdout.toString());
    assert.equal(daemon.requests.length, 1);
  });

  test('PLEXUS_SOCKET overrides socketPath from the network config', async (t) => {
    const dir = tempDir(t);
    const daemon = await startDaemon(t, path.join(dir, 'from-env.sock'), (_req, res) => answerJson(res, '{}', 0));

    const run = await runShim({
      env: addEnv(daemon.socketPath),
      stdin: JSON.stringify({ socketPath: path.join(dir, 'absent.sock'), daemonWaitSeconds: 0 }),
    });

    assert.equal(run.code, 0, run.stdout.toString());
    assert.equal(daemon.requests.length, 1);
  });
});

describe('plexus-cni when plexusd is not there', () => {
  test('ADD fails with code 11 after daemonWaitSeconds, naming the socket and errno', async (t) => {
    const socketPath = path.join(tempDir(t), 'plexus.sock');

    const run = await runShim({ env: addEnv(socketPath), stdin: JSON.stringify({ daemonWaitSeconds: 0.5 }) });

    assert.equal(run.code, 1);
    const error = parseCniError(run);
    assert.equal(error.code, 11);
    assert.equal(error.msg, `plexusd is not reachable at ${socketPath}`);
    assert.match(error.details ?? '', /ENOENT/);
    assert.ok(run.elapsedMs >= 450, `gave up after ${run.elapsedMs} ms, before daemonWaitSeconds`);
    assert.ok(run.elapsedMs < 3000, `took ${run.elapsedMs} ms`);
  });

  test('ADD succeeds when the daemon starts listening while the shim waits', async (t) => {
    const socketPath = path.join(tempDir(t), 'plexus.sock');
    const pending = runShim({ env: addEnv(socketPath), stdin: JSON.stringify({ daemonWaitSeconds: 5 }) });
    await new Promise((resolve) => setTimeout(resolve, 300));
    const daemon = await startDaemon(t, socketPath, (_req, res) => answerJson(res, '{"late":true}', 0));

    const run = await pending;

    assert.equal(run.code, 0, run.stdout.toString());
    assert.equal(run.stdout.toString(), '{"late":true}');
    assert.equal(daemon.requests.length, 1);
  });

  test('a 503 reply is retried until the daemon answers', async (t) => {
    const dir = tempDir(t);
    const daemon = await startDaemon(t, path.join(dir, 'plexus.sock'), (_req, res, index) => {
      if (index === 0) {
        res.writeHead(503, { 'Retry-After': '1' });
        res.end('starting');
      } else {
        answerJson(res, '{"second":true}', 0);
      }
    });

    const run = await runShim({ env: addEnv(daemon.socketPath), stdin: JSON.stringify({ daemonWaitSeconds: 5 }) });

    assert.equal(run.code, 0, run.stdout.toString());
    assert.equal(run.stdout.toString(), '{"second":true}');
    assert.equal(daemon.requests.length, 2);
    assert.deepEqual(daemon.requests[0]?.body, daemon.requests[1]?.body);
  });

  test('DEL spools the exact request body to pending-del/, prints nothing and exits 0', async (t) => {
    const dir = tempDir(t);
    const socketPath = path.join(dir, 'plexus.sock');
    const stdin = JSON.stringify({ cniVersion: '1.1.0', name: 'net', daemonWaitSeconds: 0.2 });
    // Key order as the shim writes them, so the spooled bytes can be compared exactly.
    const env = {
      CNI_COMMAND: 'DEL',
      CNI_CONTAINERID: 'abc/../123',
      CNI_NETNS: '',
      CNI_IFNAME: 'net1',
      PLEXUS_SOCKET: socketPath,
    };

    const run = await runShim({ env, stdin });

    assert.equal(run.code, 0, run.stdout.toString());
    assert.equal(run.stdout.length, 0);
    const spool = path.join(dir, 'pending-del');
    assert.equal(statSync(spool).mode & 0o777, 0o700);
    assert.deepEqual(readdirSync(spool), ['abc_.._123-net1.json']);
    const spooled = readFileSync(path.join(spool, 'abc_.._123-net1.json'), 'utf8');
    const { PLEXUS_SOCKET: _socket, ...cniEnv } = env;
    assert.equal(spooled, JSON.stringify({ env: cniEnv, stdin }));
  });

  test('DEL fails with code 11 when the spool cannot be written', async (t) => {
    const dir = tempDir(t);
    // A regular file where the spool's parent directory should be makes mkdir fail.
    const blocker = path.join(dir, 'not-a-dir');
    spawnSync('touch', [blocker]);

    const run = await runShim({
      env: {
        CNI_COMMAND: 'DEL',
        CNI_CONTAINERID: 'c',
        CNI_IFNAME: 'eth0',
        PLEXUS_SOCKET: path.join(blocker, 'plexus.sock'),
      },
      stdin: JSON.stringify({ daemonWaitSeconds: 0 }),
    });

    assert.equal(run.code, 1);
    const error = parseCniError(run);
    assert.equal(error.code, 11);
    assert.match(error.details ?? '', /spooling the DEL failed/);
  });

  test('STATUS answers code 50 at once', async (t) => {
    const socketPath = path.join(tempDir(t), 'plexus.sock');

    const run = await runShim({
      env: { CNI_COMMAND: 'STATUS', PLEXUS_SOCKET: socketPath },
      stdin: '{"cniVersion":"1.1.0"}',
    });

    assert.equal(run.code, 1);
    const error = parseCniError(run);
    assert.equal(error.code, 50);
    assert.equal(error.msg, 'plexusd is not running');
    assert.ok(run.elapsedMs < 1000, `took ${run.elapsedMs} ms`);
  });

  test('VERSION answers the supported versions locally and exits 0', async (t) => {
    const socketPath = path.join(tempDir(t), 'plexus.sock');

    const run = await runShim({
      env: { CNI_COMMAND: 'VERSION', PLEXUS_SOCKET: socketPath },
      stdin: '{"cniVersion":"0.4.0"}',
    });

    assert.equal(run.code, 0);
    assert.deepEqual(JSON.parse(run.stdout.toString()), { cniVersion: '1.1.0', supportedVersions: LOCAL_VERSIONS });
    assert.ok(run.elapsedMs < 1000, `took ${run.elapsedMs} ms`);
  });

  test('a missing CNI_COMMAND is reported as code 4', async (t) => {
    const socketPath = path.join(tempDir(t), 'plexus.sock');

    const run = await runShim({ env: { PLEXUS_SOCKET: socketPath }, stdin: '{}' });

    assert.equal(run.code, 1);
    assert.equal(parseCniError(run).code, 4);
    assert.equal(parseCniError(run).msg, 'CNI_COMMAND is not set');
  });

  test('the error carries the cniVersion of the request', async (t) => {
    const socketPath = path.join(tempDir(t), 'plexus.sock');

    const run = await runShim({
      env: addEnv(socketPath),
      stdin: '{"plugins":[{"cniVersion":"9.9.9"}],"cniVersion":"0.4.0","daemonWaitSeconds":0}',
    });

    assert.equal(parseCniError(run).cniVersion, '0.4.0');
  });

  test('an error never echoes a cniVersion Plexus does not speak: it is answered in 1.1.0', async (t) => {
    const socketPath = path.join(tempDir(t), 'plexus.sock');
    for (const version of ['9.9.9', '0.2.0', 'x'.repeat(100000)]) {
      const run = await runShim({
        env: addEnv(socketPath),
        stdin: JSON.stringify({ cniVersion: version, daemonWaitSeconds: 0 }),
      });
      assert.equal(parseCniError(run).cniVersion, '1.1.0');
      assert.ok(run.stdout.length < 2048, `${run.stdout.length} bytes`);
    }
  });
});

describe('plexus-cni spools a DEL only where nobody but its owner can write', () => {
  const NOBODY = 65534;
  const delEnv = (socketPath: string): Record<string, string> => ({
    CNI_COMMAND: 'DEL',
    CNI_CONTAINERID: 'c1',
    CNI_IFNAME: 'eth0',
    PLEXUS_SOCKET: socketPath,
  });
  const stdin = JSON.stringify({ cniVersion: '1.1.0', daemonWaitSeconds: 0 });

  async function assertRefused(socketPath: string, why: RegExp): Promise<void> {
    const run = await runShim({ env: delEnv(socketPath), stdin });
    assert.equal(run.code, 1, run.stdout.toString());
    const error = parseCniError(run);
    assert.equal(error.code, 11);
    assert.match(error.details ?? '', /refusing to spool the DEL: /);
    assert.match(error.details ?? '', why);
  }

  test('not into a socket directory of mode 0777', async (t) => {
    const run = path.join(tempDir(t), 'run');
    mkdirSync(run);
    chmodSync(run, 0o777);
    await assertRefused(
      path.join(run, 'plexus.sock'),
      new RegExp(`${run} is writable by group or others \\(mode 0777\\)`),
    );
    assert.deepEqual(readdirSync(run), []);
  });

  test('not into a socket directory that is a symlink', async (t) => {
    const dir = tempDir(t);
    mkdirSync(path.join(dir, 'real'), { mode: 0o700 });
    symlinkSync(path.join(dir, 'real'), path.join(dir, 'run'));
    await assertRefused(path.join(dir, 'run', 'plexus.sock'), /run is a symbolic link/);
    assert.deepEqual(readdirSync(path.join(dir, 'real')), []);
  });

  test('not into a socket directory owned by another user', async (t) => {
    const run = path.join(tempDir(t), 'run');
    mkdirSync(run, { mode: 0o755 });
    chownSync(run, NOBODY, NOBODY);
    await assertRefused(path.join(run, 'plexus.sock'), new RegExp(`${run} is owned by uid ${NOBODY}, not by uid 0`));
    assert.deepEqual(readdirSync(run), []);
  });

  test('not into a pending-del that is a symlink, so nothing is written where it points', async (t) => {
    const dir = tempDir(t);
    mkdirSync(path.join(dir, 'elsewhere'), { mode: 0o700 });
    symlinkSync(path.join(dir, 'elsewhere'), path.join(dir, 'pending-del'));
    await assertRefused(path.join(dir, 'plexus.sock'), /pending-del is a symbolic link/);
    assert.deepEqual(readdirSync(path.join(dir, 'elsewhere')), []);
  });

  test('not into a pending-del owned by another user or writable by others', async (t) => {
    const dir = tempDir(t);
    const spool = path.join(dir, 'pending-del');
    mkdirSync(spool, { mode: 0o700 });
    chownSync(spool, NOBODY, NOBODY);
    await assertRefused(path.join(dir, 'plexus.sock'), /pending-del is owned by uid 65534/);
    chownSync(spool, 0, 0);
    chmodSync(spool, 0o733);
    await assertRefused(path.join(dir, 'plexus.sock'), /pending-del is writable by group or others \(mode 0733\)/);
    assert.deepEqual(readdirSync(spool), []);
  });
});

describe('plexus-cni bounds what it waits for and reads', () => {
  test('a daemon that accepts but never answers gives code 11 after daemonReplyTimeoutSeconds', async (t) => {
    const dir = tempDir(t);
    const daemon = await startDaemon(t, path.join(dir, 'plexus.sock'), () => undefined);

    const run = await runShim({
      env: addEnv(daemon.socketPath),
      stdin: JSON.stringify({ daemonReplyTimeoutSeconds: 0.5 }),
    });

    assert.equal(run.code, 1);
    const error = parseCniError(run);
    assert.equal(error.code, 11);
    assert.equal(error.msg, 'plexusd did not answer');
    assert.ok(run.elapsedMs >= 450 && run.elapsedMs < 3000, `took ${run.elapsedMs} ms`);
  });

  test('a connection cut before any reply byte (a daemon being replaced) is replayed, and the replay answered', async (t) => {
    const dir = tempDir(t);
    const daemon = await startDaemon(t, path.join(dir, 'plexus.sock'), (_req, res, i) =>
      i < 2 ? res.socket?.destroy() : answerJson(res, '{"cniVersion":"1.1.0"}', 0),
    );

    const run = await runShim({ env: addEnv(daemon.socketPath), stdin: '{}' });

    assert.equal(run.code, 0, run.stdout.toString());
    assert.equal(run.stdout.toString(), '{"cniVersion":"1.1.0"}');
    assert.equal(daemon.requests.length, 3);
    assert.deepEqual(
      daemon.requests[2]!.body,
      daemon.requests[0]!.body,
      'the replay is the same request, byte for byte',
    );
  });

  test('a daemon that keeps closing without a reply gives code 11 once daemonWaitSeconds are over', async (t) => {
    const dir = tempDir(t);
    const daemon = await startDaemon(t, path.join(dir, 'plexus.sock'), (_req, res) => res.socket?.destroy());

    const run = await runShim({ env: addEnv(daemon.socketPath), stdin: '{"daemonWaitSeconds":0.6}' });

    assert.equal(run.code, 1);
    const error = parseCniError(run);
    assert.equal(error.code, 11);
    assert.match(error.msg, /plexusd is not reachable/);
    assert.match(String(error.details), /connection closed after 0 reply bytes; waited 0\.[6-9]/);
    assert.ok(daemon.requests.length >= 2, `retried (${daemon.requests.length} attempts)`);
  });

  test('a reply cut off after its first bytes is never resent: the daemon may have acted on it', async (t) => {
    const dir = tempDir(t);
    const daemon = await startDaemon(t, path.join(dir, 'plexus.sock'), (_req, res) => {
      res.socket?.write('HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{"cni', () => res.socket?.destroy());
    });

    const run = await runShim({ env: addEnv(daemon.socketPath), stdin: '{}' });

    assert.equal(run.code, 1);
    assert.equal(parseCniError(run).msg, 'plexusd did not answer');
    assert.equal(daemon.requests.length, 1, 'a request answered in part must not be resent');
  });

  test('a config over 4 MiB is refused with code 4', async (t) => {
    const socketPath = path.join(tempDir(t), 'plexus.sock');
    const big = Buffer.alloc(4 * 1024 * 1024 + 1, 0x20);
    big.write('{"cniVersion":"1.0.0","pad":"');

    const run = await runShim({ env: addEnv(socketPath), stdin: big });

    assert.equal(run.code, 1);
    const error = parseCniError(run);
    assert.equal(error.code, 4);
    assert.equal(error.msg, 'network configuration larger than 4 MiB');
  });
});

describe('plexus-cni is memory-clean', () => {
  const valgrind = ['valgrind', '-q', '--error-exitcode=99', '--leak-check=full'];

  test('an ADD forwarded to the daemon runs clean under valgrind', async (t) => {
    if (
      skipUnlessPresent(t, hasValgrind() ? undefined : 'valgrind is not installed (bash scripts/setup.sh installs it)')
    )
      return;
    const build = spawnSync('make', ['-s', '-C', 'shim', 'debug'], { cwd: repoRoot, encoding: 'utf8' });
    assert.equal(build.status, 0, build.stderr);
    const dir = tempDir(t);
    const daemon = await startDaemon(t, path.join(dir, 'plexus.sock'), (_req, res) => answerJson(res, '{"ok":1}', 0));

    // The static binary is what ships; the dynamic debug build lets valgrind see every malloc.
    for (const binary of [shimBinary, debugBinary]) {
      const run = await runShim({
        env: addEnv(daemon.socketPath),
        stdin: '{"cniVersion":"1.1.0"}',
        command: [...valgrind, binary],
      });
      assert.equal(run.code, 0, `${binary}:\n${run.stderr}`);
      assert.equal(run.stdout.toString(), '{"ok":1}');
    }
  });

  test('an ADD with no daemon runs clean under valgrind', async (t) => {
    if (
      skipUnlessPresent(t, hasValgrind() ? undefined : 'valgrind is not installed (bash scripts/setup.sh installs it)')
    )
      return;
    const build = spawnSync('make', ['-s', '-C', 'shim', 'debug'], { cwd: repoRoot, encoding: 'utf8' });
    assert.equal(build.status, 0, build.stderr);
    const socketPath = path.join(tempDir(t), 'plexus.sock');

    for (const binary of [shimBinary, debugBinary]) {
      const run = await runShim({
        env: addEnv(socketPath),
        stdin: '{"daemonWaitSeconds":0.3}',
        command: [...valgrind, binary],
      });
      assert.equal(run.code, 1, `${binary}:\n${run.stderr}`);
      assert.equal(parseCniError(run).code, 11);
    }
  });

  test('the ASan/UBSan build forwards a tricky request without a report', async (t) => {
    const build = spawnSync('make', ['-s', '-C', 'shim', 'asan'], { cwd: repoRoot, encoding: 'utf8' });
    assert.equal(build.status, 0, build.stderr);
    const dir = tempDir(t);
    const daemon = await startDaemon(t, path.join(dir, 'plexus.sock'), (_req, res) => answerJson(res, '{"ok":2}', 0));
    const stdin =
      '{"a":"\\ud83d\\ude00 \\ud800 x","socketPath":"\\u002fnope","n":[1,{"b":"}"}],"daemonWaitSeconds":1e1}\x00\x01';

    const run = await runShim({
      env: {
        ...addEnv(daemon.socketPath),
        ASAN_OPTIONS: 'abort_on_error=0:exitcode=98',
        UBSAN_OPTIONS: 'print_stacktrace=1',
      },
      stdin,
      command: [asanBinary],
    });

    assert.equal(run.code, 0, run.stderr);
    assert.equal(run.stderr, '');
    assert.equal(parseForwarded(onlyRequest(daemon)).stdin, stdin);
  });
});
