/**
 * Everything a script creates on the host registers its own removal here, so one call (or Ctrl-C)
 * undoes it all in reverse order, continuing past individual failures.
 */

export type Undo = () => void | Promise<void>;

export class Teardown {
  private readonly steps: { readonly what: string; readonly undo: Undo }[] = [];
  private readonly stoppers: Undo[] = [];
  private running: Promise<string[]> | undefined;
  private readonly handleSignal = (signal: NodeJS.Signals): void => {
    process.stderr.write(`\n${signal}: cleaning up before exit...\n`);
    void (async () => {
      for (const stop of this.stoppers) await Promise.resolve(stop()).catch(() => undefined);
      return this.run();
    })().then((problems) => {
      for (const p of problems) process.stderr.write(`  cleanup: ${p}\n`);
      process.exit(signal === 'SIGINT' ? 130 : 143);
    });
  };

  /** Installs SIGINT/SIGTERM/SIGHUP handlers that clean up, then exit. */
  constructor() {
    for (const s of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) process.on(s, this.handleSignal);
  }

  /** Runs first when a signal arrives, before any undo step: stop the work that would create more. */
  onSignal(stop: Undo): void {
    this.stoppers.push(stop);
  }

  add(what: string, undo: Undo): void {
    this.steps.push({ what, undo });
  }

  /** Runs every registered step, last first, once; returns what went wrong. */
  run(): Promise<string[]> {
    this.running ??= (async () => {
      const problems: string[] = [];
      for (const step of this.steps.splice(0).reverse()) {
        try {
          await step.undo();
        } catch (thrown) {
          problems.push(`${step.what}: ${thrown instanceof Error ? thrown.message : String(thrown)}`);
        }
      }
      for (const s of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) process.off(s, this.handleSignal);
      return problems;
    })();
    return this.running;
  }
}
