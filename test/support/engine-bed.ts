/**
 * An engine for unit tests: the real plan, drivers, journal and IPAM in a temporary directory, on an in-memory
 * kernel (fake-kernel.ts), with three bridge networks (podnet, the default; blue; red). No root needed.
 */
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { CniCode, CniError } from '../../src/cni/errors';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { parseCniRequest } from '../../src/cni/request';
import { AttachmentEngine, type EnginePorts, type EngineSettings } from '../../src/engine/engine';
import { Journal } from '../../src/engine/journal';
import { DriverRegistry } from '../../src/drivers/registry';
import { Ipam } from '../../src/ipam';
import { NetworkDirectory } from '../../src/networks/directory';
import { FakeKernel } from './fake-kernel';

export interface EngineBed {
  readonly kernel: FakeKernel;
  readonly ipam: Ipam;
  readonly journal: Journal;
  readonly engine: AttachmentEngine;
  readonly dir: string;
  /** Another engine on the same kernel, journal and IPAM, with other settings or more ports (a status sink, say). */
  engineWith(changes: EngineChanges): AttachmentEngine;
  /** A pod's netns: a file the engine can stat, and a namespace in the fake kernel. */
  pod(name: string): string;
  /** Every lease, as "network container ifname". */
  leases(): Promise<string[]>;
  remove(): void;
}

/** What engineWith changes of the bed's engine. */
export interface EngineChanges {
  readonly settings?: Partial<EngineSettings>;
  readonly ports?: Omit<Partial<EnginePorts>, 'kernel' | 'ipam' | 'journal'>;
}

export async function engineBed(): Promise<EngineBed> {
  const dir = mkdtempSync(join(tmpdir(), 'plexus-engine-'));
  mkdirSync(join(dir, 'networks'));
  ['podnet', 'blue', 'red'].forEach((name, i) => {
    writeFileSync(
      join(dir, 'networks', `${name}.json`),
      JSON.stringify({
        apiVersion: 'k8s.cni.cncf.io/v1',
        kind: 'NetworkAttachmentDefinition',
        metadata: { name },
        spec: {
          config: JSON.stringify({
            cniVersion: '1.0.0',
            name,
            type: 'bridge',
            bridge: `br-${name}`,
            isGateway: true,
            ipam: { type: 'host-local', ranges: [[{ subnet: `10.9.${i}.0/24` }]] },
          }),
        },
      }),
    );
  });
  const kernel = new FakeKernel();
  const ipam = await Ipam.open(join(dir, 'ipam'), { sync: false });
  const journal = await Journal.open(join(dir, 'journal'), false);
  const engineWith = (changes: EngineChanges): AttachmentEngine =>
    new AttachmentEngine({
      ports: {
        kernel,
        ipam,
        journal,
        networks: new NetworkDirectory(join(dir, 'networks')),
        drivers: new DriverRegistry(),
        ...changes.ports,
      },
      settings: {
        cniBinDir: '/nonexistent',
        naming: 'multus',
        selectionAnnotation: true,
        defaultNetworks: [],
        defaultNetwork: 'podnet',
        ...changes.settings,
      },
      log: pino({ level: 'silent' }),
      // The fake kernel's namespaces are plain files: the real guard is tested on real namespaces.
      seams: {
        podNetnsProblem: (path) =>
          existsSync(path) ? undefined : new CniError(CniCode.InvalidEnvironment, `CNI_NETNS ${path} does not exist`),
      },
    });
  return {
    kernel,
    ipam,
    journal,
    dir,
    engineWith,
    engine: engineWith({}),
    pod: (name) => {
      const path = join(dir, `netns-${name}`);
      writeFileSync(path, '');
      kernel.createNetns(path);
      return path;
    },
    leases: async () => (await ipam.leases()).map((l) => `${l.network} ${l.containerId} ${l.ifname}`),
    remove: () => rmSync(dir, { recursive: true, force: true }),
  };
}

/** A CNI call as plexus-cni forwards it, for container `cid` in `netns`, selecting `networks` by annotation. */
export function cniCall(command: 'ADD' | 'DEL' | 'CHECK', cid: string, netns: string, networks = 'blue, red') {
  const parsed = parseCniRequest(forwardedCall(command, cid, netns, networks));
  if (!parsed.ok) throw parsed.error;
  return parsed.value as Parameters<AttachmentEngine['add']>[0];
}

export const forwardedCall = (command: string, cid: string, netns: string, networks = 'blue, red') => ({
  env: {
    CNI_COMMAND: command,
    CNI_CONTAINERID: cid,
    CNI_NETNS: netns,
    CNI_IFNAME: 'eth0',
    CNI_PATH: '/nonexistent',
    CNI_ARGS: `K8S_POD_NAMESPACE=default;K8S_POD_NAME=${cid}`,
  },
  stdin: JSON.stringify({
    cniVersion: '1.0.0',
    name: 'plexus',
    type: 'plexus-cni',
    runtimeConfig: { 'io.kubernetes.cri.pod-annotations': { 'k8s.v1.cni.cncf.io/networks': networks } },
  }),
});
