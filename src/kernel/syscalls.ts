/**
 * The few libc calls Plexus makes, bound with koffi in one place. The synchronous ones that can block (the netlink
 * requests) run on the kernel worker thread; on the event loop only calls that return at once (open, ioctl, close,
 * flock with LOCK_NB) and the async forms, which run on libuv's pool.
 */
import koffi from 'koffi';
import { constants } from 'node:os';

const libc = koffi.load('libc.so.6');

type AsyncCall = (...args: [...unknown[], (error: unknown, result: number) => void]) => void;
const send = libc.func('long send(int fd, const void *buf, size_t len, int flags)');
const recv = libc.func('long recv(int fd, _Out_ void *buf, size_t len, int flags)');

/** send and recv on a libuv pool thread: the answer comes back as a promise, the event loop never waits. */
export const sysAsync = {
  send: (fd: number, buf: Buffer, len: number, flags: number): Promise<number> =>
    onPool(send.async as AsyncCall, fd, buf, len, flags),
  recv: (fd: number, buf: Buffer, len: number, flags: number): Promise<number> =>
    onPool(recv.async as AsyncCall, fd, buf, len, flags),
};

const asError = (e: unknown): Error => (e instanceof Error ? e : new Error(String(e)));

function onPool(call: AsyncCall, ...args: unknown[]): Promise<number> {
  return new Promise((resolve, reject) =>
    call(...args, (error: unknown, result: number) => (error ? reject(asError(error)) : resolve(result))),
  );
}

export const sys = {
  socket: libc.func('int socket(int domain, int type, int protocol)') as (d: number, t: number, p: number) => number,
  bind: libc.func('int bind(int fd, const void *addr, uint32_t len)') as (
    fd: number,
    addr: Buffer,
    len: number,
  ) => number,
  send: send as (fd: number, buf: Buffer, len: number, flags: number) => number,
  recv: recv as (fd: number, buf: Buffer, len: number, flags: number) => number,
  setsockopt: libc.func('int setsockopt(int fd, int level, int name, const void *val, uint32_t len)') as (
    fd: number,
    l: number,
    n: number,
    v: Buffer,
    len: number,
  ) => number,
  setns: libc.func('int setns(int fd, int nstype)') as (fd: number, nstype: number) => number,
  open: libc.func('int open(const char *path, int flags)') as (path: string, flags: number) => number,
  close: libc.func('int close(int fd)') as (fd: number) => number,
  ioctlPtr: libc.func('ioctl', 'int', ['int', 'unsigned long', 'void *']) as (
    fd: number,
    req: number,
    arg: Buffer,
  ) => number,
  ioctlInt: libc.func('ioctl', 'int', ['int', 'unsigned long', 'unsigned long']) as (
    fd: number,
    req: number,
    arg: number,
  ) => number,
  flock: libc.func('int flock(int fd, int operation)') as (fd: number, operation: number) => number,
  errno: (): number => koffi.errno(),
};

const errnoNames = new Map<number, string>(Object.entries(constants.errno).map(([name, num]) => [num, name]));

/** "EEXIST" for 17, and so on; "E<n>" for numbers Node does not name. */
export const errnoName = (n: number): string => errnoNames.get(n) ?? `E${n}`;
