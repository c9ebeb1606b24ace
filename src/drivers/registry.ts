/** The drivers the daemon runs natively, chosen by the plugin `type` of a network's config. */
import { bridgeDriver } from './bridge';
import type { Driver } from './driver';

const builtIn: readonly Driver[] = [bridgeDriver];

export class DriverRegistry {
  private readonly byType = new Map<string, Driver>();
  constructor(drivers: readonly Driver[] = builtIn) {
    for (const d of drivers) this.byType.set(d.type, d);
  }
  get(type: string): Driver | undefined {
    return this.byType.get(type);
  }
  types(): string[] {
    return [...this.byType.keys()];
  }
}
