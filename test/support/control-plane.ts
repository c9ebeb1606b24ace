/**
 * kube-controller-manager and kube-scheduler as a real cluster runs them (../shared/k8s/NOTES.md section 2): each as
 * its own user, with its secure port, service-account credentials per controller and a cluster signer. The deploy
 * tests need this: the DaemonSet controller makes plexusd's pods, the scheduler places them, and in-cluster
 * clients get service-account tokens.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { closeSync, openSync } from 'node:fs';
import { join } from 'node:path';
import { k8sBinary } from './k8s-binaries';
import type { KubeApiFixture } from './k8s';
import { stopProcess } from './processes';

/** A component's own user for the API, for checking its callers, and its secure port on loopback. */
const identity = (kubeconfig: string, securePort: number): string[] => [
  `--kubeconfig=${kubeconfig}`,
  `--authentication-kubeconfig=${kubeconfig}`,
  `--authorization-kubeconfig=${kubeconfig}`,
  '--bind-address=127.0.0.1',
  `--secure-port=${securePort}`,
];

export class ClusterControlPlane {
  private readonly procs: ChildProcess[] = [];

  /** Starts both against `api`, with their logs and the controller-manager's serving certificate under `dir`. */
  start(api: KubeApiFixture, dir: string): void {
    const certs = join(api.dir, 'certs');
    const kcm = api.userKubeconfig('system:kube-controller-manager');
    this.spawn(dir, 'kube-controller-manager', [
      ...identity(kcm, 10257),
      `--cert-dir=${join(dir, 'kcm')}`,
      '--leader-elect=false',
      '--use-service-account-credentials=true',
      `--service-account-private-key-file=${join(certs, 'sa.key')}`,
      `--root-ca-file=${join(certs, 'ca.crt')}`,
      `--cluster-signing-cert-file=${join(certs, 'ca.crt')}`,
      `--cluster-signing-key-file=${join(certs, 'ca.key')}`,
      '--service-cluster-ip-range=10.244.240.0/20',
      '--controllers=*,-cloud-node-lifecycle,-service-lb-controller,-node-route-controller,-node-ipam-controller',
    ]);
    const sched = api.userKubeconfig('system:kube-scheduler');
    this.spawn(dir, 'kube-scheduler', [...identity(sched, 10259), '--leader-elect=false']);
  }

  /** Stops what `start` started, by PID, the last first. */
  async stop(): Promise<void> {
    for (const proc of this.procs.splice(0).reverse()) await stopProcess(proc);
  }

  private spawn(dir: string, name: 'kube-controller-manager' | 'kube-scheduler', args: string[]): void {
    const fd = openSync(join(dir, `${name}.log`), 'a');
    const proc = spawn(k8sBinary(name)!, args, { stdio: ['ignore', fd, fd] });
    closeSync(fd);
    proc.once('error', () => undefined);
    this.procs.push(proc);
  }
}
