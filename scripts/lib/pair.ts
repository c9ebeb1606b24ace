/**
 * Which pair a benchmark ran on (Kubernetes and containerd, chosen by $PLEXUS_STACK, test/support/stack.ts, one half
 * overridden by PLEXUS_K8S_BIN / PLEXUS_K8S_VERSION or PLEXUS_CONTAINERD) and which reference plugins it compared against, each read from the binaries
 * themselves, so a table says what it measured and nobody has to remember which env vars were set.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { containerdBinary } from '../../test/support/containerd';
import { k8sBinDir, k8sVersion } from '../../test/support/k8s-binaries';
import { referencePluginsDir } from '../../test/support/plugin-dir';
import { table } from './stats';

export interface RunPair {
  /** As kube-apiserver --version prints it ("v1.36.3"), with the directory it came from. */
  readonly kubernetes: string;
  /** As containerd --version prints it ("2.1.9+unknown"), with the binary's path. */
  readonly containerd: string;
  /** What the reference bridge plugin says of itself, and where the plugins came from. */
  readonly referencePlugins: string;
}

const firstLine = (text: string): string => text.trim().split('\n')[0] ?? '';

function kubernetesOf(): string {
  try {
    const v = k8sVersion();
    return v ? `${v.text} (${k8sBinDir().source})` : `none (${k8sBinDir().problem ?? 'no kube-apiserver'})`;
  } catch (e) {
    return `unreadable: ${(e as Error).message}`;
  }
}

function containerdOf(): string {
  const bin = containerdBinary('containerd');
  if (!bin) return 'none (not installed)';
  // "containerd github.com/containerd/containerd/v2 2.1.9+unknown <revision>": the third word is the version.
  const printed = firstLine(execFileSync(bin, ['--version'], { encoding: 'utf8' }));
  return `${printed.split(/\s+/)[2] ?? printed} (${bin})`;
}

/**
 * The bridge plugin run with no CNI_COMMAND prints its own version (Debian's builds say "version unknown") and the CNI
 * versions it speaks; its Go build info names the toolchain. Both, and the source the plugins were unpacked from.
 */
function referencePluginsOf(): string {
  const where = referencePluginsDir();
  if (!where.dir) return `none (${where.problem ?? 'missing'})`;
  const bridge = join(where.dir, 'bridge');
  const r = spawnSync(bridge, [], { encoding: 'utf8', env: {}, timeout: 10_000 });
  const said = `${r.stdout}${r.stderr}`;
  const own = /plugin (version \S+|v\S+)/.exec(said)?.[1] ?? 'no version';
  const protocols = /supported: (.*)/.exec(said)?.[1]?.split(', ') ?? [];
  const spoken = protocols.length ? `CNI ${protocols[0]}-${protocols.at(-1)}` : 'no CNI versions printed';
  const go = /go1\.\d+(\.\d+)?/.exec(readFileSync(bridge).toString('latin1'))?.[0] ?? 'Go version unknown';
  return `${where.source}: bridge says ${own}, ${spoken}, ${go}`;
}

export const runPair = (): RunPair => ({
  kubernetes: kubernetesOf(),
  containerd: containerdOf(),
  referencePlugins: referencePluginsOf(),
});

/** The pair as a table (plain text, or Markdown with stats' markdownTable), for the head of a report. */
export const pairTable = (p: RunPair, render: typeof table = table): string =>
  render(
    ['ran on', 'version, read from the binary'],
    [
      ['Kubernetes', p.kubernetes],
      ['containerd', p.containerd],
      ['reference plugins', p.referencePlugins],
    ],
  );

/** The pair on one line, for a log's first lines. */
export const describePair = (p: RunPair): string =>
  `Kubernetes ${p.kubernetes}; containerd ${p.containerd}; reference plugins ${p.referencePlugins}`;
