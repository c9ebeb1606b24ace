/**
 * deploy/ as `kubectl apply -f deploy/` reads it: the ConfigMap is a valid plexusd config, the DaemonSet runs what the
 * image holds with the privileges, mounts and probes plexusd needs, under the service account the RBAC binds.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { parse as parseYaml, parseAllDocuments } from 'yaml';
import { loadDaemonConfig } from '../../src/node/config';
import { EXIT_MARGIN_SECONDS } from '../../src/node/shutdown';
import { splitHostPort } from '../../src/metrics/tcp';
import { ROOT } from '../support/daemon';

interface K8sObject {
  kind: string;
  metadata: { name: string; namespace?: string };
  [key: string]: unknown;
}
interface Mount {
  name: string;
  mountPath: string;
  mountPropagation?: string;
}
interface Container {
  name: string;
  image: string;
  command: string[];
  securityContext?: { privileged?: boolean };
  volumeMounts: Mount[];
  resources?: { requests?: Record<string, string>; limits?: Record<string, string> };
  readinessProbe?: { httpGet?: { host: string; port: number; path: string } };
  livenessProbe?: { httpGet?: { host: string; port: number; path: string } };
}
interface PodSpec {
  serviceAccountName?: string;
  hostNetwork?: boolean;
  priorityClassName?: string;
  tolerations?: { operator?: string; key?: string }[];
  terminationGracePeriodSeconds?: number;
  initContainers: Container[];
  containers: Container[];
  volumes: { name: string; hostPath?: { path: string }; configMap?: { name: string } }[];
}

const load = (dir: string): K8sObject[] =>
  readdirSync(dir)
    .filter((f) => f.endsWith('.yaml'))
    .sort()
    .flatMap((f) => parseAllDocuments(readFileSync(join(dir, f), 'utf8')).map((d) => d.toJSON() as K8sObject));
const objects = load(join(ROOT, 'deploy'));
const find = (kind: string, name: string): K8sObject => {
  const o = objects.find((x) => x.kind === kind && x.metadata.name === name);
  assert.ok(o, `deploy/ has no ${kind} ${name}`);
  return o;
};
const daemonSet = find('DaemonSet', 'plexus') as K8sObject & {
  spec: { template: { spec: PodSpec }; updateStrategy: { rollingUpdate: { maxSurge: number } } };
};
const pod = daemonSet.spec.template.spec;
const plexusd = pod.containers.find((c) => c.name === 'plexusd')!;
const configMap = find('ConfigMap', 'plexus') as K8sObject & { data: Record<string, string> };

/** plexusd's whole stop fits in --drain-seconds; the pod's grace period is that and the margin its exit needs. */
function assertOutlivesTheStop(drainSeconds: number, whose: string): void {
  const grace = pod.terminationGracePeriodSeconds ?? 30;
  const needed = drainSeconds + EXIT_MARGIN_SECONDS;
  assert.ok(
    grace >= needed,
    `grace period ${grace} s < ${whose}'s drainSeconds ${drainSeconds} + ${EXIT_MARGIN_SECONDS}`,
  );
}

describe('deploy/', () => {
  it('has the ConfigMap as a plexusd config that loads, with the mounted paths', () => {
    const dir = mkdtempSync(join(tmpdir(), 'plexus-manifest-'));
    try {
      const file = join(dir, 'plexusd.yaml');
      writeFileSync(file, configMap.data['plexusd.yaml']!);
      const loaded = loadDaemonConfig(['--config', file]);
      assert.equal(loaded.kind, 'config', JSON.stringify(loaded));
      const config = loaded.config;
      const mounted = (path: string): boolean =>
        plexusd.volumeMounts.some((m) => path === m.mountPath || path.startsWith(`${m.mountPath}/`));
      for (const path of [
        config.socket,
        config.stateDir,
        config.cniBinDir,
        config.cniConfDir,
        config.installCniConfig!,
        config.defaultNetwork!,
        config.cdiDir!,
      ])
        assert.ok(mounted(path), `${path} is not on a mount`);
      assert.equal(plexusd.command.join(' '), '/usr/local/bin/plexusd --config /etc/plexus/config/plexusd.yaml');
      assert.ok(
        plexusd.volumeMounts.some(
          (m) =>
            m.mountPath === '/etc/plexus/config' &&
            pod.volumes.find((v) => v.name === m.name)?.configMap?.name === 'plexus',
        ),
      );
      // The probes ask the TCP listener the ConfigMap opens.
      const { host, port } = splitHostPort(config.metricsAddress!);
      assert.deepEqual(plexusd.readinessProbe?.httpGet, { host, port, path: '/readyz' });
      assert.deepEqual(plexusd.livenessProbe?.httpGet, { host, port, path: '/healthz' });
      assertOutlivesTheStop(config.drainSeconds, 'the ConfigMap');
      const limitMib = Number(/^(\d+)Mi$/.exec(plexusd.resources?.limits?.memory ?? '')?.[1]);
      assert.ok(config.memoryCeilingMib! < limitMib, 'liveness restarts plexusd before the memory limit kills it');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("gives plexusd's stop its whole budget, at the default --drain-seconds too, before the kubelet kills it", () => {
    const defaults = loadDaemonConfig([]);
    assert.equal(defaults.kind, 'config');
    assertOutlivesTheStop(defaults.config.drainSeconds, 'the default');
  });

  it("runs on every node, first, with the host's network and the privileges plexusd needs", () => {
    assert.equal(daemonSet.metadata.namespace, 'kube-system');
    assert.equal(pod.hostNetwork, true);
    assert.equal(pod.priorityClassName, 'system-node-critical');
    assert.deepEqual(pod.tolerations, [{ operator: 'Exists' }]);
    assert.equal(plexusd.securityContext?.privileged, true);
    assert.equal(
      daemonSet.spec.updateStrategy.rollingUpdate.maxSurge,
      0,
      'two plexusd on one node would wait on each other',
    );
    assert.ok(plexusd.resources?.requests?.memory && plexusd.resources.limits?.memory);
  });

  it('mounts the host paths plexusd and the runtime share, the netns dir with HostToContainer', () => {
    const hostPathOf = (mount: string): string | undefined => {
      const m = plexusd.volumeMounts.find((v) => v.mountPath === mount);
      return pod.volumes.find((v) => v.name === m?.name)?.hostPath?.path;
    };
    // Same path inside and out: the runtime passes host paths (CNI_NETNS), and the default-network link points into /etc/cni/net.d.
    for (const path of [
      '/opt/cni/bin',
      '/etc/cni/net.d',
      '/run/plexus',
      '/var/lib/plexus',
      '/var/lib/cni/results',
      '/var/run/cdi', // a CDI spec dir of the runtime's: DRA's memif claims reach their containers through it
    ])
      assert.equal(hostPathOf(path), path);
    // The same directory through /var/run's symlink: a hostPath of /var/run/netns is refused where / is private.
    assert.equal(hostPathOf('/var/run/netns'), '/run/netns');
    assert.equal(
      plexusd.volumeMounts.find((m) => m.mountPath === '/var/run/netns')?.mountPropagation,
      'HostToContainer',
    );
  });

  it('installs before plexusd starts, with the paths plexusd reads', () => {
    const install = pod.initContainers.find((c) => c.name === 'install')!;
    assert.deepEqual(install.command, [
      '/usr/local/bin/plexus-install',
      'install',
      '--multus-daemon-config',
      '/etc/multus-daemon/daemon-config.json',
    ]);
    assert.equal(install.image, plexusd.image);
    for (const path of ['/opt/cni/bin', '/etc/cni/net.d', '/var/lib/plexus'])
      assert.ok(
        install.volumeMounts.some((m) => m.mountPath === path),
        path,
      );
  });

  it("gives the installer thick Multus's daemon config from Multus's ConfigMap, where there is one", () => {
    const install = pod.initContainers.find((c) => c.name === 'install')!;
    const mount = install.volumeMounts.find((m) => m.mountPath === '/etc/multus-daemon');
    const volume = pod.volumes.find((v) => v.name === mount?.name) as
      { configMap?: { name: string; optional?: boolean } } | undefined;
    assert.deepEqual(volume?.configMap, { name: 'multus-daemon-config', optional: true });
  });

  it('has plexusd read what the installer carried over from Multus, and leaves the takeover to the operator', () => {
    const settings = parseYaml(configMap.data['plexusd.yaml']!) as Record<string, unknown>;
    assert.equal(settings.importedConfig, '/var/lib/plexus/imported-config.json');
    assert.equal(settings.takeOverMultus, false);
  });

  it('runs under the service account the RBAC binds to the plexus ClusterRole', () => {
    assert.equal(pod.serviceAccountName, 'plexus');
    find('ServiceAccount', 'plexus');
    const binding = find('ClusterRoleBinding', 'plexus') as K8sObject & {
      subjects: { kind: string; name: string; namespace: string }[];
      roleRef: { name: string };
    };
    assert.deepEqual(binding.subjects, [{ kind: 'ServiceAccount', name: 'plexus', namespace: 'kube-system' }]);
    assert.equal(binding.roleRef.name, 'plexus');
  });

  it('has an uninstall DaemonSet of its own, outside deploy/', () => {
    const uninstall = load(join(ROOT, 'deploy/uninstall'));
    const ds = uninstall.find((o) => o.kind === 'DaemonSet') as
      (K8sObject & { spec: { template: { spec: PodSpec } } }) | undefined;
    assert.deepEqual(ds?.spec.template.spec.initContainers[0]?.command, ['/usr/local/bin/plexus-install', 'uninstall']);
    assert.ok(!objects.some((o) => o.metadata.name === 'plexus-uninstall'));
  });
});

it("keeps the CRDs in deploy/crds/: `kubectl delete -f deploy/` leaves them, and with them the users' NADs and pools", () => {
  assert.ok(!objects.some((o) => o.kind === 'CustomResourceDefinition'), 'no CRD directly in deploy/');
  const crds = load(join(ROOT, 'deploy', 'crds'))
    .filter((o) => o.kind === 'CustomResourceDefinition')
    .map((o) => o.metadata.name)
    .sort();
  assert.deepEqual(crds, [
    'ipamclaims.k8s.cni.cncf.io',
    'ipblocks.ipam.plexus.io',
    'ippools.ipam.plexus.io',
    'network-attachment-definitions.k8s.cni.cncf.io',
  ]);
});
