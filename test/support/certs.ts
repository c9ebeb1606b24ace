/**
 * The test clusters' private PKI, made with openssl: one CA per API server, and the client and serving certificates
 * it signs (the API server's, the admin's, users', a kubelet's), with the kubeconfigs that carry them.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/** A CA's certificate and key files. */
export interface CertAuthority {
  readonly cert: string;
  readonly key: string;
}

const openssl =
  (dir: string) =>
  (...args: string[]): void =>
    void execFileSync('openssl', args, { cwd: dir, stdio: 'ignore' });

/** A self-signed CA in `dir` (ca.key, ca.crt), valid 30 days. */
export function makeCa(dir: string, commonName: string): CertAuthority {
  const ssl = openssl(dir);
  ssl('genrsa', '-out', 'ca.key', '2048');
  ssl(
    'req',
    '-x509',
    '-new',
    '-nodes',
    '-key',
    'ca.key',
    '-sha256',
    '-days',
    '30',
    '-subj',
    `/CN=${commonName}`,
    '-out',
    'ca.crt',
  );
  return { cert: join(dir, 'ca.crt'), key: join(dir, 'ca.key') };
}

/**
 * `${name}.key` and `${name}.crt` in `dir`, for `subject` (an openssl subject: /O=group/CN=user), signed by `ca`,
 * valid 30 days: a client certificate (clientAuth) or a serving one (serverAuth, with its subjectAltName `san`).
 * The serial file is `dir`'s own, so that two directories never write one file.
 */
export function issueCert(
  dir: string,
  ca: CertAuthority,
  name: string,
  subject: string,
  usage: 'clientAuth' | 'serverAuth',
  san?: string,
): void {
  const ssl = openssl(dir);
  ssl('genrsa', '-out', `${name}.key`, '2048');
  ssl('req', '-new', '-key', `${name}.key`, '-subj', subject, '-out', `${name}.csr`);
  writeFileSync(
    join(dir, `${name}.ext`),
    [
      'basicConstraints=CA:FALSE',
      'keyUsage=critical,digitalSignature,keyEncipherment',
      `extendedKeyUsage=${usage}`,
      ...(san ? [`subjectAltName=${san}`] : []),
    ].join('\n'),
  );
  ssl(
    'x509',
    '-req',
    '-in',
    `${name}.csr`,
    '-CA',
    ca.cert,
    '-CAkey',
    ca.key,
    '-CAserial',
    join(dir, 'ca.srl'),
    '-CAcreateserial',
    '-days',
    '30',
    '-sha256',
    '-extfile',
    `${name}.ext`,
    '-out',
    `${name}.crt`,
  );
}

/** Writes a kubeconfig (mode 0600) for `server`, trusting `caCert`, as the client certificate `cert` with `key`. */
export function writeKubeconfig(path: string, server: string, caCert: string, cert: string, key: string): void {
  const b64 = (f: string): string => readFileSync(f).toString('base64');
  writeFileSync(
    path,
    JSON.stringify({
      apiVersion: 'v1',
      kind: 'Config',
      'current-context': 'test',
      clusters: [{ name: 'test', cluster: { server, 'certificate-authority-data': b64(caCert) } }],
      users: [{ name: 'user', user: { 'client-certificate-data': b64(cert), 'client-key-data': b64(key) } }],
      contexts: [{ name: 'test', context: { cluster: 'test', user: 'user' } }],
    }),
    { mode: 0o600 },
  );
}
