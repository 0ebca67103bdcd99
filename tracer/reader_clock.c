/* reader_clock.c: a rank's times on rank 0's clock: the multi-process
 * meta keys checked at open, the clock they describe, and the exact map
 * from a rank's time onto rank 0's. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "reader_int.h"

/* ---- ranks on one clock (docs/trace-format.md, "Ranks on one clock") ---- */

static const char *const clock_keys[6] = {"clock_sync_ns",       "clock_offset_ns",       "clock_uncertainty_ns",
                                          "clock_sync_close_ns", "clock_offset_close_ns", "clock_uncertainty_close_ns"};

/* A meta value known to be decimal (check_rows) as an int64; -1 when it
 * does not fit. */
static int meta_i64(const char *s, int64_t *out)
{
    errno = 0;
    char *end;
    long long v = strtoll(s, &end, 10);
    if (errno || *end) return -1;
    *out = v;
    return 0;
}

/* The clock map errors (absent in traces written before they were
 * measured): each pair within int64 and whole, half brackets >= 0. */
static const char *const map_keys[4] = {"clock_map_error_ns", "clock_map_half_bracket_ns",
                                        "clock_map_error_close_ns", "clock_map_half_bracket_close_ns"};

static int check_map_keys(st_reader *r)
{
    int64_t v[4] = {0, 0, 0, 0};
    int has[4];
    for (int i = 0; i < 4; i++) {
        const char *s = st_rd_meta(r, map_keys[i]);
        if (s && meta_i64(s, &v[i]))
            return st_set_error(ST_ECORRUPT, "trace table 'meta': key '%s' is '%.32s%s', past 64 bits", map_keys[i], s,
                                strlen(s) > 32 ? "..." : "");
        has[i] = s != NULL;
    }
    for (int m = 0; m < 2; m++) {
        if (has[2 * m] != has[2 * m + 1])
            return st_set_error(ST_ECORRUPT, "trace table 'meta': keys '%s' and '%s' go together (only '%s' present)",
                                map_keys[2 * m], map_keys[2 * m + 1], map_keys[2 * m + !has[2 * m]]);
        if (has[2 * m + 1] && v[2 * m + 1] < 0)
            return st_set_error(ST_ECORRUPT, "trace table 'meta': key '%s' is %lld, a negative half bracket",
                                map_keys[2 * m + 1], (long long)v[2 * m + 1]);
    }
    return ST_OK;
}

/* The multi-process keys: run_id's alphabet and length; the clock keys,
 * local_rank and device within int64; each measurement whole (its three
 * keys or none), the close one only with the open one, uncertainties >= 0;
 * the clock map errors (check_map_keys). */
int st_rd_check_rank_meta(st_reader *r)
{
    const char *id = st_rd_meta(r, "run_id");
    if (id) {
        size_t n = strlen(id);
        int ok = n >= 1 && n <= 64;
        for (size_t i = 0; ok && i < n; i++) {
            char c = id[i];
            ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                 c == '_' || c == '-';
        }
        if (!ok) {
            char shown[40];
            size_t k = 0;
            for (; id[k] && k < 32; k++) shown[k] = (unsigned char)id[k] < 0x20 || id[k] == 0x7f ? '?' : id[k];
            shown[k] = '\0';
            return st_set_error(ST_ECORRUPT,
                                "trace table 'meta': key 'run_id' is '%s%s', not 1 to 64 bytes of [A-Za-z0-9._-]",
                                shown, n > 32 ? "..." : "");
        }
    }
    static const char *const wide[] = {"local_rank", "device", "clock_drift_ppb"};
    int64_t v[6];
    int has[6];
    for (int i = 0; i < 9; i++) {
        const char *key = i < 6 ? clock_keys[i] : wide[i - 6];
        const char *s = st_rd_meta(r, key);
        int64_t x = 0;
        if (s && meta_i64(s, &x))
            return st_set_error(ST_ECORRUPT, "trace table 'meta': key '%s' is '%.32s%s', past 64 bits", key, s,
                                strlen(s) > 32 ? "..." : "");
        if (i < 6) {
            has[i] = s != NULL;
            v[i] = x;
        }
    }
    for (int m = 0; m < 2; m++) {
        int n = has[3 * m] + has[3 * m + 1] + has[3 * m + 2];
        if (n != 0 && n != 3)
            return st_set_error(ST_ECORRUPT, "trace table 'meta': keys '%s', '%s' and '%s' go together (%s of them present)",
                                clock_keys[3 * m], clock_keys[3 * m + 1], clock_keys[3 * m + 2], n == 1 ? "one" : "two");
        if (n && v[3 * m + 2] < 0)
            return st_set_error(ST_ECORRUPT, "trace table 'meta': key '%s' is %lld, a negative uncertainty",
                                clock_keys[3 * m + 2], (long long)v[3 * m + 2]);
    }
    if (has[3] && !has[0])
        return st_set_error(ST_ECORRUPT, "trace table 'meta': the close measurement '%s' without the open one '%s'",
                            clock_keys[4], clock_keys[1]);
    return check_map_keys(r);
}

void st_reader_rank_clock(const st_reader *r, st_rank_clock *out)
{
    memset(out, 0, sizeof *out);
    int64_t v[6] = {0, 0, 0, 0, 0, 0};
    int has[6];
    for (int i = 0; i < 6; i++) {
        const char *s = st_rd_meta(r, clock_keys[i]);
        has[i] = s && meta_i64(s, &v[i]) == 0;
    }
    if (has[0] && has[1] && has[2]) {
        out->has_open = 1;
        out->sync_ns = v[0];
        out->offset_ns = v[1];
        out->uncertainty_ns = v[2];
        if (has[3] && has[4] && has[5]) {
            out->has_close = 1;
            out->sync_close_ns = v[3];
            out->offset_close_ns = v[4];
            out->uncertainty_close_ns = v[5];
        }
    }
}

/* |x - y| of two int64s, exactly: at most 2^64 - 1, so it fits in a uint64
 * (the unsigned subtraction wraps to the true distance). */
static uint64_t distance_u64(int64_t x, int64_t y)
{
    return x >= y ? (uint64_t)x - (uint64_t)y : (uint64_t)y - (uint64_t)x;
}

/* Exact on every input, with no intermediate out of its type's range:
 * t + offset is within +-2^64; the drift term's two factors |t - sync| and
 * |offset_close - offset| are each at most 2^64 - 1, so their product fits
 * in an unsigned 128-bit integer (< 2^128), and is divided there by the
 * span (1 to 2^64 - 1) before its sign is applied; a quotient past 2^66
 * cannot bring the sum back within 64 bits, so it is refused before it is
 * added. Truncation of the magnitude is truncation toward zero. */
int st_rank_clock_map(const st_rank_clock *c, int64_t t_ns, int64_t *out)
{
    __int128 m = t_ns;
    if (c->has_open) {
        m += c->offset_ns;
        if (c->has_close && c->sync_close_ns > c->sync_ns) {
            uint64_t dt = distance_u64(t_ns, c->sync_ns);
            uint64_t doff = distance_u64(c->offset_close_ns, c->offset_ns);
            uint64_t span = (uint64_t)c->sync_close_ns - (uint64_t)c->sync_ns; /* > 0 */
            unsigned __int128 q = (unsigned __int128)dt * doff / span;
            int negative = (t_ns < c->sync_ns) != (c->offset_close_ns < c->offset_ns);
            if (q > ((unsigned __int128)1 << 66)) m = negative ? -((__int128)1 << 66) : ((__int128)1 << 66);
            else m += negative ? -(__int128)q : (__int128)q;
        }
    }
    if (m < INT64_MIN || m > INT64_MAX)
        return st_set_error(ST_ECORRUPT, "time %lld does not map onto rank 0's clock within 64 bits",
                            (long long)t_ns);
    *out = (int64_t)m;
    return ST_OK;
}

int64_t st_rank_clock_uncertainty(const st_rank_clock *c)
{
    if (!c->has_open) return 0;
    if (c->has_close && c->uncertainty_close_ns > c->uncertainty_ns) return c->uncertainty_close_ns;
    return c->uncertainty_ns;
}
