/**
 * The few libc calls the kernel layer needs, bound with koffi. Synchronous: only ever called on the
 * kernel worker thread, never on the daemon's event loop.
 */
import koffi from 'koffi';
import { constants } from 'node:os';

const libc = koffi.load('libc.so.6');

export const sys = {
  socket: libc.func('int socket(int domain, int type, int protocol)') as (d: number, t: number, p: number) => number,
  bind: libc.func('int bind(int fd, const void *addr, uint32_t len)') as (fd: number, addr: Buffer, len: number) => number,
  send: libc.func('long send(int fd, const void *buf, size_t len, int flags)') as (fd: number, buf: Buffer, len: number, flags: number) => number,
  recv: libc.func('long recv(int fd, _Out_ void *buf, size_t len, int flags)') as (fd: number, buf: Buffer, len: number, flags: number) => number,
  setsockopt: libc.func('int setsockopt(int fd, int level, int name, const void *val, uint32_t len)') as (fd: number, l: number, n: number, v: Buffer, len: number) => number,
  setns: libc.func('int setns(int fd, int nstype)') as (fd: number, nstype: number) => number,
  open: libc.func('int open(const char *path, int flags)') as (path: string, flags: number) => number,
  close: libc.func('int close(int fd)') as (fd: number) => number,
  ioctlPtr: libc.func('ioctl', 'int', ['int', 'unsigned long', 'void *']) as (fd: number, req: number, arg: Buffer) => number,
  ioctlInt: libc.func('ioctl', 'int', ['int', 'unsigned long', 'unsigned long']) as (fd: number, req: number, arg: number) => number,
  errno: (): number => koffi.errno() as number,
};

const errnoNames = new Map<number, string>(Object.entries(constants.errno).map(([name, num]) => [num, name]));

/** "EEXIST" for 17, and so on; "E<n>" for numbers Node does not name. */
export const errnoName = (n: number): string => errnoNames.get(n) ?? `E${n}`;
