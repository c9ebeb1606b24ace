/** The delegate driver's undo step: a delegated plugin's DEL, with the very config bytes and environment of its ADD. */
import { z } from 'zod';
import { readStepData } from '../common/step-data';
import { driverStep, stepKind, stepsOf, type DriverStepKind, type DriverStepKinds, type UndoStep } from '../driver';
import { runDelegateDel, type DelegateDelStep, type ExecOptions } from './exec';

const V = 1;
const DRIVER = 'delegate';
const text = z.string();
const schema = z.looseObject({
  plugin: z.string().min(1),
  config: text,
  env: z.looseObject({ containerId: text, netns: text, ifname: text, args: text, path: text }),
});

const delegateDelKind = (opts: ExecOptions): DriverStepKind<DelegateDelStep> => ({
  v: V,
  read: (data, v) => readStepData<DelegateDelStep>(schema, data, v, V, 'delegate delegateDel'),
  run: (step) => runDelegateDel(step, opts),
  describe: (step) => `DEL via ${step.plugin} for ${step.env.containerId}/${step.env.ifname}`,
});

/** The step kinds of a delegate driver whose plugins run with `opts` (its exec limits). */
export const delegateStepKinds = (opts: ExecOptions): DriverStepKinds => ({
  delegateDel: stepKind(delegateDelKind(opts)),
});

export const delegateDelStep = (step: DelegateDelStep): UndoStep => driverStep(DRIVER, 'delegateDel', V, step);

/** The plugin invocations among recorded steps, in the order recorded (an attachment's, for CHECK). */
export const invocationsIn = (steps: readonly UndoStep[]): DelegateDelStep[] =>
  stepsOf(steps, DRIVER, 'delegateDel', delegateDelKind({}));
