/*
 * plexus-cni: the CNI executable the container runtime runs on the host.
 *
 * Kubernetes hosts have no Node.js, and a runtime may exec this a hundred
 * times at once after a reboot, so this is a small static C program that only
 * forwards: CNI env + stdin go to the node daemon plexusd as one HTTP request
 * over a unix socket, and plexusd's answer becomes stdout + exit code. All CNI
 * semantics (versions, validation, errors, caching) live in the daemon; the
 * only decisions made here are what to do while the daemon cannot be reached.
 * docs/shim.md is the contract; keep it true when changing behaviour here.
 *
 * libc only. Every byte of I/O is non-blocking behind poll() with deadlines,
 * so a hung daemon can never hang the runtime for longer than configured.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_SOCKET_PATH "/run/plexus/plexus.sock"
#define DEFAULT_WAIT_SECONDS 15.0
#define DEFAULT_REPLY_TIMEOUT_SECONDS 120.0
/* Also the cap for both timeouts: keeps millisecond arithmetic far from overflow. */
#define MAX_SECONDS 86400.0
#define STDIN_LIMIT ((size_t)4 * 1024 * 1024)
/* A CNI result is a few KiB; the cap only stops a broken daemon from eating the host's memory. */
#define REPLY_LIMIT ((size_t)16 * 1024 * 1024)
#define FIRST_RETRY_MS 100
#define MAX_RETRY_MS 500
#define FALLBACK_CNI_VERSION "1.1.0"
#define LOCAL_VERSION_REPLY \
    "{\"cniVersion\":\"1.1.0\",\"supportedVersions\":[\"0.3.0\",\"0.3.1\",\"0.4.0\",\"1.0.0\",\"1.1.0\"]}\n"

/* CNI error codes this program reports itself (CNI spec 1.1.0). */
enum {
    CNI_INVALID_ENV = 4,
    CNI_TRY_AGAIN_LATER = 11,
    CNI_PLUGIN_NOT_AVAILABLE = 50,
};

/* ---------------------------------------------------------------- buffers */

struct buf {
    char *data;
    size_t len;
    size_t cap;
};

static void out_of_memory(void)
{
    /* No allocation may happen here; a fixed reply is all we can give. */
    static const char msg[] =
        "{\"cniVersion\":\"" FALLBACK_CNI_VERSION "\",\"code\":11,\"msg\":\"plexus-cni is out of memory\"}\n";
    ssize_t ignored = write(STDOUT_FILENO, msg, sizeof msg - 1);
    (void)ignored;
    _exit(1);
}

static void buf_reserve(struct buf *b, size_t extra)
{
    if (extra <= b->cap - b->len)
        return;
    size_t cap = b->cap ? b->cap : 256;
    while (cap - b->len < extra) {
        if (cap > SIZE_MAX / 2)
            out_of_memory();
        cap *= 2;
    }
    char *data = realloc(b->data, cap);
    if (!data)
        out_of_memory();
    b->data = data;
    b->cap = cap;
}

static void buf_append(struct buf *b, const void *p, size_t n)
{
    if (n == 0)
        return;
    buf_reserve(b, n);
    memcpy(b->data + b->len, p, n);
    b->len += n;
}

static void buf_puts(struct buf *b, const char *s) { buf_append(b, s, strlen(s)); }

static void buf_putc(struct buf *b, char c) { buf_append(b, &c, 1); }

/* Returns a NUL-terminated copy of the contents (the buffer itself is not terminated). */
static char *buf_strdup(const struct buf *b)
{
    char *s = malloc(b->len + 1);
    if (!s)
        out_of_memory();
    if (b->len)
        memcpy(s, b->data, b->len);
    s[b->len] = '\0';
    return s;
}

static void buf_free(struct buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

/*
 * Appends s as a JSON string literal. Bytes >= 0x80 pass through untouched:
 * the runtime's config is UTF-8 and the daemon must see exactly those bytes.
 */
static void buf_json_string(struct buf *b, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    buf_reserve(b, n + 2);
    buf_putc(b, '"');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        switch (c) {
        case '"': buf_puts(b, "\\\""); break;
        case '\\': buf_puts(b, "\\\\"); break;
        case '\n': buf_puts(b, "\\n"); break;
        case '\r': buf_puts(b, "\\r"); break;
        case '\t': buf_puts(b, "\\t"); break;
        default:
            if (c < 0x20) {
                char esc[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
                buf_append(b, esc, sizeof esc);
            } else {
                buf_putc(b, (char)c);
            }
        }
    }
    buf_putc(b, '"');
}

/* ------------------------------------------------------------------ clock */

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Milliseconds left until deadline, clamped to what poll() accepts. */
static int ms_until(int64_t deadline)
{
    int64_t left = deadline - now_ms();
    if (left <= 0)
        return 0;
    return left > INT_MAX ? INT_MAX : (int)left;
}

static void sleep_ms(int ms)
{
    int64_t deadline = now_ms() + ms;
    int left;
    while ((left = ms_until(deadline)) > 0)
        poll(NULL, 0, left); /* EINTR just loops with the remaining time */
}

/* ---------------------------------------------------------- config scanner */

/*
 * The shim needs four top-level keys of the network config and must not
 * depend on the config being valid (the daemon reports decode errors), so
 * this is a scanner, not a parser: it walks the top-level object, decodes
 * keys, and skips every value it does not need without interpreting it.
 * Malformed input simply ends the scan; keys found so far still count,
 * and a later duplicate key wins, as with JSON.parse.
 */
struct config {
    char *socket_path;   /* NULL: not in config */
    char *cni_version;   /* NULL: not in config */
    double wait_seconds;
    double reply_timeout_seconds;
};

struct scanner {
    const char *p;
    const char *end;
};

static void skip_ws(struct scanner *s)
{
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
        s->p++;
}

/* strchr() would also match the terminating NUL; input bytes may be NUL. */
static bool in_set(char c, const char *set) { return c != '\0' && strchr(set, c) != NULL; }

static int hex_digit(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Reads the 4 hex digits of a \u escape at s->p; -1 if malformed. */
static long read_hex4(struct scanner *s)
{
    if (s->end - s->p < 4)
        return -1;
    long v = 0;
    for (int i = 0; i < 4; i++) {
        int d = hex_digit(s->p[i]);
        if (d < 0)
            return -1;
        v = v * 16 + d;
    }
    s->p += 4;
    return v;
}

static void put_utf8(struct buf *out, long cp)
{
    char u[4];
    size_t n;
    if (cp < 0x80) {
        u[0] = (char)cp; n = 1;
    } else if (cp < 0x800) {
        u[0] = (char)(0xC0 | (cp >> 6)); u[1] = (char)(0x80 | (cp & 0x3F)); n = 2;
    } else if (cp < 0x10000) {
        u[0] = (char)(0xE0 | (cp >> 12)); u[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[2] = (char)(0x80 | (cp & 0x3F)); n = 3;
    } else {
        u[0] = (char)(0xF0 | (cp >> 18)); u[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); u[3] = (char)(0x80 | (cp & 0x3F)); n = 4;
    }
    buf_append(out, u, n);
}

/* Consumes a string literal at s->p (which must be '"'); decodes it into out unless out is NULL. */
static bool scan_string(struct scanner *s, struct buf *out)
{
    if (s->p >= s->end || *s->p != '"')
        return false;
    s->p++;
    while (s->p < s->end) {
        unsigned char c = (unsigned char)*s->p++;
        if (c == '"')
            return true;
        if (c < 0x20)
            return false;
        if (c != '\\') {
            if (out)
                buf_putc(out, (char)c);
            continue;
        }
        if (s->p >= s->end)
            return false;
        char e = *s->p++;
        long cp;
        switch (e) {
        case '"': cp = '"'; break;
        case '\\': cp = '\\'; break;
        case '/': cp = '/'; break;
        case 'b': cp = '\b'; break;
        case 'f': cp = '\f'; break;
        case 'n': cp = '\n'; break;
        case 'r': cp = '\r'; break;
        case 't': cp = '\t'; break;
        case 'u':
            cp = read_hex4(s);
            if (cp < 0)
                return false;
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                /* A high surrogate must pair with a following \uDC00-\uDFFF. */
                struct scanner save = *s;
                long lo = -1;
                if (s->end - s->p >= 2 && s->p[0] == '\\' && s->p[1] == 'u') {
                    s->p += 2;
                    lo = read_hex4(s);
                }
                if (lo >= 0xDC00 && lo <= 0xDFFF) {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                } else {
                    *s = save;
                    cp = 0xFFFD;
                }
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                cp = 0xFFFD;
            }
            break;
        default:
            return false;
        }
        if (out)
            put_utf8(out, cp);
    }
    return false;
}

/* Consumes one value of any type without interpreting it. Nesting is tracked by a counter, not recursion. */
static bool skip_value(struct scanner *s)
{
    if (s->p >= s->end)
        return false;
    if (*s->p == '"')
        return scan_string(s, NULL);
    if (*s->p != '{' && *s->p != '[') {
        const char *start = s->p;
        while (s->p < s->end && !in_set(*s->p, ",}] \t\r\n"))
            s->p++;
        return s->p > start;
    }
    size_t depth = 0;
    while (s->p < s->end) {
        char c = *s->p;
        if (c == '"') {
            if (!scan_string(s, NULL))
                return false;
            continue;
        }
        s->p++;
        if (c == '{' || c == '[') {
            depth++;
        } else if (c == '}' || c == ']') {
            if (--depth == 0)
                return true;
        }
    }
    return false;
}

/* Parses a JSON number token at s->p into *out; leaves *out alone for anything else (e.g. a string). */
static bool scan_number(struct scanner *s, double *out)
{
    const char *start = s->p;
    while (s->p < s->end && in_set(*s->p, "+-0123456789.eE"))
        s->p++;
    size_t n = (size_t)(s->p - start);
    if (n == 0 || n >= 64)
        return false;
    char tok[64];
    memcpy(tok, start, n);
    tok[n] = '\0';
    char *endp;
    double v = strtod(tok, &endp); /* never setlocale(): the C locale's '.' is JSON's */
    if (*endp != '\0' || !isfinite(v))
        return false;
    *out = v;
    return true;
}

static bool key_is(const struct buf *key, const char *name)
{
    return key->len == strlen(name) && memcmp(key->data, name, key->len) == 0;
}

/*
 * Consumes a string value; false if malformed. *result becomes its decoded copy,
 * or NULL when it holds a NUL byte (unusable as a C path or version string).
 */
static bool string_value(struct scanner *s, char **result)
{
    struct buf v = {0};
    bool ok = scan_string(s, &v);
    *result = ok && memchr(v.data ? v.data : "", '\0', v.len) == NULL ? buf_strdup(&v) : NULL;
    buf_free(&v);
    return ok;
}

static void set_seconds(double *field, double v, bool zero_ok)
{
    if (v < 0 || (v == 0 && !zero_ok))
        return; /* keep the default; the daemon validates the config properly */
    *field = v > MAX_SECONDS ? MAX_SECONDS : v;
}

static void scan_config(const char *data, size_t len, struct config *cfg)
{
    struct scanner s = {data, data + len};
    struct buf key = {0};
    skip_ws(&s);
    if (s.p >= s.end || *s.p != '{')
        return;
    s.p++;
    for (;;) {
        skip_ws(&s);
        key.len = 0;
        if (!scan_string(&s, &key))
            break;
        skip_ws(&s);
        if (s.p >= s.end || *s.p != ':')
            break;
        s.p++;
        skip_ws(&s);
        if (s.p >= s.end)
            break;
        const char *value_start = s.p;
        if (*s.p == '"' && (key_is(&key, "socketPath") || key_is(&key, "cniVersion"))) {
            char *v;
            if (!string_value(&s, &v))
                break;
            char **field = key_is(&key, "socketPath") ? &cfg->socket_path : &cfg->cni_version;
            if (v) {
                free(*field);
                *field = v;
            }
        } else if (key_is(&key, "daemonWaitSeconds") || key_is(&key, "daemonReplyTimeoutSeconds")) {
            double v;
            bool wait = key_is(&key, "daemonWaitSeconds");
            if (scan_number(&s, &v))
                set_seconds(wait ? &cfg->wait_seconds : &cfg->reply_timeout_seconds, v, wait);
            s.p = value_start;
            if (!skip_value(&s))
                break;
        } else if (!skip_value(&s)) {
            break;
        }
        skip_ws(&s);
        if (s.p >= s.end || *s.p != ',')
            break;
        s.p++;
    }
    buf_free(&key);
}

/* ------------------------------------------------------------ CNI errors */

static bool write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN) { /* stdout handed to us non-blocking */
                struct pollfd pfd = {fd, POLLOUT, 0};
                poll(&pfd, 1, -1);
                continue;
            }
            return false;
        }
        p += w;
        n -= (size_t)w;
    }
    return true;
}

/* The versions of LOCAL_VERSION_REPLY: an error is answered in the request's version only if it is one of them. */
static const char *const SUPPORTED_VERSIONS[] = {"0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"};

static bool is_supported_version(const char *v)
{
    for (size_t i = 0; v && i < sizeof SUPPORTED_VERSIONS / sizeof SUPPORTED_VERSIONS[0]; i++)
        if (strcmp(v, SUPPORTED_VERSIONS[i]) == 0)
            return true;
    return false;
}

/* Prints a CNI error object to stdout and returns the exit code the process must use. */
static int cni_error(const struct config *cfg, int code, const char *msg, const char *details)
{
    /* Never echo a version we do not speak: it may be any string, of any length. */
    const char *version = is_supported_version(cfg->cni_version) ? cfg->cni_version : FALLBACK_CNI_VERSION;
    struct buf out = {0};
    char num[16];
    buf_puts(&out, "{\"cniVersion\":");
    buf_json_string(&out, version, strlen(version));
    snprintf(num, sizeof num, "%d", code);
    buf_puts(&out, ",\"code\":");
    buf_puts(&out, num);
    buf_puts(&out, ",\"msg\":");
    buf_json_string(&out, msg, strlen(msg));
    if (details && *details) {
        buf_puts(&out, ",\"details\":");
        buf_json_string(&out, details, strlen(details));
    }
    buf_puts(&out, "}\n");
    write_all(STDOUT_FILENO, out.data, out.len);
    buf_free(&out);
    return 1;
}

/* Operators grep for errno names, not for strerror() text, so give both. */
static const char *errno_name(int err)
{
    switch (err) {
    case ENOENT: return "ENOENT";
    case ECONNREFUSED: return "ECONNREFUSED";
    case EAGAIN: return "EAGAIN";
    case EACCES: return "EACCES";
    case EPERM: return "EPERM";
    case ENOTDIR: return "ENOTDIR";
    case ENAMETOOLONG: return "ENAMETOOLONG";
    case ENOTSOCK: return "ENOTSOCK";
    case ELOOP: return "ELOOP";
    case ECONNRESET: return "ECONNRESET";
    case EPIPE: return "EPIPE";
    case ETIMEDOUT: return "ETIMEDOUT";
    case EPROTOTYPE: return "EPROTOTYPE";
    case EMFILE: return "EMFILE";
    case ENFILE: return "ENFILE";
    case ENOSPC: return "ENOSPC";
    case EROFS: return "EROFS";
    default: return "errno";
    }
}

/* ------------------------------------------------------- talking to plexusd */

/* How one attempt to reach the daemon ended. */
enum outcome {
    OUTCOME_REPLY,        /* HTTP 200: body and exit code are the daemon's answer */
    OUTCOME_UNREACHABLE,  /* connect() failed, errno in attempt.err */
    OUTCOME_BUSY,         /* HTTP 503: daemon starting, reconciling or overloaded */
    OUTCOME_NO_ANSWER,    /* request sent (or partly), no complete reply before the deadline */
    OUTCOME_BAD_REPLY,    /* any other status, or not HTTP at all */
};

struct attempt {
    enum outcome outcome;
    int err;               /* OUTCOME_UNREACHABLE: connect errno */
    bool cut_before_reply; /* OUTCOME_NO_ANSWER: reset or closed before a single reply byte */
    int exit_code;         /* OUTCOME_REPLY: X-CNI-Exit-Code, 1 if absent or invalid */
    struct buf raw;        /* the whole HTTP response as read */
    const char *body;      /* points into raw */
    size_t body_len;
    char detail[512];      /* what an operator needs to know about a failure */
};

static bool connect_retryable(int err)
{
    /* Socket not created yet, daemon not listening yet, or its accept backlog full. */
    return err == ENOENT || err == ECONNREFUSED || err == EAGAIN || err == EINTR;
}

static int connect_daemon(const char *path, int *err)
{
    struct sockaddr_un addr;
    memset(&addr, 0, sizeof addr);
    addr.sun_family = AF_UNIX;
    size_t n = strlen(path);
    if (n >= sizeof addr.sun_path) {
        *err = ENAMETOOLONG;
        return -1;
    }
    memcpy(addr.sun_path, path, n);
    /* Non-blocking: a full backlog gives EAGAIN (retry on our schedule) instead of blocking. */
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        *err = errno;
        return -1;
    }
    if (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
        *err = errno;
        close(fd);
        return -1;
    }
    return fd;
}

/* Sends everything before deadline. MSG_NOSIGNAL: a vanished daemon must be an error, not SIGPIPE. */
static int send_all(int fd, const char *p, size_t n, int64_t deadline)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN)
                return errno;
            struct pollfd pfd = {fd, POLLOUT, 0};
            int left = ms_until(deadline);
            if (left == 0)
                return ETIMEDOUT;
            if (poll(&pfd, 1, left) < 0 && errno != EINTR)
                return errno;
            continue;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Finds "\r\n\r\n" at or after *from; returns the offset just past it, or 0. *from avoids rescanning. */
static size_t header_end(const struct buf *raw, size_t *from)
{
    size_t i = *from < 3 ? 3 : *from;
    *from = raw->len;
    for (; i < raw->len; i++)
        if (raw->data[i] == '\n' && raw->data[i - 1] == '\r' && raw->data[i - 2] == '\n' && raw->data[i - 3] == '\r')
            return i + 1;
    return 0;
}

/* Strictly decimal, no sign, no overflow; -1 otherwise. */
static long long parse_decimal(const char *p, size_t n, long long max)
{
    if (n == 0)
        return -1;
    long long v = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9')
            return -1;
        v = v * 10 + (p[i] - '0');
        if (v > max)
            return -1;
    }
    return v;
}

struct head {
    int status;
    long long content_length; /* -1: absent */
    bool chunked;
    int exit_code;            /* -1: absent or invalid */
    size_t status_line_len;
};

/* Parses the status line and the headers we care about; false if this is not HTTP/1.x. */
static bool parse_head(const char *p, size_t len, struct head *h)
{
    h->status = 0;
    h->content_length = -1;
    h->chunked = false;
    h->exit_code = -1;
    const char *end = p + len;
    const char *eol = memchr(p, '\r', len);
    if (!eol)
        return false;
    h->status_line_len = (size_t)(eol - p);
    if (h->status_line_len < 12 || memcmp(p, "HTTP/1.", 7) != 0 || p[8] != ' ' || (h->status_line_len > 12 && p[12] != ' '))
        return false;
    long long status = parse_decimal(p + 9, 3, 999);
    if (status < 100)
        return false;
    h->status = (int)status;
    for (const char *line = eol + 2; line < end;) {
        const char *le = memchr(line, '\r', (size_t)(end - line));
        if (!le)
            return false;
        if (le == line)
            break; /* blank line: end of headers */
        const char *colon = memchr(line, ':', (size_t)(le - line));
        if (!colon)
            return false;
        size_t name_len = (size_t)(colon - line);
        const char *v = colon + 1, *ve = le;
        while (v < ve && (*v == ' ' || *v == '\t')) v++;
        while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t')) ve--;
        size_t vlen = (size_t)(ve - v);
        if (name_len == 14 && strncasecmp(line, "Content-Length", 14) == 0) {
            h->content_length = parse_decimal(v, vlen, (long long)REPLY_LIMIT);
            if (h->content_length < 0)
                return false;
        } else if (name_len == 17 && strncasecmp(line, "Transfer-Encoding", 17) == 0) {
            h->chunked = vlen >= 7 && strncasecmp(ve - 7, "chunked", 7) == 0;
        } else if (name_len == 15 && strncasecmp(line, "X-CNI-Exit-Code", 15) == 0) {
            h->exit_code = (int)parse_decimal(v, vlen, 255);
        }
        line = le + 2;
    }
    return true;
}

/* Shows the status line in details without letting a broken reply flood the runtime's log. */
static void describe_status_line(struct attempt *a, const char *prefix, const char *line, size_t n)
{
    int shown = n > 200 ? 200 : (int)n;
    snprintf(a->detail, sizeof a->detail, "%s%.*s", prefix, shown, line);
    for (char *c = a->detail; *c; c++)
        if ((unsigned char)*c < 0x20)
            *c = '?';
}

/* Sends the request on a connected socket and reads the reply into a. */
static void exchange(int fd, const struct buf *request, double reply_timeout_seconds, struct attempt *a)
{
    int64_t deadline = now_ms() + (int64_t)(reply_timeout_seconds * 1000.0);
    int send_err = send_all(fd, request->data, request->len, deadline);
    if (send_err == ETIMEDOUT) {
        a->outcome = OUTCOME_NO_ANSWER;
        snprintf(a->detail, sizeof a->detail, "request not accepted within %.1f s", reply_timeout_seconds);
        return;
    }
    /* Even if sending failed, the daemon may have answered (e.g. 503) before closing: read it. */
    struct head h = {0};
    size_t hdr = 0, scanned = 0;
    int read_err = 0;
    bool eof = false;
    for (;;) {
        if (!hdr && (hdr = header_end(&a->raw, &scanned)) != 0 && !parse_head(a->raw.data, hdr, &h)) {
            h.status = 0; /* not HTTP: reported below */
            break;
        }
        if (hdr && h.content_length >= 0 && a->raw.len - hdr >= (size_t)h.content_length)
            break;
        if (a->raw.len > REPLY_LIMIT)
            break;
        buf_reserve(&a->raw, 64 * 1024);
        ssize_t r = recv(fd, a->raw.data + a->raw.len, a->raw.cap - a->raw.len, 0);
        if (r > 0) {
            a->raw.len += (size_t)r;
            continue;
        }
        if (r == 0) {
            eof = true;
            break;
        }
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN) {
            read_err = errno;
            break;
        }
        struct pollfd pfd = {fd, POLLIN, 0};
        int left = ms_until(deadline);
        if (left == 0) {
            read_err = ETIMEDOUT;
            break;
        }
        if (poll(&pfd, 1, left) < 0 && errno != EINTR) {
            read_err = errno;
            break;
        }
    }

    if (a->raw.len > REPLY_LIMIT) {
        a->outcome = OUTCOME_BAD_REPLY;
        snprintf(a->detail, sizeof a->detail, "reply larger than %zu bytes", REPLY_LIMIT);
        return;
    }
    if (!hdr || (h.status && !eof && h.content_length < 0) ||
        (h.status && h.content_length >= 0 && a->raw.len - hdr < (size_t)h.content_length)) {
        /* Incomplete: timed out, reset, or closed early. */
        int err = read_err ? read_err : send_err;
        a->outcome = OUTCOME_NO_ANSWER;
        a->cut_before_reply = a->raw.len == 0 && err != ETIMEDOUT;
        if (err == ETIMEDOUT)
            snprintf(a->detail, sizeof a->detail, "no complete reply within %.1f s", reply_timeout_seconds);
        else if (err)
            snprintf(a->detail, sizeof a->detail, "connection failed after %zu reply bytes: %s (%s)", a->raw.len,
                     errno_name(err), strerror(err));
        else
            snprintf(a->detail, sizeof a->detail, "connection closed after %zu reply bytes", a->raw.len);
        return;
    }
    if (!h.status) {
        a->outcome = OUTCOME_BAD_REPLY;
        size_t n = 0;
        while (n < a->raw.len && a->raw.data[n] != '\r') n++;
        describe_status_line(a, "not an HTTP/1.x reply: ", a->raw.data, n);
        return;
    }
    a->body = a->raw.data + hdr;
    a->body_len = h.content_length >= 0 ? (size_t)h.content_length : a->raw.len - hdr;
    if (h.status == 200 && h.chunked) {
        /* plexusd always sends Content-Length; a chunked body would reach the runtime with its framing. */
        a->outcome = OUTCOME_BAD_REPLY;
        snprintf(a->detail, sizeof a->detail, "chunked transfer encoding is not supported: plexusd sends Content-Length");
    } else if (h.status == 200) {
        a->outcome = OUTCOME_REPLY;
        /* A 200 without an exit code is not a success we can vouch for. */
        a->exit_code = h.exit_code >= 0 ? h.exit_code : 1;
    } else {
        a->outcome = h.status == 503 ? OUTCOME_BUSY : OUTCOME_BAD_REPLY;
        describe_status_line(a, "", a->raw.data, h.status_line_len);
    }
}

static void attempt_reset(struct attempt *a)
{
    buf_free(&a->raw);
    a->outcome = OUTCOME_UNREACHABLE;
    a->err = 0;
    a->cut_before_reply = false;
    a->exit_code = 1;
    a->body = NULL;
    a->body_len = 0;
    a->detail[0] = '\0';
}

/*
 * Tries to get an answer, retrying "not there yet" (connect refused/missing,
 * or 503) until wait_seconds have passed, and a connection cut before a single
 * reply byte (a daemon stopping or replaced mid-call, or a backlog dropped at
 * close). The daemon may have acted on a cut call, so it is replayed: every verb
 * that waits is idempotent in plexusd (an ADD of a container and interface that
 * is already attached answers with the same result). A timeout or a partial
 * reply ends the loop at once.
 */
static void reach_daemon(const char *path, const struct buf *request, const struct config *cfg, double wait_seconds,
                         struct attempt *a)
{
    int64_t deadline = now_ms() + (int64_t)(wait_seconds * 1000.0);
    int backoff = FIRST_RETRY_MS;
    for (;;) {
        attempt_reset(a);
        int fd = connect_daemon(path, &a->err);
        if (fd >= 0) {
            exchange(fd, request, cfg->reply_timeout_seconds, a);
            close(fd);
            if (a->outcome != OUTCOME_BUSY && !(a->outcome == OUTCOME_NO_ANSWER && a->cut_before_reply))
                return;
        } else if (!connect_retryable(a->err)) {
            return;
        }
        int left = ms_until(deadline);
        if (left == 0)
            return;
        sleep_ms(left < backoff ? left : backoff);
        backoff = backoff * 2 > MAX_RETRY_MS ? MAX_RETRY_MS : backoff * 2;
    }
}

/* -------------------------------------------------------------- DEL spool */

static int mkdir_p(char *path, mode_t mode)
{
    for (char *p = path + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        int rc = mkdir(path, mode);
        int err = errno;
        *p = '/';
        if (rc != 0 && err != EEXIST)
            return err;
    }
    if (mkdir(path, mode) != 0 && errno != EEXIST)
        return errno;
    return 0;
}

static void append_sanitized(struct buf *b, const char *s)
{
    for (; s && *s; s++) {
        char c = *s;
        bool keep = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
                    c == '-';
        buf_putc(b, keep ? c : '_');
    }
}

/* Why spooling stopped: the failing step and its errno, or (err 0) why a directory is not trusted. */
struct spool_failure {
    const char *step;
    int err;
    char why[PATH_MAX + 192];
};

static int spool_fail(struct spool_failure *f, const char *step, int err)
{
    f->step = step;
    f->err = err;
    return -1;
}

/*
 * plexusd replays what is in the spool as DELs, so it must be a directory only we can change: not a symlink,
 * owned by our uid, writable by nobody else. Checked on the open fd, so what is checked is what is written to.
 */
static int open_trusted_dir(int at, const char *name, const char *shown, struct spool_failure *f)
{
    int fd = openat(at, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (fd < 0) {
        int err = errno;
        if ((err == ELOOP || err == ENOTDIR) && fstatat(at, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode)) {
            snprintf(f->why, sizeof f->why, "%s is a symbolic link", shown);
            return spool_fail(f, "check", 0);
        }
        return spool_fail(f, "open", err);
    }
    if (fstat(fd, &st) != 0) {
        int err = errno;
        close(fd);
        return spool_fail(f, "check", err);
    }
    if (st.st_uid != geteuid())
        snprintf(f->why, sizeof f->why, "%s is owned by uid %u, not by uid %u", shown, (unsigned)st.st_uid,
                 (unsigned)geteuid());
    else if (st.st_mode & (S_IWGRP | S_IWOTH))
        snprintf(f->why, sizeof f->why, "%s is writable by group or others (mode 0%o)", shown,
                 (unsigned)(st.st_mode & 07777));
    else
        return fd;
    close(fd);
    return spool_fail(f, "check", 0);
}

/* Creates a new file in dfd under a fresh temporary name (mkstemp has no *at form). */
static int create_temp(int dfd, char *name, size_t n)
{
    for (unsigned i = 0; i < 100; i++) {
        snprintf(name, n, ".tmp-%ld-%lld-%u", (long)getpid(), (long long)now_ms(), i);
        int fd = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd >= 0 || errno != EEXIST)
            return fd;
    }
    return -1;
}

/*
 * Saves the DEL request body as <dirname(socket)>/pending-del/<container>-<ifname>.json
 * for plexusd to replay at start-up. Write-to-temp, fsync, rename, fsync(dir): the file
 * either exists complete or not at all, even across a power cut during a reboot.
 * Both directories are checked first (open_trusted_dir). Returns 0, or -1 with *f filled.
 */
static int spool_del(const char *socket_path, const struct buf *body, struct spool_failure *f)
{
    struct buf dir = {0}, final = {0}, shown = {0};
    char tmp[96];
    int rc = -1, sfd = -1, pfd = -1, fd = -1;
    bool created = false; /* a temp file exists that must go if we fail */
    const char *slash = strrchr(socket_path, '/');
    if (!slash)
        buf_puts(&dir, ".");
    else if (slash == socket_path)
        buf_puts(&dir, "/");
    else
        buf_append(&dir, socket_path, (size_t)(slash - socket_path));
    buf_putc(&dir, '\0');
    buf_puts(&shown, dir.data);
    buf_puts(&shown, dir.len > 1 && dir.data[dir.len - 2] == '/' ? "pending-del" : "/pending-del");
    buf_putc(&shown, '\0');

    int err = mkdir_p(dir.data, 0700);
    if (err != 0) {
        spool_fail(f, "mkdir", err);
        goto out;
    }
    if ((sfd = open_trusted_dir(AT_FDCWD, dir.data, dir.data, f)) < 0)
        goto out;
    if (mkdirat(sfd, "pending-del", 0700) != 0 && errno != EEXIST) {
        spool_fail(f, "mkdir", errno);
        goto out;
    }
    if ((pfd = open_trusted_dir(sfd, "pending-del", shown.data, f)) < 0)
        goto out;

    append_sanitized(&final, getenv("CNI_CONTAINERID"));
    buf_putc(&final, '-');
    append_sanitized(&final, getenv("CNI_IFNAME"));
    buf_puts(&final, ".json");
    buf_putc(&final, '\0');

    if ((fd = create_temp(pfd, tmp, sizeof tmp)) < 0) {
        spool_fail(f, "create", errno);
        goto out;
    }
    created = true;
    if (!write_all(fd, body->data, body->len)) {
        spool_fail(f, "write", errno);
        goto out;
    }
    if (fsync(fd) != 0) {
        spool_fail(f, "fsync", errno);
        goto out;
    }
    int closed = close(fd);
    fd = -1;
    if (closed != 0) {
        spool_fail(f, "close", errno);
        goto out;
    }
    if (renameat(pfd, tmp, pfd, final.data) != 0) {
        spool_fail(f, "rename", errno);
        goto out;
    }
    created = false;
    fsync(pfd); /* best effort: the rename itself already succeeded */
    rc = 0;
out:
    if (fd >= 0)
        close(fd);
    if (created)
        unlinkat(pfd, tmp, 0);
    if (pfd >= 0)
        close(pfd);
    if (sfd >= 0)
        close(sfd);
    buf_free(&dir);
    buf_free(&final);
    buf_free(&shown);
    return rc;
}

/* ------------------------------------------------------------------- main */

static const char *const CNI_ENV_VARS[] = {
    "CNI_COMMAND", "CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_ARGS", "CNI_PATH",
};

enum verb { VERB_MISSING, VERB_ADD, VERB_DEL, VERB_CHECK, VERB_GC, VERB_STATUS, VERB_VERSION, VERB_OTHER };

static enum verb verb_of(const char *command)
{
    if (!command) return VERB_MISSING;
    if (strcmp(command, "ADD") == 0) return VERB_ADD;
    if (strcmp(command, "DEL") == 0) return VERB_DEL;
    if (strcmp(command, "CHECK") == 0) return VERB_CHECK;
    if (strcmp(command, "GC") == 0) return VERB_GC;
    if (strcmp(command, "STATUS") == 0) return VERB_STATUS;
    if (strcmp(command, "VERSION") == 0) return VERB_VERSION;
    return VERB_OTHER;
}

/* Reads stdin up to limit+1 bytes so that "too large" is detectable without reading it all. */
static bool read_stdin(struct buf *in, int *err)
{
    for (;;) {
        if (in->len > STDIN_LIMIT)
            return true;
        buf_reserve(in, 64 * 1024);
        size_t room = in->cap - in->len;
        if (room > STDIN_LIMIT + 1 - in->len)
            room = STDIN_LIMIT + 1 - in->len;
        ssize_t r = read(STDIN_FILENO, in->data + in->len, room);
        if (r > 0) {
            in->len += (size_t)r;
        } else if (r == 0 || errno == EBADF) {
            return true; /* EBADF: the runtime gave us no stdin at all; the daemon will say what is missing */
        } else if (errno == EAGAIN) {
            struct pollfd pfd = {STDIN_FILENO, POLLIN, 0};
            poll(&pfd, 1, -1);
        } else if (errno != EINTR) {
            *err = errno;
            return false;
        }
    }
}

static void build_body(const struct buf *in, struct buf *body)
{
    bool first = true;
    buf_puts(body, "{\"env\":{");
    for (size_t i = 0; i < sizeof CNI_ENV_VARS / sizeof CNI_ENV_VARS[0]; i++) {
        const char *v = getenv(CNI_ENV_VARS[i]);
        if (!v)
            continue; /* unset is absent; set-but-empty is "" (containerd's last DEL has CNI_NETNS="") */
        if (!first)
            buf_putc(body, ',');
        first = false;
        buf_json_string(body, CNI_ENV_VARS[i], strlen(CNI_ENV_VARS[i]));
        buf_putc(body, ':');
        buf_json_string(body, v, strlen(v));
    }
    buf_puts(body, "},\"stdin\":");
    buf_json_string(body, in->data ? in->data : "", in->len);
    buf_putc(body, '}');
}

static void build_request(const struct buf *body, struct buf *request)
{
    char head[256];
    int n = snprintf(head, sizeof head,
                     "POST /v1/cni HTTP/1.1\r\nHost: plexusd\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                     body->len);
    buf_append(request, head, (size_t)n);
    buf_append(request, body->data, body->len);
}

/* Explains why the daemon could not be used, for the error's details. */
static void describe_failure(const struct attempt *a, const char *path, double waited, char *out, size_t n)
{
    if (a->outcome == OUTCOME_UNREACHABLE)
        snprintf(out, n, "connect %s: %s (%s); waited %.1f s", path, errno_name(a->err), strerror(a->err), waited);
    else
        snprintf(out, n, "%s; waited %.1f s", a->detail, waited);
}

static int run(struct config *cfg, struct buf *in, struct buf *body, struct buf *request, struct attempt *a)
{
    int read_err = 0;
    if (!read_stdin(in, &read_err)) {
        char details[128];
        snprintf(details, sizeof details, "read stdin: %s (%s)", errno_name(read_err), strerror(read_err));
        return cni_error(cfg, CNI_TRY_AGAIN_LATER, "plexus-cni could not read its network configuration", details);
    }
    scan_config(in->data ? in->data : "", in->len, cfg);
    if (in->len > STDIN_LIMIT)
        return cni_error(cfg, CNI_INVALID_ENV, "network configuration larger than 4 MiB", NULL);

    const char *path = getenv("PLEXUS_SOCKET");
    if (!path || !*path)
        path = cfg->socket_path && *cfg->socket_path ? cfg->socket_path : DEFAULT_SOCKET_PATH;

    enum verb verb = verb_of(getenv("CNI_COMMAND"));
    /* Only verbs a runtime will retry or must not lose wait for a starting daemon. */
    bool waits = verb == VERB_ADD || verb == VERB_DEL || verb == VERB_CHECK || verb == VERB_GC;
    double wait_seconds = waits ? cfg->wait_seconds : 0;

    build_body(in, body);
    build_request(body, request);
    int64_t started = now_ms();
    reach_daemon(path, request, cfg, wait_seconds, a);
    double waited = (double)(now_ms() - started) / 1000.0;

    if (a->outcome == OUTCOME_REPLY) {
        if (!write_all(STDOUT_FILENO, a->body, a->body_len))
            return 1;
        return a->exit_code;
    }
    char details[768];
    describe_failure(a, path, waited, details, sizeof details);
    /* Cut before any reply byte until the deadline: as good as unreachable (a DEL is spooled, safe to replay). */
    if (a->outcome == OUTCOME_NO_ANSWER && !a->cut_before_reply)
        return cni_error(cfg, CNI_TRY_AGAIN_LATER, "plexusd did not answer", details);
    if (a->outcome == OUTCOME_BAD_REPLY)
        return cni_error(cfg, CNI_TRY_AGAIN_LATER, "plexusd returned an unexpected reply", details);

    /* Unreachable, or still busy (503) when we stopped waiting. */
    char msg[PATH_MAX + 64];
    snprintf(msg, sizeof msg, "plexusd is not reachable at %s", path);
    switch (verb) {
    case VERB_VERSION:
        /* podman runs VERSION on every plugin all the time: never make it wait for a down daemon. */
        return write_all(STDOUT_FILENO, LOCAL_VERSION_REPLY, sizeof LOCAL_VERSION_REPLY - 1) ? 0 : 1;
    case VERB_STATUS:
        return cni_error(cfg, CNI_PLUGIN_NOT_AVAILABLE,
                         a->outcome == OUTCOME_BUSY ? "plexusd is not ready" : "plexusd is not running", details);
    case VERB_MISSING:
        return cni_error(cfg, CNI_INVALID_ENV, "CNI_COMMAND is not set", details);
    case VERB_DEL: {
        /*
         * A DEL that fails is retried by the runtime forever and can wedge pod removal.
         * Spool it instead: plexusd replays the spool at start-up before serving, so the
         * teardown still happens, exactly once, and nothing leaks.
         */
        struct spool_failure f;
        memset(&f, 0, sizeof f);
        if (spool_del(path, body, &f) == 0)
            return 0;
        char spool_details[sizeof details + sizeof f.why + 128];
        if (f.err == 0)
            snprintf(spool_details, sizeof spool_details,
                     "%s; refusing to spool the DEL: %s (plexusd replays the spool, so only its owner may write there)",
                     details, f.why);
        else
            snprintf(spool_details, sizeof spool_details, "%s; spooling the DEL failed at %s: %s (%s)", details,
                     f.step, errno_name(f.err), strerror(f.err));
        return cni_error(cfg, CNI_TRY_AGAIN_LATER, msg, spool_details);
    }
    default:
        return cni_error(cfg, CNI_TRY_AGAIN_LATER, msg, details);
    }
}

int main(void)
{
    /* Writes to a closed stdout or socket must become errors we report, not a silent death. */
    signal(SIGPIPE, SIG_IGN);

    struct config cfg = {NULL, NULL, DEFAULT_WAIT_SECONDS, DEFAULT_REPLY_TIMEOUT_SECONDS};
    struct buf in = {0}, body = {0}, request = {0};
    struct attempt a;
    memset(&a, 0, sizeof a);

    int code = run(&cfg, &in, &body, &request, &a);

    /* Freed so leak checkers can tell real leaks from exit-time noise. */
    attempt_reset(&a);
    buf_free(&in);
    buf_free(&body);
    buf_free(&request);
    free(cfg.socket_path);
    free(cfg.cni_version);
    return code;
}
