/*
 * libFuzzer target for plexus-cni's hand-written parsers: the network config it scans for its own keys (JSON, as
 * piped by the runtime), the head of the daemon's HTTP reply, and the JSON string escaping of the forwarded body.
 * The shim's source is included whole so its static functions are reachable; its main() is renamed away.
 *   make -C shim fuzz && shim/build/fuzz-parsers -max_total_time=10 CORPUS_DIR
 */
#define main plexus_cni_main
#include "../plexus-cni.c"
#undef main

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data;

    struct config cfg = {NULL, NULL, DEFAULT_WAIT_SECONDS, DEFAULT_REPLY_TIMEOUT_SECONDS};
    scan_config(text, size, &cfg);
    /* Whatever the config says, the timeouts stay within what the shim promises. */
    if (!(cfg.wait_seconds >= 0 && cfg.wait_seconds <= MAX_SECONDS) ||
        !(cfg.reply_timeout_seconds > 0 && cfg.reply_timeout_seconds <= MAX_SECONDS))
        __builtin_trap();
    free(cfg.socket_path);
    free(cfg.cni_version);

    struct buf raw = {0};
    buf_append(&raw, data, size);
    size_t from = 0;
    size_t hdr = header_end(&raw, &from);
    if (hdr) {
        struct head h;
        if (hdr > raw.len)
            __builtin_trap();
        if (parse_head(raw.data, hdr, &h) && (h.status_line_len > hdr || h.exit_code > 255))
            __builtin_trap();
    }
    buf_free(&raw);

    struct buf body = {0};
    buf_json_string(&body, text, size);
    buf_free(&body);
    return 0;
}
