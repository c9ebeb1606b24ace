/**
 * The memif driver's undo steps. A port keeps everything it was made with, so a switch that lost its ports (restarted
 * with an empty database) gets them back from the journal (resync.ts); a socket directory is removed only when Plexus
 * made it (not one a kubelet device owns).
 */
import { rm } from 'node:fs/promises';
import { z } from 'zod';
import { CniCode, CniError, err, ok, type Result } from '../../cni/errors';
import { readStepData } from '../common/step-data';
import { driverStep, stepKind, stepsOf, type DriverStepKind, type DriverStepKinds, type UndoStep } from '../driver';
import type { MemifSwitches } from './switch';
import type { SwitchPortStep } from './switch';
import { errorMessage } from '../../common/error-message';

export type { SwitchPortStep };

const V = 1;
const DRIVER = 'memif';
const name = z.string().min(1);
const portSchema = z.looseObject({
  ovsdb: name,
  bridge: name,
  port: name,
  devargs: z.string(),
  rxQueues: z.number(),
  externalIds: z.record(z.string(), z.string()),
});
const dirSchema = z.looseObject({ path: name });

const switchPortKind = (switches: MemifSwitches): DriverStepKind<SwitchPortStep> => ({
  v: V,
  read: (data, v) => readStepData<SwitchPortStep>(portSchema, data, v, V, 'memif deleteSwitchPort'),
  run: (step) => switches.remove(step),
  describe: (step) => `remove port ${step.port} from switch bridge ${step.bridge}`,
});

const socketDirKind: DriverStepKind<{ readonly path: string }> = {
  v: V,
  read: (data, v) => readStepData<{ path: string }>(dirSchema, data, v, V, 'memif removeSocketDir'),
  run: (step) => removeSocketDir(step.path),
  describe: (step) => `remove socket directory ${step.path}`,
};

/** The step kinds of a memif driver whose ports live on `switches`. */
export const memifStepKinds = (switches: MemifSwitches): DriverStepKinds => ({
  deleteSwitchPort: stepKind(switchPortKind(switches)),
  removeSocketDir: stepKind(socketDirKind),
});

export const switchPortStep = (step: SwitchPortStep): UndoStep => driverStep(DRIVER, 'deleteSwitchPort', V, step);
export const socketDirStep = (path: string): UndoStep => driverStep(DRIVER, 'removeSocketDir', V, { path });

/** The ports among recorded steps (any version this build reads). */
export const switchPortsIn = (steps: readonly UndoStep[], switches: MemifSwitches): SwitchPortStep[] =>
  stepsOf(steps, DRIVER, 'deleteSwitchPort', switchPortKind(switches));

async function removeSocketDir(path: string): Promise<Result<void>> {
  try {
    await rm(path, { recursive: true, force: true });
    return ok(undefined);
  } catch (e) {
    return err(new CniError(CniCode.IoFailure, `cannot remove memif socket directory ${path}: ${errorMessage(e)}`));
  }
}
