/**
 * Running the steps of Multus's e2e scenarios (multus-scenario-data.ts) on a ScenarioNode: what each `kubectl`
 * command of the scripts does, through the API, and what each `kubectl exec` reads, in the pod's network namespace
 * from the node (the pods run the pause image). A check answers what it found instead of throwing, so a scenario
 * reports every assertion, as the scripts print them.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { PAUSE_IMAGE } from './kube-node';
import type { ScenarioAction, ScenarioCheck } from './multus-scenario-data';
import type { ScenarioNode } from './scenario-node';
import { holdsWithin } from './until';

const NS = 'default';
const READY_MS = 120_000;
const DELETED_MS = 60_000;

export interface CheckOutcome {
  readonly passed: boolean;
  /** What was found, for the table and the failure message. */
  readonly found: string;
}

type ApiPod = {
  metadata: { name: string };
  status?: { phase?: string; conditions?: { type: string; status: string }[] };
};

/** The pods a scenario made, to be removed after it whatever happened. */
export class ScenarioPods {
  readonly api: string[] = [];
  readonly static: string[] = [];
  readonly nads: string[] = [];
  readonly chainFiles: string[] = [];
}

async function getPod(sn: ScenarioNode, name: string): Promise<ApiPod | undefined> {
  const r = await sn.node.call('GET', `/api/v1/namespaces/${NS}/pods/${name}`);
  return r.status === 200 ? (r.body as ApiPod) : undefined;
}

const isReady = (p: ApiPod | undefined): boolean =>
  p?.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false;

/** Does one `do` step; throws when it cannot (a step is not an assertion of the script). */
export async function runAction(sn: ScenarioNode, step: ScenarioAction, made: ScenarioPods): Promise<void> {
  const api = sn.node.api;
  switch (step.do) {
    case 'createNad': {
      const r = await api.createNad(NS, step.name, JSON.stringify(step.config));
      if (r.status !== 201) throw new Error(`creating NAD ${step.name}: ${r.status} ${JSON.stringify(r.body)}`);
      made.nads.push(step.name);
      return;
    }
    case 'deleteNad':
      await deleteNad(sn, step.name);
      return;
    case 'createPod': {
      const r = await sn.node.call('POST', `/api/v1/namespaces/${NS}/pods`, podObject(sn, step));
      if (r.status !== 201) throw new Error(`creating pod ${step.name}: ${r.status} ${JSON.stringify(r.body)}`);
      made.api.push(step.name);
      return;
    }
    case 'writeStaticPod':
      made.api.push(sn.node.writeStaticPod(step.name, step.annotations ?? {}));
      made.static.push(step.name);
      return;
    case 'removeStaticPod':
      sn.node.removeStaticPod(step.name);
      return;
    case 'writeChainFile': {
      const path = join(dirname(sn.clusterNetwork), step.path);
      mkdirSync(dirname(path), { recursive: true });
      writeFileSync(path, JSON.stringify(step.config));
      made.chainFiles.push(path);
      return;
    }
    case 'removeChainFile':
      rmSync(join(dirname(sn.clusterNetwork), step.path), { force: true });
      return;
    case 'setAuxiliaryChain':
      await sn.setAuxiliaryChain(step.name);
      return;
  }
}

const podObject = (
  sn: ScenarioNode,
  step: { name: string; labels?: Record<string, string>; annotations?: Record<string, string>; hostNetwork?: boolean },
): unknown => ({
  apiVersion: 'v1',
  kind: 'Pod',
  metadata: { name: step.name, labels: step.labels ?? {}, annotations: step.annotations ?? {} },
  spec: {
    nodeName: sn.node.nodeName,
    automountServiceAccountToken: false,
    enableServiceLinks: false,
    terminationGracePeriodSeconds: 1,
    ...(step.hostNetwork ? { hostNetwork: true } : {}),
    containers: [{ name: 'c', image: PAUSE_IMAGE, imagePullPolicy: 'Never' }],
  },
});

async function deleteNad(sn: ScenarioNode, name: string): Promise<void> {
  await sn.node.call('DELETE', `/apis/k8s.cni.cncf.io/v1/namespaces/${NS}/network-attachment-definitions/${name}`);
}

/** Runs in the pod's network namespace, from the node; answers stdout, or undefined when it fails. */
async function inPod(sn: ScenarioNode, pod: string, command: readonly string[]): Promise<string | undefined> {
  const netns = await sn.node.podNetns(NS, pod).catch(() => undefined);
  if (!netns) return undefined;
  const r = spawnSync('nsenter', [`--net=${netns}`, ...command], { encoding: 'utf8' });
  return r.status === 0 ? r.stdout : undefined;
}

const outcome = (passed: boolean, found: string): CheckOutcome => ({ passed, found });

const waitFor = (what: () => Promise<boolean>, timeoutMs: number): Promise<boolean> =>
  holdsWithin(what, timeoutMs, 250);

/** One check of a script, as it makes it. */
export async function runCheck(sn: ScenarioNode, c: ScenarioCheck): Promise<CheckOutcome> {
  switch (c.check) {
    case 'ready': {
      const ok = await waitFor(
        async () => (await Promise.all(c.pods.map((p) => getPod(sn, p)))).every(isReady),
        READY_MS,
      );
      return ok ? outcome(true, 'Ready') : outcome(false, await sn.node.describePods(NS, [...c.pods]));
    }
    case 'deleted': {
      // kubectl delete -f: every object deleted, then it waits until they are gone.
      for (const p of c.pods) await sn.node.call('DELETE', `/api/v1/namespaces/${NS}/pods/${p}`);
      const gone = async (): Promise<boolean> =>
        (await Promise.all(c.pods.map((p) => getPod(sn, p)))).every((p) => p === undefined);
      if (await waitFor(gone, DELETED_MS)) return outcome(true, 'gone');
      const left = (await Promise.all(c.pods.map((p) => getPod(sn, p)))).filter((p) => p !== undefined);
      return outcome(
        false,
        `still Terminating after ${DELETED_MS / 1000} s: ${left.map((p) => p.metadata.name).join(', ')}`,
      );
    }
    case 'link': {
      const out = await inPod(sn, c.pod, ['ip', '-o', 'link', 'show', 'dev', c.interface]);
      return out ? outcome(true, c.interface) : outcome(false, `no ${c.interface}`);
    }
    case 'ipv4': {
      const out = await inPod(sn, c.pod, ['ip', '-j', 'addr', 'show']);
      type Link = { ifname: string; addr_info?: { family: string; local: string }[] };
      const links = JSON.parse(out ?? '[]') as Link[];
      const found = links
        .filter((l) => l.ifname === c.interface)
        .flatMap((l) => l.addr_info ?? [])
        .filter((a) => a.family === 'inet')
        .map((a) => a.local);
      return outcome(found.join(' ') === c.want, found.join(' ') || 'none');
    }
    case 'defaultGateway': {
      const out = await inPod(sn, c.pod, ['ip', '-j', 'route']);
      const routes = JSON.parse(out ?? '[]') as { dst: string; gateway?: string; dev?: string }[];
      const found = routes.filter((r) => r.dst === 'default').map((r) => `${r.gateway ?? '-'} dev ${r.dev ?? '-'}`);
      const gateways = routes.filter((r) => r.dst === 'default').map((r) => r.gateway);
      return outcome(gateways.join(' ') === c.want, found.join(', ') || 'none');
    }
    case 'sysctl': {
      const out = await inPod(sn, c.pod, ['cat', `/proc/sys/${c.key.replaceAll('.', '/')}`]);
      return outcome(out?.trim() === c.want, out?.trim() ?? 'unreadable');
    }
    case 'binary':
      return outcome(existsSync(join(sn.binDir, c.name)), existsSync(join(sn.binDir, c.name)) ? 'found' : 'missing');
  }
}

/**
 * Removes what a scenario made, whatever happened to it: static pods' manifests, pods (forced when they hang
 * Terminating, so the next scenario starts clean), NADs, chained files; then waits for their sandboxes to stop.
 */
export async function removeScenario(sn: ScenarioNode, made: ScenarioPods): Promise<void> {
  for (const s of made.static) sn.node.removeStaticPod(s);
  for (const p of made.api) await sn.node.call('DELETE', `/api/v1/namespaces/${NS}/pods/${p}`);
  const gone = async (): Promise<boolean> =>
    (await Promise.all(made.api.map((p) => getPod(sn, p)))).every((p) => p === undefined);
  if (!(await waitFor(gone, DELETED_MS)))
    for (const p of made.api)
      await sn.node.call('DELETE', `/api/v1/namespaces/${NS}/pods/${p}?gracePeriodSeconds=0`, {
        kind: 'DeleteOptions',
        apiVersion: 'v1',
        gracePeriodSeconds: 0,
      });
  for (const n of made.nads) await deleteNad(sn, n);
  for (const f of made.chainFiles) rmSync(f, { force: true });
  const stopped = async (): Promise<boolean> =>
    !(await sn.node.sandboxes()).some((s) => s.ready && made.api.includes(s.name));
  await waitFor(stopped, DELETED_MS);
}

/** The IPv4 default routes of a pod, as `ip -j route` lists them. */
export function defaultRoutes(netns: string): { gateway?: string; dev?: string }[] {
  const out = execFileSync('nsenter', [`--net=${netns}`, 'ip', '-j', 'route'], { encoding: 'utf8' });
  return (JSON.parse(out) as { dst: string; gateway?: string; dev?: string }[]).filter((r) => r.dst === 'default');
}
