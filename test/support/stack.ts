/**
 * Which Kubernetes + containerd pair a run tests on: the one switch a developer or CI turns, $PLEXUS_STACK.
 * - `1.36` (the default): Kubernetes v1.36.3 of ../shared/k8s/v1.36/bin on containerd 2.1.9 of ../shared/containerd;
 * - `1.35` (the oldest pair): Kubernetes v1.35.6 of ../shared/k8s/v1.35/bin on the system's containerd (Debian
 *   bookworm's 1.6.20, on the PATH or in $PLEXUS_CONTAINERD_BIN).
 * $PLEXUS_K8S_BIN / $PLEXUS_K8S_VERSION (k8s-binaries.ts) and $PLEXUS_CONTAINERD (containerd.ts) still override one
 * half of the pair. docs/install.md, "Tested Kubernetes versions", has the matrix.
 */

/** Where a pair's containerd comes from: ../shared/containerd (decompressed), or the system's. */
export type RuntimeSource = 'shared' | 'system';

export interface TestedStack {
  /** The value of $PLEXUS_STACK that picks it. */
  readonly name: string;
  /** The Kubernetes minor of ../shared/k8s/v<minor>/bin. */
  readonly k8sMinor: string;
  readonly runtime: RuntimeSource;
  /** For messages and docs: "Kubernetes 1.36 + containerd 2 (../shared/containerd)". */
  readonly describe: string;
}

export const DEFAULT_STACK: TestedStack = {
  name: '1.36',
  k8sMinor: '1.36',
  runtime: 'shared',
  describe: 'Kubernetes 1.36 + containerd 2 of ../shared/containerd',
};

export const OLDEST_STACK: TestedStack = {
  name: '1.35',
  k8sMinor: '1.35',
  runtime: 'system',
  describe: "Kubernetes 1.35 + the system's containerd 1.6",
};

/** The pairs a run may ask for, the default first. */
export const TESTED_STACKS: readonly TestedStack[] = [DEFAULT_STACK, OLDEST_STACK];

export type StackChoice = { readonly stack: TestedStack } | { readonly stack?: undefined; readonly problem: string };

/** The pair this run asks for: $PLEXUS_STACK (default 1.36); a value naming no pair is a problem that lists them. */
export function chosenStack(env: NodeJS.ProcessEnv = process.env): StackChoice {
  const asked = env.PLEXUS_STACK?.trim().replace(/^v/, '');
  if (!asked) return { stack: DEFAULT_STACK };
  const stack = TESTED_STACKS.find((s) => s.name === asked);
  if (stack) return { stack };
  const names = TESTED_STACKS.map((s) => `${s.name} (${s.describe})`).join(', ');
  return { problem: `PLEXUS_STACK=${asked} names no tested pair; use one of ${names}` };
}

/** Whether this run is the older pair's pass (where what only the default pair can do skips, saying why). */
export const olderPass = (env: NodeJS.ProcessEnv = process.env): boolean =>
  chosenStack(env).stack?.name === OLDEST_STACK.name;
