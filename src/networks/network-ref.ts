/** References to networks as operators write them: `[namespace/]name`. */
import { type Result, err, ok } from '../cni/errors';
import { notANetworkRef } from './errors';

export interface NetworkRef {
  readonly namespace: string;
  readonly name: string;
}

export function parseNetworkRef(text: string, defaultNamespace = 'default'): Result<NetworkRef> {
  const parts = text.split('/');
  const [a, b] = parts;
  if (parts.length > 2 || !a || (parts.length === 2 && !b)) return err(notANetworkRef(text));
  return ok(b ? { namespace: a, name: b } : { namespace: defaultNamespace, name: a });
}
