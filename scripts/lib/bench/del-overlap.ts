/**
 * The DEL sections' safety check while the bench runs: a child process (del-overlap-sampler.ts, at nice 19) samples
 * every bench netns for an address on two interfaces. With DEL answered before the links are gone, this must stay 0:
 * an address is released only once every link that carried it is gone.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import type { Teardown } from '../teardown';
import type { OverlapFigures } from './del-overlap-sampler';

export type { OverlapFigures } from './del-overlap-sampler';

export class AddressOverlapCheck {
  private readonly child: ChildProcess;
  private readonly output: Promise<string>;

  constructor(teardown: Teardown, prefix: string, intervalMs = 250) {
    this.child = spawn(
      'nice',
      ['-n', '19', process.execPath, join(__dirname, 'del-overlap-sampler.js'), prefix, String(intervalMs)],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    let text = '';
    this.child.stdout?.on('data', (c: Buffer) => (text += c.toString()));
    this.output = new Promise((resolve) => this.child.on('exit', () => resolve(text)));
    teardown.add('stop the address overlap check', () => void this.child.kill('SIGKILL'));
  }

  /** Stops the sampler and answers what it saw. */
  async stop(): Promise<OverlapFigures> {
    this.child.kill('SIGTERM');
    const text = await this.output;
    try {
      return JSON.parse(text) as OverlapFigures;
    } catch {
      return {
        samples: 0,
        mostNetns: 0,
        overlaps: 0,
        examples: [`the sampler said nothing usable: ${text.slice(0, 200)}`],
      };
    }
  }
}
