/** The AddedInterface event's message: what `kubectl describe pod` shows of each interface an ADD attached. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { CniResult } from '../../src/cni/types';
import { addedInterfaceMessage } from '../../src/k8s/event-recorder';
import { addedInterfaces } from '../../src/networks/status';

const vf = (): CniResult => ({
  interfaces: [{ name: 'net1', mac: '02:00:00:00:00:01', sandbox: '/var/run/netns/p' }],
  ips: [{ address: '10.7.0.5/24', interface: 0 }],
  routes: [],
});
const outcome = { network: 'default/fast', ifname: 'net1', isDefault: false };

describe('AddedInterface messages', () => {
  it("show each address with its prefix length, as Multus's do", () => {
    const [added] = addedInterfaces([{ ...outcome, result: vf() }]);
    assert.equal(addedInterfaceMessage(added!), 'Add net1 [10.7.0.5/24] from default/fast');
  });

  it('separate several addresses with spaces, as Multus prints a list', () => {
    const dual: CniResult = {
      ...vf(),
      ips: [
        { address: '10.7.0.5/24', interface: 0 },
        { address: 'fd00::5/64', interface: 0 },
      ],
    };
    const [added] = addedInterfaces([{ ...outcome, result: dual }]);
    assert.equal(addedInterfaceMessage(added!), 'Add net1 [10.7.0.5/24 fd00::5/64] from default/fast');
  });
});
