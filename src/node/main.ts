/**
 * plexusd: the Plexus node daemon. It starts in steps (startup.ts: the node's state, the API, devices and drivers, the
 * engine, the socket), serves until SIGTERM or SIGINT, then drains and stops what it started, the last first.
 */
import pino from 'pino';
import { loadDaemonConfig, USAGE, type DaemonConfig } from './config';
import { startDaemon } from './startup';

async function main(): Promise<number> {
  const config = parseFlags(process.argv.slice(2));
  if (typeof config === 'number') return config;
  const log = pino({ level: config.logLevel, base: { svc: 'plexusd' } }, pino.destination(2));
  const daemon = await startDaemon(config, log);
  if (!daemon) return 1;
  await stopSignal(log);
  await daemon.stop();
  return 0;
}

/** The daemon's config, or the exit code after --help (0) or a flag it cannot use (2). */
function parseFlags(argv: readonly string[]): DaemonConfig | number {
  const outcome = loadDaemonConfig([...argv]);
  if (outcome.kind === 'help') {
    process.stdout.write(`${USAGE}\n`);
    return 0;
  }
  if (outcome.kind === 'error') {
    process.stderr.write(`plexusd: ${outcome.message}\n${USAGE}\n`);
    return 2;
  }
  return outcome.config;
}

function stopSignal(log: pino.Logger): Promise<void> {
  return new Promise<void>((resolve) => {
    const stop = (signal: string): void => {
      log.info({ signal }, 'stopping');
      resolve();
    };
    process.once('SIGTERM', () => stop('SIGTERM'));
    process.once('SIGINT', () => stop('SIGINT'));
  });
}

main().then(
  (code) => process.exit(code),
  (e: unknown) => {
    process.stderr.write(`plexusd: fatal: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
    process.exit(1);
  },
);
