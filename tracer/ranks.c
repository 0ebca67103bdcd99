/* ranks.c: what the library does for a multi-process run. It never talks to
 * another process itself: the program (the trainer over MPI, the Python
 * package over its launcher) exchanges clock probes with rank 0 and hands
 * them here. This file names each rank's file, picks the best probe,
 * widens its uncertainty by both ends' clock map errors, and queues the
 * measurements for the writer, which stores them in meta at its next
 * commit (docs/tracer.md, "Many processes"; docs/trace-format.md, "Ranks
 * on one clock"). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "st_internal.h"

int st_rank_path(const char *path, int rank, int world_size, char *buf, size_t size)
{
    if (!path || !*path || !buf || size == 0)
        return st_set_error(ST_EINVAL, "st_rank_path: no path or no buffer");
    if (world_size < 1 || rank < 0 || rank >= world_size)
        return st_set_error(ST_EINVAL, "rank %d is out of range for world size %d", rank, world_size);
    size_t len = strlen(path);
    int n;
    if (world_size == 1) {
        n = snprintf(buf, size, "%s", path);
    } else {
        struct stat sb;
        int is_dir = path[len - 1] == '/' || (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode));
        const char *ext = ".sqlite";
        size_t ext_len = strlen(ext);
        if (is_dir)
            n = snprintf(buf, size, "%s%srank%d.sqlite", path, path[len - 1] == '/' ? "" : "/", rank);
        else if (len > ext_len && strcmp(path + len - ext_len, ext) == 0)
            n = snprintf(buf, size, "%.*s.rank%d.sqlite", (int)(len - ext_len), path, rank);
        else
            n = snprintf(buf, size, "%s.rank%d.sqlite", path, rank);
    }
    if (n < 0 || (size_t)n >= size)
        return st_set_error(ST_EINVAL, "the trace path for rank %d of '%s' is too long", rank, path);
    return ST_OK;
}

int st_clock_estimate(const st_clock_probe *probes, int n, st_clock_sync *out)
{
    if (!probes || !out || n <= 0) return st_set_error(ST_EINVAL, "st_clock_estimate: no probes");
    int best = -1;
    int64_t best_rtt = 0;
    for (int i = 0; i < n; i++) {
        const st_clock_probe *p = &probes[i];
        if (p->recv_ns < p->send_ns) continue;
        /* a round trip that overflows is no use either */
        if (p->send_ns < 0 && p->recv_ns > INT64_MAX + p->send_ns) continue;
        int64_t rtt = p->recv_ns - p->send_ns;
        if (best < 0 || rtt < best_rtt) {
            best = i;
            best_rtt = rtt;
        }
    }
    if (best < 0)
        return st_set_error(ST_EINVAL, "st_clock_estimate: no probe came back after it left");
    const st_clock_probe *p = &probes[best];
    int64_t local = p->send_ns + best_rtt / 2;
    __int128 offset = (__int128)p->remote_ns - local;
    if (offset > INT64_MAX || offset < INT64_MIN)
        return st_set_error(ST_EINVAL, "st_clock_estimate: the clocks differ by more than 64 bits hold");
    out->local_ns = local;
    out->offset_ns = (int64_t)offset;
    out->uncertainty_ns = best_rtt / 2 + (best_rtt & 1);
    return ST_OK;
}

int st_clock_sync_record(st_trace *t, int at, const st_clock_sync *sync)
{
    if (at != ST_CLOCK_AT_OPEN && at != ST_CLOCK_AT_CLOSE)
        return st_set_error(ST_EINVAL, "st_clock_sync_record: 'at' must be ST_CLOCK_AT_OPEN or ST_CLOCK_AT_CLOSE");
    if (!sync) return st_set_error(ST_EINVAL, "st_clock_sync_record: no measurement");
    if (sync->uncertainty_ns < 0)
        return st_set_error(ST_EINVAL, "st_clock_sync_record: negative uncertainty %" PRId64,
                            sync->uncertainty_ns);
    if (!t) return st_set_error(ST_ESTATE, "st_clock_sync_record: no trace");
    if (!t->opt.enabled) return ST_OK;
    pthread_mutex_lock(&t->lock);
    t->clock_sync[at] = *sync;
    t->clock_sync_state[at] = 1; /* set, not yet written */
    pthread_mutex_unlock(&t->lock);
    return ST_OK;
}

int st_clock_map_measure(st_clock_map *out)
{
    if (!out) return st_set_error(ST_EINVAL, "st_clock_map_measure: no result");
    st_clock_map_error(&out->error_ns, &out->half_bracket_ns);
    return ST_OK;
}

/* |error| + half bracket of one map measurement, exactly (|INT64_MIN| too). */
static __int128 map_bound(const st_clock_map *m)
{
    __int128 e = m->error_ns;
    return (e < 0 ? -e : e) + m->half_bracket_ns;
}

int st_clock_sync_widen(st_clock_sync *sync, const st_clock_map *own, const st_clock_map *rank0)
{
    if (!sync || !own || !rank0) return st_set_error(ST_EINVAL, "st_clock_sync_widen: a NULL argument");
    if (own->half_bracket_ns < 0 || rank0->half_bracket_ns < 0)
        return st_set_error(ST_EINVAL, "st_clock_sync_widen: negative half bracket %" PRId64,
                            own->half_bracket_ns < 0 ? own->half_bracket_ns : rank0->half_bracket_ns);
    if (sync->uncertainty_ns < 0)
        return st_set_error(ST_EINVAL, "st_clock_sync_widen: negative uncertainty %" PRId64, sync->uncertainty_ns);
    __int128 u = (__int128)sync->uncertainty_ns + map_bound(own) + map_bound(rank0);
    sync->uncertainty_ns = u > INT64_MAX ? INT64_MAX : (int64_t)u;
    return ST_OK;
}

int st_clock_map_record(st_trace *t, int at, const st_clock_map *map)
{
    if (at != ST_CLOCK_AT_OPEN && at != ST_CLOCK_AT_CLOSE)
        return st_set_error(ST_EINVAL, "st_clock_map_record: 'at' must be ST_CLOCK_AT_OPEN or ST_CLOCK_AT_CLOSE");
    if (!map) return st_set_error(ST_EINVAL, "st_clock_map_record: no measurement");
    if (map->half_bracket_ns < 0)
        return st_set_error(ST_EINVAL, "st_clock_map_record: negative half bracket %" PRId64, map->half_bracket_ns);
    if (!t) return st_set_error(ST_ESTATE, "st_clock_map_record: no trace");
    if (!t->opt.enabled) return ST_OK;
    pthread_mutex_lock(&t->lock);
    t->clock_map[at] = *map;
    t->clock_map_state[at] = 1; /* set, not yet written */
    pthread_mutex_unlock(&t->lock);
    return ST_OK;
}

int st_clock_shift_from_env(int rank, int64_t *shift_ns)
{
    *shift_ns = 0;
    const char *v = getenv("ST_TEST_CLOCK_SHIFT_NS");
    if (!v || !*v) return ST_OK;
    char *end;
    errno = 0;
    long r = strtol(v, &end, 10);
    int ok = end != v && *end == ':' && errno == 0 && r >= 0 && r <= INT32_MAX;
    long long ns = 0;
    if (ok) {
        const char *s = end + 1;
        errno = 0;
        ns = strtoll(s, &end, 10);
        ok = end != s && *end == 0 && errno == 0;
    }
    if (!ok)
        return st_set_error(ST_EINVAL,
                            "ST_TEST_CLOCK_SHIFT_NS='%.64s' is malformed: use <rank>:<nanoseconds>", v);
    if (r == rank) *shift_ns = ns;
    return ST_OK;
}
