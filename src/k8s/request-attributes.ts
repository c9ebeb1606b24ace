import { definedFields } from '../common/defined-fields';
/**
 * What RBAC sees of a request: its verb and resource, worked out from the method and the path as the API server's
 * own request-info does (GET of a collection is `list`, with `watch=1` it is `watch`; POST is `create`, ...), so a
 * refusal names the permission an operator must grant, in the words of a ClusterRole rule and of `kubectl auth can-i`.
 */

export interface RequestAttributes {
  /** get, list, watch, create, update, patch, delete, deletecollection. */
  readonly verb: string;
  /**
   * "pods", "pods/status", "ipblocks.ipam.plexus.io", "ipamclaims.k8s.cni.cncf.io/status" (the group after a dot, as
   * kubectl writes it); for a path that is not a resource (discovery), the path itself.
   */
  readonly resource: string;
  readonly namespace?: string;
}

const VERBS: Readonly<Record<string, string>> = { POST: 'create', PUT: 'update', PATCH: 'patch' };

function verbOf(method: string, named: boolean, query: URLSearchParams): string {
  const m = method.toUpperCase();
  if (m === 'GET' || m === 'HEAD') {
    if (named) return 'get';
    const watch = query.get('watch');
    return watch === '1' || watch === 'true' ? 'watch' : 'list';
  }
  if (m === 'DELETE') return named ? 'delete' : 'deletecollection';
  return VERBS[m] ?? m.toLowerCase();
}

/** The RBAC attributes of `method path` (the path as sent: /api/v1/..., /apis/GROUP/VERSION/...). */
export function requestAttributes(method: string, path: string): RequestAttributes {
  const [pathname = '', search = ''] = path.split('?', 2);
  const parts = pathname
    .split('/')
    .filter(Boolean)
    .map((p) => decodeURIComponent(p));
  const query = new URLSearchParams(search);
  const group = parts[0] === 'api' ? '' : parts[0] === 'apis' ? parts[1] : undefined;
  let rest = parts[0] === 'api' ? parts.slice(2) : parts.slice(3);
  if (group === undefined || rest.length === 0) return { verb: method.toLowerCase(), resource: pathname };
  let namespace: string | undefined;
  if (rest[0] === 'namespaces' && rest.length >= 3) {
    namespace = rest[1];
    rest = rest.slice(2);
  }
  const [plural = '', name, subresource] = rest;
  const resource = `${plural}${group ? `.${group}` : ''}${subresource ? `/${subresource}` : ''}`;
  return {
    verb: verbOf(method, name !== undefined, query),
    resource,
    ...definedFields({ namespace }),
  };
}
