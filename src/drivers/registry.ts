/** The drivers the daemon runs natively, chosen by the plugin `type` of a network's config. */
import { bridgeDriver } from './bridge';
import type { Driver } from './driver';
import { hostDeviceDriver } from './host-device';
import { ipvlanDriver } from './ipvlan';
import { macvlanDriver } from './macvlan';
import { ptpDriver } from './ptp';
import { tapDriver } from './tap';
import { vxlanDriver } from './vxlan';

const builtIn: readonly Driver[] = [bridgeDriver, macvlanDriver, ipvlanDriver, hostDeviceDriver, tapDriver, vxlanDriver, ptpDriver];

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
