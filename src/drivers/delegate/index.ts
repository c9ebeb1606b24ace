export { buildPluginConfig, declaredCapabilities } from './config';
export {
  DEFAULT_TIMEOUT_MS,
  delegateCheck,
  delegateGc,
  delegateStatus,
  execPlugin,
  findPlugin,
  runDelegateDel,
  type DelegateDelStep,
  type DelegateEnv,
  type DelegateInvocation,
  type ExecOptions,
} from './exec';
export { DEFAULT_EXEC_LIMITS, ExecLimits, type ExecLimitsOptions } from './exec-limits';
export { PluginPidFiles } from './plugin-pid-files';
export { PluginProcesses, type StoppedPlugins } from './plugin-processes';
export { parseCniResult, parsePluginError } from './result';
export { delegateDelStep, invocationsIn } from './undo';
export { createDelegateDriver } from './delegate-driver';
