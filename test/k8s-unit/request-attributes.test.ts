/** RBAC's verb and resource of each request plexusd makes, as a refusal names them. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { requestAttributes } from '../../src/k8s/request-attributes';

describe('requestAttributes', () => {
  const cases: [string, string, { verb: string; resource: string; namespace?: string }][] = [
    ['PATCH', '/api/v1/namespaces/default/pods/web', { verb: 'patch', resource: 'pods', namespace: 'default' }],
    ['GET', '/api/v1/namespaces/team-a/pods/web', { verb: 'get', resource: 'pods', namespace: 'team-a' }],
    ['GET', '/api/v1/pods?fieldSelector=spec.nodeName%3Dn1&limit=500', { verb: 'list', resource: 'pods' }],
    [
      'GET',
      '/api/v1/pods?fieldSelector=spec.nodeName%3Dn1&watch=1&resourceVersion=7',
      { verb: 'watch', resource: 'pods' },
    ],
    ['GET', '/api/v1/nodes?resourceVersion=0', { verb: 'list', resource: 'nodes' }],
    ['GET', '/api/v1/nodes/n1', { verb: 'get', resource: 'nodes' }],
    ['POST', '/api/v1/namespaces/default/events', { verb: 'create', resource: 'events', namespace: 'default' }],
    [
      'PATCH',
      '/api/v1/namespaces/default/events/web.0123',
      { verb: 'patch', resource: 'events', namespace: 'default' },
    ],
    [
      'PUT',
      '/apis/ipam.plexus.io/v1alpha1/ipblocks/pool-10-1-0-0-26',
      { verb: 'update', resource: 'ipblocks.ipam.plexus.io' },
    ],
    ['DELETE', '/apis/ipam.plexus.io/v1alpha1/ipblocks/b1', { verb: 'delete', resource: 'ipblocks.ipam.plexus.io' }],
    [
      'DELETE',
      '/apis/ipam.plexus.io/v1alpha1/ipblocks',
      { verb: 'deletecollection', resource: 'ipblocks.ipam.plexus.io' },
    ],
    [
      'PUT',
      '/apis/k8s.cni.cncf.io/v1alpha1/namespaces/vm/ipamclaims/c1/status',
      { verb: 'update', resource: 'ipamclaims.k8s.cni.cncf.io/status', namespace: 'vm' },
    ],
    [
      'GET',
      '/apis/k8s.cni.cncf.io/v1/network-attachment-definitions?limit=500',
      { verb: 'list', resource: 'network-attachment-definitions.k8s.cni.cncf.io' },
    ],
    ['GET', '/api/v1/namespaces/kube-system', { verb: 'get', resource: 'namespaces' }],
    ['GET', '/apis/ipam.plexus.io/v1alpha1', { verb: 'get', resource: '/apis/ipam.plexus.io/v1alpha1' }],
  ];
  for (const [method, path, expected] of cases) {
    it(`${method} ${path} is ${expected.verb} ${expected.resource}`, () =>
      assert.deepEqual(requestAttributes(method, path), expected));
  }
});
