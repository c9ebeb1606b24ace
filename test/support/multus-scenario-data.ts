/**
 * Multus v4.3.0's own e2e scenarios as data (test/fixtures/multus-e2e/, one file per `e2e/test-*.sh`): the objects each
 * script creates and every check it makes, in its order. Read and validated here, with the placeholders a single
 * local node forces filled in (the fixtures' README.md says which and why).
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { z } from 'zod';
import { ROOT } from './daemon';

export const SCENARIO_DIR = join(ROOT, 'test/fixtures/multus-e2e');

const names = z.array(z.string().min(1)).min(1);
const says = z.string().min(1);
/** A check the script only prints the failure of (it goes on and exits 0). */
const printedOnly = z.boolean().optional();
const object = z.record(z.string(), z.unknown());
const labels = z.record(z.string(), z.string()).optional();

const action = z.discriminatedUnion('do', [
  z.object({ do: z.literal('createNad'), name: z.string(), config: object }),
  z.object({ do: z.literal('deleteNad'), name: z.string() }),
  z.object({
    do: z.literal('createPod'),
    name: z.string(),
    labels,
    annotations: labels,
    hostNetwork: z.boolean().optional(),
  }),
  z.object({ do: z.literal('writeStaticPod'), name: z.string(), annotations: labels }),
  z.object({ do: z.literal('removeStaticPod'), name: z.string(), pods: names }),
  z.object({ do: z.literal('writeChainFile'), path: z.string(), config: object }),
  z.object({ do: z.literal('removeChainFile'), path: z.string() }),
  z.object({ do: z.literal('setAuxiliaryChain'), name: z.string() }),
]);

const check = z.discriminatedUnion('check', [
  z.object({ check: z.literal('ready'), pods: names, says }),
  z.object({ check: z.literal('deleted'), pods: names, says }),
  z.object({ check: z.literal('link'), pod: z.string(), interface: z.string(), says, printedOnly }),
  z.object({ check: z.literal('ipv4'), pod: z.string(), interface: z.string(), want: z.string(), says, printedOnly }),
  z.object({ check: z.literal('defaultGateway'), pod: z.string(), want: z.string(), says, printedOnly }),
  z.object({ check: z.literal('sysctl'), pod: z.string(), key: z.string(), want: z.string(), says, printedOnly }),
  z.object({ check: z.literal('binary'), name: z.string(), says, printedOnly }),
]);

const scenario = z.object({
  scenario: z.string(),
  source: names,
  translated: z.array(z.string()),
  steps: z.array(z.union([action, check])).min(1),
});

export type ScenarioAction = z.infer<typeof action>;
export type ScenarioCheck = z.infer<typeof check>;
export type ScenarioStep = ScenarioAction | ScenarioCheck;
export type Scenario = z.infer<typeof scenario>;

/** What fills the placeholders: `{{ CNI_VERSION }}`, `{{ MASTER }}`, `{{ BRIDGE }}`, `{{ NODE }}`. */
export interface ScenarioPlaceholders {
  readonly cniVersion: string;
  readonly master: string;
  readonly bridge: string;
  readonly node: string;
}

const fill = (text: string, p: ScenarioPlaceholders): string =>
  text
    .replaceAll('{{ CNI_VERSION }}', p.cniVersion)
    .replaceAll('{{ MASTER }}', p.master)
    .replaceAll('{{ BRIDGE }}', p.bridge)
    .replaceAll('{{ NODE }}', p.node);

/** Every scenario file, in name order (Multus's CI order), placeholders filled. Throws naming a file that is wrong. */
export function loadScenarios(p: ScenarioPlaceholders, dir = SCENARIO_DIR): Scenario[] {
  return readdirSync(dir)
    .filter((f) => f.endsWith('.json'))
    .sort()
    .map((f) => {
      const parsed = scenario.safeParse(JSON.parse(fill(readFileSync(join(dir, f), 'utf8'), p)));
      if (!parsed.success) throw new Error(`${join(dir, f)}: ${parsed.error.message}`);
      return parsed.data;
    });
}

export const isCheck = (s: ScenarioStep): s is ScenarioCheck => 'check' in s;

/** The words of the table: what a check is, as docs/migrate-from-multus.md lists it. */
export function describeCheck(c: ScenarioCheck): string {
  switch (c.check) {
    case 'ready':
      return `${c.pods.join(', ')} Ready`;
    case 'deleted':
      return `${c.pods.join(', ')} deleted (gone from the API)`;
    case 'link':
      return `${c.pod} has ${c.interface}`;
    case 'ipv4':
      return `${c.pod} ${c.interface} has ${c.want}`;
    case 'defaultGateway':
      return `${c.pod}: default route via ${c.want} only`;
    case 'sysctl':
      return `${c.pod}: ${c.key} = ${c.want}`;
    case 'binary':
      return `${c.name} in the CNI bin dir`;
  }
}
