/**
 * The engine as the API side sees it before it exists. The engine is built after the API connection (it takes the
 * connection's StatusSink), while hot-plug and the network-status keeper are built with the connection: they get
 * this plug, and src/node/main.ts plugs the engine in once, before the connection starts.
 */
import type { NetworkChanger } from './hotplug';
import type { StatusRecords } from './status-keeper';

/** What the API side calls on the engine. */
export type ApiEngine = NetworkChanger & StatusRecords;

export class EnginePlug implements ApiEngine {
  private engine: ApiEngine | undefined;

  plug(engine: ApiEngine): void {
    if (this.engine !== undefined) throw new Error('the engine is already plugged into the API connection');
    this.engine = engine;
  }

  private get plugged(): ApiEngine {
    if (this.engine === undefined) {
      throw new Error('the API connection was used before the engine was plugged in (src/node/main.ts)');
    }
    return this.engine;
  }

  records(): ReturnType<ApiEngine['records']> {
    return this.plugged.records();
  }

  recordsOf(containerId: string): ReturnType<ApiEngine['recordsOf']> {
    return this.plugged.recordsOf(containerId);
  }

  changeNetworks(...call: Parameters<ApiEngine['changeNetworks']>): ReturnType<ApiEngine['changeNetworks']> {
    return this.plugged.changeNetworks(...call);
  }
}
