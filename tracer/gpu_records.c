/* gpu_records.c: which GPU activity st_gpu_start asks CUPTI for, as a
 * record-set spec (st_options.gpu_records, or the STAGETRACE_GPU_RECORDS
 * environment variable; docs/tracer.md, "GPU activity"): parsed here and
 * written back in one canonical form for meta gpu_records. No CUPTI in this
 * file, so the parser is built and tested on every machine. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "st_gpu_records.h"
#include "st_internal.h"

static const struct {
    const char *name;
    unsigned bits;
} kind_names[] = {
    {"kernel", ST_GPU_REC_KERNEL},
    {"memcpy", ST_GPU_REC_MEMCPY},
    {"memset", ST_GPU_REC_MEMSET},
    {"sync", ST_GPU_REC_SYNC},
    {"runtime", ST_GPU_REC_RUNTIME},
    {"driver", ST_GPU_REC_DRIVER},
    {"runtime-launch", ST_GPU_REC_RUNTIME_LAUNCH},
    {"driver-launch", ST_GPU_REC_DRIVER_LAUNCH},
};

void st_gpu_config_default(st_gpu_config *c)
{
    c->kinds = ST_GPU_REC_DEFAULT;
    c->buffer_kb = ST_GPU_BUFFER_KB_DEFAULT;
    c->flush_ms = ST_GPU_FLUSH_MS_DEFAULT;
    c->zeroed = 0;
    c->every_steps = 1;
}

/* "N" with N in [lo, hi]: 0, or -1. */
static int parse_uint(const char *s, size_t len, unsigned long lo, unsigned long hi, uint32_t *out)
{
    if (len == 0 || len > 9) return -1;
    unsigned long v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        v = v * 10 + (unsigned long)(s[i] - '0');
    }
    if (v < lo || v > hi) return -1;
    *out = (uint32_t)v;
    return 0;
}

int st_gpu_config_parse(const char *spec, st_gpu_config *out, char *err, size_t err_size)
{
    st_gpu_config c;
    st_gpu_config_default(&c);
    if (!spec) {
        *out = c;
        return 0;
    }
    c.kinds = 0;
    int any_kind = 0;
    const char *p = spec;
    for (;;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        int ok = 0;
        if (len == 3 && memcmp(p, "all", 3) == 0) {
            c.kinds |= ST_GPU_REC_ALL;
            ok = any_kind = 1;
        } else if (len == 7 && memcmp(p, "default", 7) == 0) {
            c.kinds |= ST_GPU_REC_DEFAULT;
            ok = any_kind = 1;
        } else if (len == 4 && memcmp(p, "none", 4) == 0) {
            ok = any_kind = 1;
        } else if (len == 6 && memcmp(p, "zeroed", 6) == 0) {
            c.zeroed = 1;
            ok = 1;
        } else if (len > 10 && memcmp(p, "buffer_kb=", 10) == 0) {
            ok = parse_uint(p + 10, len - 10, ST_GPU_BUFFER_KB_MIN, ST_GPU_BUFFER_KB_MAX, &c.buffer_kb) == 0;
            if (!ok) {
                snprintf(err, err_size, "GPU records '%s': buffer_kb must be a whole number from %u to %u",
                         spec, ST_GPU_BUFFER_KB_MIN, ST_GPU_BUFFER_KB_MAX);
                return -1;
            }
        } else if (len > 9 && memcmp(p, "flush_ms=", 9) == 0) {
            ok = parse_uint(p + 9, len - 9, 0, ST_GPU_FLUSH_MS_MAX, &c.flush_ms) == 0;
            if (!ok) {
                snprintf(err, err_size, "GPU records '%s': flush_ms must be a whole number from 0 to %u", spec,
                         ST_GPU_FLUSH_MS_MAX);
                return -1;
            }
        } else if (len > 12 && memcmp(p, "every_steps=", 12) == 0) {
            ok = parse_uint(p + 12, len - 12, 1, ST_GPU_EVERY_STEPS_MAX, &c.every_steps) == 0;
            if (!ok) {
                snprintf(err, err_size, "GPU records '%s': every_steps must be a whole number from 1 to %u", spec,
                         ST_GPU_EVERY_STEPS_MAX);
                return -1;
            }
        } else {
            for (size_t i = 0; i < sizeof kind_names / sizeof kind_names[0]; i++)
                if (strlen(kind_names[i].name) == len && memcmp(p, kind_names[i].name, len) == 0) {
                    c.kinds |= kind_names[i].bits;
                    ok = any_kind = 1;
                }
        }
        if (!ok) {
            snprintf(err, err_size,
                     "GPU records '%s': unknown item '%.*s' (kinds: all, default, none, kernel, memcpy, memset, "
                     "sync, runtime, driver, runtime-launch, driver-launch; options: buffer_kb=N, flush_ms=N, "
                     "zeroed, every_steps=N)",
                     spec, (int)(len > 40 ? 40 : len), p);
            return -1;
        }
        if (!end) break;
        p = end + 1;
    }
    /* only options given: the default kinds, or with the sampled capture the kinds it can switch */
    if (!any_kind) c.kinds = c.every_steps > 1 ? ST_GPU_REC_SAMPLED : ST_GPU_REC_DEFAULT;
    if (c.every_steps > 1 && (c.kinds & (ST_GPU_REC_MEMCPY | ST_GPU_REC_MEMSET | ST_GPU_REC_SYNC))) {
        snprintf(err, err_size,
                 "GPU records '%s': every_steps=%u cannot record memcpy, memset or sync (CUPTI crashes when the "
                 "kernel records are switched often with those on); use kernel,runtime-launch,driver-launch,"
                 "every_steps=%u or every_steps=%u alone",
                 spec, c.every_steps, c.every_steps, c.every_steps);
        return -1;
    }
    /* The full API set holds the launch subset. */
    if (c.kinds & ST_GPU_REC_RUNTIME) c.kinds &= ~(unsigned)ST_GPU_REC_RUNTIME_LAUNCH;
    if (c.kinds & ST_GPU_REC_DRIVER) c.kinds &= ~(unsigned)ST_GPU_REC_DRIVER_LAUNCH;
    *out = c;
    return 0;
}

void st_gpu_config_format(const st_gpu_config *c, char *buf, size_t size)
{
    size_t n = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < sizeof kind_names / sizeof kind_names[0]; i++)
        if (c->kinds & kind_names[i].bits)
            n += (size_t)snprintf(buf + n, n < size ? size - n : 0, "%s%s", n ? "," : "", kind_names[i].name);
    if (!c->kinds) n += (size_t)snprintf(buf + n, n < size ? size - n : 0, "none");
    n += (size_t)snprintf(buf + n, n < size ? size - n : 0, ",buffer_kb=%u,flush_ms=%u%s", c->buffer_kb,
                          c->flush_ms, c->zeroed ? ",zeroed" : "");
    if (c->every_steps > 1)
        n += (size_t)snprintf(buf + n, n < size ? size - n : 0, ",every_steps=%u", c->every_steps);
    if (n >= size && size) buf[size - 1] = '\0';
}

/* Whether an API function (by its CUPTI name, version suffix or not) is one
 * of the launch subset: it launches work, copies, sets memory, waits, or
 * polls a stream or event (a host that waits by polling: analyze gpu's
 * polls). */
int st_gpu_api_is_launch(const char *name)
{
    static const char *const prefixes[] = {
        "cudaLaunch", "cudaGraphLaunch", "cudaMemcpy", "cudaMemset", "cudaStreamSynchronize",
        "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaStreamWaitEvent", "cudaStreamQuery",
        "cudaEventQuery", "cuLaunch", "cuGraphLaunch", "cuMemcpy", "cuMemset", "cuStreamSynchronize",
        "cuCtxSynchronize", "cuEventSynchronize", "cuStreamWaitEvent", "cuStreamQuery", "cuEventQuery",
    };
    if (!name) return 0;
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++)
        if (strncmp(name, prefixes[i], strlen(prefixes[i])) == 0) return 1;
    return 0;
}
