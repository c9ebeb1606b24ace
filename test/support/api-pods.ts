/**
 * Pods in a real API server for plexusd tests without a kubelet: the pod object on the daemon's node (so plexusd's
 * cache has it), a network namespace as its sandbox, CNI_ARGS with its real UID; and readers for what plexusd writes
 * back (network-status, events).
 */
import assert from 'node:assert/strict';
import { chmodSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { type DaemonFixture, podCall, type ShimOutput, type TestPod } from './daemon';
import type { KubeApiFixture } from './k8s';
import { DEBIAN_PLUGINS, referencePluginDir } from './plugin-dir';

export interface ApiPod {
  readonly pod: TestPod;
  readonly uid: string;
  /** CNI_ARGS as containerd passes them for this pod. */
  readonly args: string;
}
export interface StatusEntry {
  name: string;
  interface: string;
  ips: string[];
  mac: string;
  default?: true;
  gateway?: string[];
}
export interface ApiEvent {
  type: string;
  reason: string;
  message: string;
  count: number;
  involvedObject: { uid?: string };
}
interface Meta {
  metadata: { uid: string; annotations?: Record<string, string> };
}

/** ADD, DEL or CHECK of an API pod as containerd sends it: its own CNI_ARGS; the daemon's config at 1.0.0 by default. */
export function apiPodCall(
  daemon: DaemonFixture,
  command: 'ADD' | 'DEL' | 'CHECK',
  p: Pick<ApiPod, 'pod' | 'args'>,
  config: Record<string, unknown> = daemon.runtimeConfig({}, '1.0.0'),
): Promise<ShimOutput> {
  return podCall(daemon, command, p.pod, config, { args: p.args });
}

export class ApiPods {
  constructor(
    private readonly api: KubeApiFixture,
    private readonly node: string,
    private readonly newPod: () => TestPod,
  ) {}

  async create(name: string, annotations: Record<string, string>, namespace = 'default'): Promise<ApiPod> {
    const made = await this.api.createPod(namespace, name, { annotations, nodeName: this.node });
    assert.equal(made.status, 201, JSON.stringify(made.body));
    const uid = (made.body as Meta).metadata.uid;
    const pod = this.newPod();
    return {
      pod,
      uid,
      args: `IgnoreUnknown=1;K8S_POD_NAMESPACE=${namespace};K8S_POD_NAME=${name};K8S_POD_INFRA_CONTAINER_ID=${pod.cid};K8S_POD_UID=${uid}`,
    };
  }

  async annotations(namespace: string, name: string): Promise<Record<string, string>> {
    return (
      ((await this.api.request('GET', `/api/v1/namespaces/${namespace}/pods/${name}`)).body as Meta).metadata
        .annotations ?? {}
    );
  }

  /** Sets one annotation by merge patch, as `kubectl annotate --overwrite` does. */
  async annotate(namespace: string, name: string, key: string, value: string): Promise<void> {
    const r = await this.api.request(
      'PATCH',
      `/api/v1/namespaces/${namespace}/pods/${name}`,
      { metadata: { annotations: { [key]: value } } },
      'application/merge-patch+json',
    );
    assert.equal(r.status, 200, JSON.stringify(r.body));
  }

  /** The pod's network-status once `until` accepts it (default: once it is written), or the last one read. */
  async status(
    namespace: string,
    name: string,
    until: (s: StatusEntry[]) => boolean = (s) => s.length > 0,
    tries = 200,
  ): Promise<StatusEntry[]> {
    let status: StatusEntry[] = [];
    for (let i = 0; i < tries; i++) {
      const text = (await this.annotations(namespace, name))['k8s.v1.cni.cncf.io/network-status'];
      status = text ? (JSON.parse(text) as StatusEntry[]) : [];
      if (until(status)) return status;
      await sleep(50);
    }
    return status;
  }

  /** The pod's events once `until` accepts them, or the last ones read. */
  async events(namespace: string, name: string, until: (events: ApiEvent[]) => boolean): Promise<ApiEvent[]> {
    let events: ApiEvent[] = [];
    for (let i = 0; i < 200; i++) {
      events = (
        (
          await this.api.request(
            'GET',
            `/api/v1/namespaces/${namespace}/events?fieldSelector=involvedObject.name=${name}`,
          )
        ).body as { items: ApiEvent[] }
      ).items;
      if (until(events)) return events;
      await sleep(50);
    }
    return events;
  }
}

/**
 * A private CNI plugin directory: the reference plugins, and "slow", the bridge plugin after a second's sleep (an ADD
 * or a hot-plug to race with). The caller removes it.
 */
export function pluginDirWithSlowBridge(): string {
  const dir = mkdtempSync(join(tmpdir(), 'plexus-bin-'));
  referencePluginDir(dir);
  writeFileSync(join(dir, 'slow'), `#!/bin/sh\nsleep 1\nexec ${DEBIAN_PLUGINS}/bridge "$@"\n`);
  chmodSync(join(dir, 'slow'), 0o755);
  return dir;
}
