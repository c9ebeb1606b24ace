/**
 * A real plexusd with --dra (a real kube-apiserver, no kubelet) started over each bad entry of
 * `<state-dir>/dra/claims`: it becomes ready, its socket answers, and its log names the entry. plexusd runs under an
 * address-space limit, so that a regression (a record read without a bound) fails here rather than on the machine.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, truncateSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { DaemonFixture, getJson } from '../support/daemon';
import { k8sMissing, KubeApiFixture, podnetBridge } from '../support/k8s';
import { uniquePrefix } from '../support/netns';
import { expectedPrerequisites } from '../support/prerequisites';

const prefix = uniquePrefix('ddr');
const NODE = `${prefix}-node`;
const ADDRESS_SPACE_LIMIT = 3 * 1024 * 1024 * 1024;

/** A record as Prepare writes it, of claim `uid`. */
const record = (uid: string): string =>
  JSON.stringify({
    v: 1,
    uid,
    namespace: 'default',
    name: `claim-${uid}`,
    pods: [],
    devices: [],
    preparedAt: '2026-11-27T00:00:00.000Z',
  });

/** Each bad entry: what it is, how it is made at `claims` (the directory, made unless `claimsIsTheEntry`), its name. */
const CASES: readonly { what: string; make: (claims: string) => void; named: string; claimsIsTheEntry?: boolean }[] = [
  { what: 'a FIFO', make: (c) => execFileSync('mkfifo', [join(c, 'uid-fifo.json')]), named: 'uid-fifo.json' },
  {
    what: 'a directory named *.json.tmp',
    make: (c) => mkdirSync(join(c, 'uid-dir.json.tmp')),
    named: 'uid-dir.json.tmp',
  },
  {
    what: 'claims a regular file',
    make: (c) => writeFileSync(c, 'not a directory'),
    named: 'claims',
    claimsIsTheEntry: true,
  },
  {
    what: 'a symlink to /dev/zero',
    make: (c) => symlinkSync('/dev/zero', join(c, 'uid-zero.json')),
    named: 'uid-zero.json',
  },
  {
    what: 'a record of 300 MB',
    make: (c) => {
      writeFileSync(join(c, 'uid-big.json'), '');
      truncateSync(join(c, 'uid-big.json'), 300 * 1024 * 1024);
    },
    named: 'uid-big.json',
  },
  {
    what: 'a record under another name than its claim UID',
    make: (c) => writeFileSync(join(c, 'renamed.json'), record('uid-real')),
    named: 'renamed.json',
  },
];

describe(
  'plexusd with --dra over a bad entry in <state-dir>/dra/claims',
  { skip: expectedPrerequisites(k8sMissing()) },
  () => {
    let api: KubeApiFixture;
    let work: string;

    before(async () => {
      work = mkdtempSync(join(tmpdir(), 'plexus-dra-records-'));
      writeFileSync(
        join(work, 'resources.yaml'),
        `resources:\n  - name: plexus.io/memif\n    kind: memif\n    count: 2\n    socketDir: ${join(work, 'memif')}\n    offer: [dra]\n`,
      );
      api = await KubeApiFixture.start();
      await api.installNadCrd();
      await api.grantPlexusRbac('plexus');
      const nad = await api.createNad('default', 'podnet', podnetBridge(`${prefix}b0`, '10.251.7.0/24'));
      assert.equal(nad.status, 201);
    });
    after(async () => {
      await api?.stop();
      if (work) rmSync(work, { recursive: true, force: true });
    });

    for (const { what, make, named, claimsIsTheEntry } of CASES) {
      it(`${what}: plexusd starts, its socket answers, and the log names the entry`, async () => {
        const kubelet = mkdtempSync(join(work, 'kubelet-'));
        const daemon = new DaemonFixture('podnet', {
          kubeconfig: api.userKubeconfig('plexus'),
          nodeName: NODE,
          dra: true,
          devicePluginConfig: join(work, 'resources.yaml'),
          kubeletRootDir: kubelet,
          cdiDir: join(kubelet, 'cdi'),
          devicePluginDir: join(kubelet, 'device-plugins'),
          podResourcesSocket: join(kubelet, 'pod-resources', 'kubelet.sock'),
          deviceInfoDir: join(kubelet, 'devinfo'),
        });
        daemon.launcher = ['prlimit', `--as=${ADDRESS_SPACE_LIMIT}`, '--'];
        try {
          const claims = join(daemon.stateDir, 'dra', 'claims');
          mkdirSync(claimsIsTheEntry ? join(daemon.stateDir, 'dra') : claims, { recursive: true });
          make(claims);
          await daemon.start(30000);
          const ready = await getJson(daemon.socket, '/readyz');
          assert.equal(ready.status, 200);
          const status = await getJson(daemon.socket, '/v1/attachments');
          assert.equal(status.status, 200, 'the socket answers');
          assert.match(
            daemon.stderr,
            new RegExp(`${claims.replace(/\./g, '\\.')}${claimsIsTheEntry ? '' : `/${named}`}`),
          );
        } finally {
          await daemon.stop();
        }
      });
    }
  },
);
