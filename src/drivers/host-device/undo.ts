/** The host-device driver's undo step: the device goes back from the pod to the host under its original name. */
import { z } from 'zod';
import type { KernelPort } from '../../kernel/kernel';
import { readStepData } from '../common/step-data';
import { driverStep, type DriverStepKind, type DriverUndoStep } from '../driver';
import { returnLinkToHost } from './return-link';
import type { ReturnLinkStep } from './return-link';

export type { ReturnLinkStep };

const V = 1;
const name = z.string().min(1);
const schema = z.looseObject({
  netns: name,
  name,
  hostName: name,
  mac: z.string().optional(),
  up: z.boolean().optional(),
});

export const returnLinkKind: DriverStepKind<ReturnLinkStep> = {
  v: V,
  read: (data, v) => readStepData<ReturnLinkStep>(schema, data, v, V, 'host-device returnLink'),
  run: (step, { kernel }: { kernel: KernelPort }) => returnLinkToHost(step, kernel),
  describe: (step) => `return ${step.name} from ${step.netns} to the host as ${step.hostName}`,
};

export const returnLinkStep = (step: ReturnLinkStep): DriverUndoStep =>
  driverStep('host-device', 'returnLink', V, step);
