/* reader_gpu.c: the reader's GPU activity: the gpu_chunks records of a
 * file, each device record joined to the API call that launched it
 * (correlation id), and that call's thread and innermost stage; the GPU
 * kind names and the chunk headers' per-device counts. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reader_int.h"

/* The text, cut to at most max bytes ending in "..." (at a UTF-8 character
 * boundary) when it is longer. */
static char *dup_bounded(sqlite3_stmt *st, int col, size_t max)
{
    const char *s = (const char *)sqlite3_column_text(st, col);
    size_t n = s ? (size_t)sqlite3_column_bytes(st, col) : 0;
    if (n <= max) return strdup(s ? s : "");
    size_t keep = max - 3;
    while (keep > 0 && ((unsigned char)s[keep] & 0xC0) == 0x80) keep--;
    char *out = malloc(keep + 4);
    if (!out) return NULL;
    memcpy(out, s, keep);
    memcpy(out + keep, "...", 4);
    return out;
}

/* ---- GPU activity ---- */

const char *st_gpu_kind_name(uint32_t kind)
{
    static const char *const n[] = {"?", "kernel", "memcpy", "memset", "sync", "api"};
    return kind <= ST_GPU_KIND_MAX ? n[kind] : "?";
}

int st_gpu_kind_is_device_work(uint32_t kind)
{
    return kind == ST_GPU_KERNEL || kind == ST_GPU_MEMCPY || kind == ST_GPU_MEMSET;
}

const char *st_gpu_copy_name(uint32_t copy)
{
    static const char *const n[] = {"other", "HtoD", "DtoH", "DtoD", "HtoH", "PtoP"};
    return copy <= ST_COPY_P2P ? n[copy] : "other";
}

const char *st_gpu_mem_name(uint32_t mem)
{
    static const char *const n[] = {"unknown", "pageable", "pinned", "device", "managed", "other"};
    return mem <= ST_MEM_OTHER ? n[mem] : "other";
}

int st_reader_has_gpu(st_reader *r) { return r->m->has_gpu(r); }

int st_rd_file_has_gpu(st_reader *r)
{
    int ok = st_rd_is_table(r->db, "gpu_chunks");
    if (ok <= 0) return ok < 0 ? st_rd_bad("gpu_chunks", sqlite3_errmsg(r->db)) : 0;
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(r->db, "SELECT 1 FROM main.gpu_chunks WHERE device >= 0 LIMIT 1", -1, &st, NULL) !=
        SQLITE_OK)
        return st_rd_bad("gpu_chunks", sqlite3_errmsg(r->db));
    int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) return st_rd_bad("gpu_chunks", sqlite3_errmsg(r->db));
    return rc == SQLITE_ROW;
}

/* Columns of a gpu_chunks row checked as it is read (the query returns
 * badly typed rows whatever the window, so that they are never passed over). */
#define GPU_TYPED "typeof(device), typeof(stream), typeof(t0_ns), typeof(t1_ns)"
#define GPU_MISTYPED \
    "typeof(device) <> 'integer' OR typeof(stream) <> 'integer' OR typeof(t0_ns) <> 'integer' OR " \
    "typeof(t1_ns) <> 'integer'"
static const char *const gpu_typed_names[] = {"device", "stream", "t0_ns", "t1_ns"};

static int gpu_corrupt(st_gpu_iter *it)
{
    return st_set_error(ST_ECORRUPT, "trace table 'gpu_chunks': chunk %lld (device %lld) is corrupt or truncated",
                        (long long)it->row_id, (long long)it->device);
}

static int gpu_load_names(st_gpu_iter *it)
{
    int ok = st_rd_is_table(it->r->db, "gpu_strings");
    if (ok <= 0) return ok < 0 ? st_rd_bad("gpu_strings", sqlite3_errmsg(it->r->db)) : ST_OK;
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(it->r->db, "SELECT id, value FROM main.gpu_strings", -1, &st, NULL) != SQLITE_OK)
        return st_rd_bad("gpu_strings", sqlite3_errmsg(it->r->db));
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t id;
        if (st_rd_int_col(st, 0, &id) || id < 0 || id >= 1 << 24) {
            sqlite3_finalize(st);
            return st_rd_bad("gpu_strings", "a row has a missing or out-of-range id");
        }
        if ((uint32_t)id >= it->n_names) {
            char **n = realloc(it->names, ((size_t)id + 1) * sizeof *n);
            if (!n) {
                sqlite3_finalize(st);
                return st_set_error(ST_ENOMEM, "out of memory");
            }
            for (uint32_t i = it->n_names; i <= (uint32_t)id; i++) n[i] = NULL;
            it->names = n;
            it->n_names = (uint32_t)id + 1;
        }
        free(it->names[id]);
        it->names[id] = dup_bounded(st, 1, ST_GPU_NAME_MAX);
        if (!it->names[id]) {
            sqlite3_finalize(st);
            return st_set_error(ST_ENOMEM, "out of memory");
        }
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) return st_rd_bad("gpu_strings", sqlite3_errmsg(it->r->db));
    return ST_OK;
}

/* gpu_threads (optional): the names of the launching threads the trace did
 * not register, by OS thread id, sorted for lookup. */
typedef struct gpu_tname {
    int64_t os_tid;
    char *name;
} gpu_tname;

static int cmp_tname(const void *a, const void *b)
{
    const gpu_tname *x = a, *y = b;
    return (x->os_tid > y->os_tid) - (x->os_tid < y->os_tid);
}

static int gpu_load_thread_names(st_gpu_iter *it)
{
    int ok = st_rd_is_table(it->r->db, "gpu_threads");
    if (ok <= 0) return ok < 0 ? st_rd_bad("gpu_threads", sqlite3_errmsg(it->r->db)) : ST_OK;
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(it->r->db, "SELECT os_tid, name FROM main.gpu_threads ORDER BY os_tid", -1, &st, NULL) !=
        SQLITE_OK)
        return st_rd_bad("gpu_threads", sqlite3_errmsg(it->r->db));
    int rc;
    uint32_t cap = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t tid;
        if (st_rd_int_col(st, 0, &tid) || tid <= 0 || sqlite3_column_type(st, 1) != SQLITE_TEXT) {
            sqlite3_finalize(st);
            return st_rd_bad("gpu_threads", "a row's os_tid is not a positive integer or its name is not text");
        }
        if (it->n_tnames == cap) {
            uint32_t nc = cap ? cap * 2 : 16;
            gpu_tname *a = nc > cap ? realloc(it->tnames, (size_t)nc * sizeof *a) : NULL;
            if (!a) {
                sqlite3_finalize(st);
                return st_set_error(ST_ENOMEM, "out of memory");
            }
            it->tnames = a;
            cap = nc;
        }
        char *name = dup_bounded(st, 1, ST_GPU_NAME_MAX);
        if (!name) {
            sqlite3_finalize(st);
            return st_set_error(ST_ENOMEM, "out of memory");
        }
        it->tnames[it->n_tnames++] = (gpu_tname){tid, name};
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) return st_rd_bad("gpu_threads", sqlite3_errmsg(it->r->db));
    if (it->n_tnames) qsort(it->tnames, it->n_tnames, sizeof *it->tnames, cmp_tname);
    return ST_OK;
}

static const char *gpu_thread_name(const st_gpu_iter *it, int64_t os_tid)
{
    if (!it->n_tnames || os_tid <= 0) return NULL;
    gpu_tname key = {os_tid, NULL};
    const gpu_tname *f = bsearch(&key, it->tnames, it->n_tnames, sizeof key, cmp_tname);
    return f ? f->name : NULL;
}

/* The launch join: correlation id -> the earliest API call with it. A slot
 * is made for each id a device record of the window carries (start_ns
 * INT64_MAX until its call is found), so that only those calls are kept:
 * most calls launch nothing (queries, polls, attribute reads). Open
 * addressing, at most half full; id 0, which no launch has, is never put. */
static api_slot *api_find(const st_gpu_iter *it, uint32_t corr)
{
    if (!it->api_cap) return NULL;
    size_t h = (corr * 2654435761u) & (it->api_cap - 1);
    while (it->api[h].used) {
        if (it->api[h].correlation == corr) return &it->api[h];
        h = (h + 1) & (it->api_cap - 1);
    }
    return NULL;
}

static int api_want(st_gpu_iter *it, uint32_t corr)
{
    if (!corr || api_find(it, corr)) return ST_OK;
    if ((it->api_len + 1) * 2 > it->api_cap) {
        size_t cap = it->api_cap ? it->api_cap * 2 : 1024;
        api_slot *t = calloc(cap, sizeof *t);
        if (!t) return st_set_error(ST_ENOMEM, "out of memory");
        for (size_t i = 0; i < it->api_cap; i++) {
            if (!it->api[i].used) continue;
            size_t h = (it->api[i].correlation * 2654435761u) & (cap - 1);
            while (t[h].used) h = (h + 1) & (cap - 1);
            t[h] = it->api[i];
        }
        free(it->api);
        it->api = t;
        it->api_cap = cap;
    }
    size_t h = (corr * 2654435761u) & (it->api_cap - 1);
    while (it->api[h].used) h = (h + 1) & (it->api_cap - 1);
    it->api[h] = (api_slot){corr, 1, 0, INT64_MAX};
    it->api_len++;
    return ST_OK;
}

/* Calls fn for every record of the gpu_chunks rows that sql selects (id,
 * n_records, data; ?1.. bound to args), each row checked and each chunk
 * decoded with bounds checks. device: for the messages. fn returns ST_OK
 * or an error, which stops the scan. */
typedef int (*gpu_rec_fn)(const st_gpu_rec *rec, void *arg);
static int gpu_scan(st_gpu_iter *it, const char *sql, const int64_t *args, int n_args, int64_t device, gpu_rec_fn fn,
                    void *arg)
{
    sqlite3 *db = it->r->db;
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) return st_rd_bad("gpu_chunks", sqlite3_errmsg(db));
    for (int i = 0; i < n_args; i++) sqlite3_bind_int64(st, i + 1, args[i]);
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t id, n = 0;
        if (st_rd_int_col(st, 0, &id)) {
            sqlite3_finalize(st);
            return st_rd_bad("gpu_chunks", "a chunk's id is not an integer");
        }
        int trc = st_rd_check_typed(st, 3, "gpu_chunks", id, gpu_typed_names, 4);
        if (!trc && st_rd_int_col(st, 1, &n))
            trc = st_set_error(ST_ECORRUPT, "trace table 'gpu_chunks': chunk %lld: column 'n_records' is %s, not an integer",
                               (long long)id, st_rd_type_name(sqlite3_column_type(st, 1)));
        if (!trc && (n < 0 || n > UINT32_MAX))
            trc = st_set_error(ST_ECORRUPT, "trace table 'gpu_chunks': chunk %lld: column 'n_records' is out of range",
                               (long long)id);
        if (!trc) trc = st_rd_check_blob(st, 2, "gpu_chunks", id);
        if (trc) {
            sqlite3_finalize(st);
            return trc;
        }
        st_gpu_cursor c;
        it->row_id = id;
        it->device = device;
        if (st_gpu_cursor_open(&c, sqlite3_column_blob(st, 2), (size_t)sqlite3_column_bytes(st, 2), (uint32_t)n)) {
            sqlite3_finalize(st);
            return gpu_corrupt(it);
        }
        st_gpu_rec rec;
        int k;
        while ((k = st_gpu_next(&c, &rec)) == 1)
            if ((k = fn(&rec, arg)) != ST_OK) break;
        if (k < 0) {
            sqlite3_finalize(st);
            return k == ST_ECORRUPT ? gpu_corrupt(it) : k;
        }
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) return st_rd_bad("gpu_chunks", sqlite3_errmsg(db));
    return ST_OK;
}

static int want_record(const st_gpu_rec *rec, void *arg)
{
    st_gpu_iter *it = arg;
    if (rec->kind == ST_GPU_API || rec->start_ns >= it->t1 || rec->start_ns + rec->dur_ns < it->t0) return ST_OK;
    return api_want(it, rec->correlation);
}

typedef struct api_ctx {
    st_gpu_iter *it;
    int64_t from;
} api_ctx;

static int api_record(const st_gpu_rec *rec, void *arg)
{
    api_ctx *a = arg;
    if (rec->kind != ST_GPU_API || rec->start_ns < a->from || rec->start_ns >= a->it->t1) return ST_OK;
    api_slot *s = api_find(a->it, rec->correlation);
    if (s && rec->start_ns < s->start_ns) { /* a runtime call and the driver call it makes share the id */
        s->os_tid = rec->os_tid;
        s->start_ns = rec->start_ns;
    }
    return ST_OK;
}

/* The join for the window's device records (of `device`, < 0 all): their
 * correlation ids, then the calls with those ids that start from
 * ST_GPU_LAUNCH_LOOKBACK_NS before the window to its end, so that memory
 * follows the window's records, not the trace. */
static int gpu_load_api(st_gpu_iter *it, int64_t device)
{
    int64_t want_args[3] = {device, it->t0, it->t1};
    int rc = gpu_scan(it,
                      "SELECT id, n_records, data, " GPU_TYPED " FROM main.gpu_chunks WHERE " GPU_MISTYPED
                      " OR (device >= 0 AND (?1 < 0 OR device = ?1) AND t1_ns >= ?2 AND t0_ns < ?3)",
                      want_args, 3, device, want_record, it);
    if (rc || !it->api_len) return rc;
    api_ctx a = {it, it->t0 < INT64_MIN + ST_GPU_LAUNCH_LOOKBACK_NS ? INT64_MIN : it->t0 - ST_GPU_LAUNCH_LOOKBACK_NS};
    int64_t api_args[2] = {a.from, it->t1};
    return gpu_scan(it,
                    "SELECT id, n_records, data, " GPU_TYPED " FROM main.gpu_chunks WHERE " GPU_MISTYPED
                    " OR (device < 0 AND t1_ns >= ?1 AND t0_ns < ?2)",
                    api_args, 2, -1, api_record, &a);
}

typedef struct range_ix {
    int64_t start, end;
    uint32_t stage, depth;
} range_ix;

static int cmp_range_ix(const void *a, const void *b)
{
    const range_ix *x = a, *y = b;
    if (x->start != y->start) return x->start < y->start ? -1 : 1;
    return x->depth < y->depth ? -1 : x->depth > y->depth;
}

static int gpu_load_ranges(st_gpu_iter *it, uint32_t index)
{
    thread_ranges *tr = &it->tr[index];
    tr->loaded = 1;
    st_range_iter *ri;
    int rc = st_range_iter_open(&ri, it->r, it->r->threads[index].id, INT64_MIN, INT64_MAX);
    if (rc) return rc;
    range_ix *v = NULL;
    size_t n = 0, cap = 0;
    st_range rg;
    while ((rc = st_range_iter_next(ri, &rg)) == 1) {
        if (n == cap) {
            cap = cap ? cap * 2 : 1024;
            range_ix *nv = realloc(v, cap * sizeof *nv);
            if (!nv) {
                rc = st_set_error(ST_ENOMEM, "out of memory");
                break;
            }
            v = nv;
        }
        v[n++] = (range_ix){rg.start_ns, rg.start_ns + rg.dur_ns, rg.stage, rg.depth};
    }
    st_range_iter_close(ri);
    if (rc < 0) {
        free(v);
        return rc;
    }
    if (n) qsort(v, n, sizeof *v, cmp_range_ix);
    tr->n = (uint32_t)n;
    tr->start = malloc((n + 1) * sizeof *tr->start);
    tr->end = malloc((n + 1) * sizeof *tr->end);
    tr->stage = malloc((n + 1) * sizeof *tr->stage);
    tr->parent = malloc((n + 1) * sizeof *tr->parent);
    if (!tr->start || !tr->end || !tr->stage || !tr->parent) {
        free(v);
        tr->n = 0;
        return st_set_error(ST_ENOMEM, "out of memory");
    }
    int32_t last_at[ST_MAX_DEPTH];
    for (int d = 0; d < ST_MAX_DEPTH; d++) last_at[d] = -1;
    for (size_t i = 0; i < n; i++) {
        uint32_t d = v[i].depth < ST_MAX_DEPTH ? v[i].depth : ST_MAX_DEPTH - 1;
        tr->start[i] = v[i].start;
        tr->end[i] = v[i].end;
        tr->stage[i] = v[i].stage;
        tr->parent[i] = d ? last_at[d - 1] : -1;
        last_at[d] = (int32_t)i;
    }
    free(v);
    return ST_OK;
}

/* The innermost range of the thread open at ts (start <= ts < end). */
static int64_t gpu_stage_at(const thread_ranges *tr, int64_t ts)
{
    uint32_t lo = 0, hi = tr->n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (tr->start[mid] <= ts)
            lo = mid + 1;
        else
            hi = mid;
    }
    int32_t j = (int32_t)lo - 1;
    for (int guard = 0; j >= 0 && guard <= ST_MAX_DEPTH; guard++, j = tr->parent[j])
        if (tr->start[j] <= ts && ts < tr->end[j]) return tr->stage[j];
    return -1;
}

static int gpu_iter_open(st_gpu_iter **out, st_reader *r, int64_t device, int64_t t0, int64_t t1, int api_mode)
{
    *out = NULL;
    st_gpu_iter *it = calloc(1, sizeof *it);
    if (!it) return st_set_error(ST_ENOMEM, "out of memory");
    it->m = r->m;
    it->r = r;
    it->t0 = t0;
    it->t1 = t1;
    it->api_mode = api_mode;
    int rc = r->m->gpu_open(it, device);
    if (rc) {
        st_gpu_iter_close(it);
        return rc;
    }
    *out = it;
    return ST_OK;
}

int st_rd_file_gpu_open(st_gpu_iter *it, int64_t device)
{
    st_reader *r = it->r;
    const int api_mode = it->api_mode;
    const int64_t t0 = it->t0, t1 = it->t1;
    int ok = st_rd_is_table(r->db, "gpu_chunks");
    int rc = ok < 0 ? st_rd_bad("gpu_chunks", sqlite3_errmsg(r->db)) : ST_OK;
    if (!rc && ok) {
        it->tr = calloc(r->n_threads ? r->n_threads : 1, sizeof *it->tr);
        if (!it->tr) rc = st_set_error(ST_ENOMEM, "out of memory");
        if (!rc) rc = gpu_load_names(it);
        if (!rc) rc = gpu_load_thread_names(it);
        if (!rc && !api_mode) rc = gpu_load_api(it, device);
        if (!rc && sqlite3_prepare_v2(r->db,
                                      api_mode ? "SELECT id, device, stream, n_records, data, " GPU_TYPED
                                                 " FROM main.gpu_chunks WHERE " GPU_MISTYPED " OR (device < 0 "
                                                 "AND ?1 = ?1 AND t1_ns >= ?2 AND t0_ns < ?3) ORDER BY stream, id"
                                               : "SELECT id, device, stream, n_records, data, " GPU_TYPED
                                                 " FROM main.gpu_chunks WHERE " GPU_MISTYPED " OR (device >= 0 "
                                                 "AND (?1 < 0 OR device = ?1) AND t1_ns >= ?2 AND t0_ns < ?3) "
                                                 "ORDER BY device, stream, id",
                                      -1, &it->st, NULL) != SQLITE_OK)
            rc = st_rd_bad("gpu_chunks", sqlite3_errmsg(r->db));
        if (!rc) {
            sqlite3_bind_int64(it->st, 1, device);
            sqlite3_bind_int64(it->st, 2, t0);
            sqlite3_bind_int64(it->st, 3, t1);
        }
    }
    return rc;
}

int st_gpu_iter_open(st_gpu_iter **out, st_reader *r, int64_t device, int64_t t0, int64_t t1)
{
    return gpu_iter_open(out, r, device, t0, t1, 0);
}

int st_gpu_api_iter_open(st_gpu_iter **out, st_reader *r, int64_t t0, int64_t t1)
{
    return gpu_iter_open(out, r, -1, t0, t1, 1);
}

/* The traced thread with this OS thread id, and its innermost stage at ts. */
static int gpu_thread_at(st_gpu_iter *it, int64_t os_tid, int64_t ts, st_gpu_row *out)
{
    for (uint32_t i = 0; i < it->r->n_threads; i++) {
        if (it->r->threads[i].os_tid != os_tid) continue;
        out->thread = it->r->threads[i].id;
        if (!it->tr[i].loaded) {
            int lrc = gpu_load_ranges(it, i);
            if (lrc) return lrc;
        }
        out->stage = gpu_stage_at(&it->tr[i], ts);
        break;
    }
    return ST_OK;
}

int st_gpu_iter_next(st_gpu_iter *it, st_gpu_row *out) { return it->m->gpu_next(it, out); }

int st_rd_file_gpu_next(st_gpu_iter *it, st_gpu_row *out)
{
    if (!it->st) return 0;
    for (;;) {
        if (!it->in_chunk) {
            int rc = sqlite3_step(it->st);
            if (rc == SQLITE_DONE) return 0;
            if (rc != SQLITE_ROW) return st_rd_bad("gpu_chunks", sqlite3_errmsg(it->r->db));
            if (st_rd_int_col(it->st, 0, &it->row_id)) return st_rd_bad("gpu_chunks", "a chunk's id is not an integer");
            int trc = st_rd_check_typed(it->st, 5, "gpu_chunks", it->row_id, gpu_typed_names, 4);
            if (!trc && st_rd_int_col(it->st, 3, &it->n_items))
                trc = st_set_error(ST_ECORRUPT,
                                   "trace table 'gpu_chunks': chunk %lld: column 'n_records' is %s, not an integer",
                                   (long long)it->row_id, st_rd_type_name(sqlite3_column_type(it->st, 3)));
            if (!trc) trc = st_rd_check_blob(it->st, 4, "gpu_chunks", it->row_id);
            if (trc) return trc;
            it->device = sqlite3_column_int64(it->st, 1);
            it->stream = sqlite3_column_int64(it->st, 2);
            if (it->n_items < 0 || it->n_items > UINT32_MAX || it->device > INT32_MAX || it->stream < 0 ||
                it->stream > UINT32_MAX)
                return st_rd_bad("gpu_chunks", "a chunk row has an out-of-range column");
            if (st_gpu_cursor_open(&it->cur, sqlite3_column_blob(it->st, 4),
                                   (size_t)sqlite3_column_bytes(it->st, 4), (uint32_t)it->n_items))
                return gpu_corrupt(it);
            it->in_chunk = 1;
        }
        st_gpu_rec rec;
        int rc = st_gpu_next(&it->cur, &rec);
        if (rc == 0) {
            it->in_chunk = 0;
            continue;
        }
        if (rc < 0) return gpu_corrupt(it);
        if ((rec.kind == ST_GPU_API) != it->api_mode) continue;
        int64_t end = rec.start_ns + rec.dur_ns;
        if (rec.start_ns >= it->t1) continue;
        if (end < it->t0 || (end == it->t0 && rec.dur_ns != 0)) continue;
        memset(out, 0, sizeof *out);
        out->device = (int32_t)it->device;
        out->stream = (uint32_t)it->stream;
        out->rec = rec;
        out->name = rec.name && rec.name - 1 < it->n_names ? it->names[rec.name - 1] : NULL;
        out->thread = -1;
        out->stage = -1;
        out->launch_ns = INT64_MIN;
        if (it->api_mode) {
            out->launch_ns = rec.start_ns;
            out->launch_os_tid = rec.os_tid > 0 ? rec.os_tid : 0;
            out->launch_thread = gpu_thread_name(it, rec.os_tid);
            int trc = gpu_thread_at(it, rec.os_tid, rec.start_ns, out);
            if (trc) return trc;
            return 1;
        }
        const api_slot *api = api_find(it, rec.correlation);
        if (api && api->start_ns != INT64_MAX) {
            out->launch_ns = api->start_ns;
            out->launch_os_tid = api->os_tid > 0 ? api->os_tid : 0;
            out->launch_thread = gpu_thread_name(it, api->os_tid);
            int trc = gpu_thread_at(it, api->os_tid, api->start_ns, out);
            if (trc) return trc;
        }
        return 1;
    }
}

void st_gpu_iter_close(st_gpu_iter *it)
{
    if (!it) return;
    it->m->gpu_close(it);
    for (uint32_t i = 0; i < it->n_names; i++) free(it->names[i]);
    free(it->names);
    for (uint32_t i = 0; i < it->n_tnames; i++) free(it->tnames[i].name);
    free(it->tnames);
    free(it->api);
    for (uint32_t i = 0; it->tr && i < it->r->n_threads; i++) {
        free(it->tr[i].start);
        free(it->tr[i].end);
        free(it->tr[i].stage);
        free(it->tr[i].parent);
    }
    free(it->tr);
    free(it);
}

void st_rd_file_gpu_close(st_gpu_iter *it) { sqlite3_finalize(it->st); }

int64_t st_gpu_iter_stage_at(st_gpu_iter *it, int64_t thread, int64_t ts_ns)
{
    if (!it->tr || thread < 0 || thread >= (int64_t)it->r->thread_index_len) return -1;
    int32_t i = it->r->thread_index[thread];
    if (i < 0) return -1;
    if (!it->tr[i].loaded) {
        int rc = gpu_load_ranges(it, (uint32_t)i);
        if (rc) return rc < -1 ? rc : -2;
    }
    return gpu_stage_at(&it->tr[i], ts_ns);
}

void st_gpu_iter_pos(const st_gpu_iter *it, int64_t *chunk_id, uint32_t *index)
{
    it->m->gpu_pos(it, chunk_id, index);
}

void st_rd_file_gpu_pos(const st_gpu_iter *it, int64_t *chunk_id, uint32_t *index)
{
    *chunk_id = it->row_id;
    *index = (uint32_t)it->n_items - it->cur.remaining - 1;
}

int st_reader_gpu_records_per_device(st_reader *r, st_chunk_count **out, uint32_t *n)
{
    return r->m->gpu_records_per_device(r, out, n);
}

int st_rd_file_gpu_records_per_device(st_reader *r, st_chunk_count **out, uint32_t *n)
{
    return st_rd_chunk_counts(r, "gpu_chunks",
                        "SELECT device, sum(max(n_records, 0)) FROM main.gpu_chunks GROUP BY device ORDER BY device", 1,
                        out, n);
}

int st_reader_gpu_devices(st_reader *r, int32_t **out, uint32_t *n)
{
    *out = NULL;
    *n = 0;
    return r->m->gpu_devices(r, out, n);
}

int st_rd_file_gpu_devices(st_reader *r, int32_t **out, uint32_t *n)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(r->db, "SELECT DISTINCT device FROM main.gpu_chunks WHERE device >= 0 ORDER BY device", -1,
                           &st, NULL) != SQLITE_OK)
        return st_rd_unreadable("gpu_chunks", r->db);
    int rc, err = ST_OK;
    int32_t *v = NULL;
    uint32_t len = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (sqlite3_column_type(st, 0) != SQLITE_INTEGER || sqlite3_column_int64(st, 0) > INT32_MAX) continue;
        int32_t *nv = realloc(v, (len + 1) * sizeof *nv);
        if (!nv) {
            err = st_set_error(ST_ENOMEM, "out of memory");
            break;
        }
        v = nv;
        v[len++] = (int32_t)sqlite3_column_int64(st, 0);
    }
    if (!err && rc != SQLITE_DONE) err = st_rd_unreadable("gpu_chunks", r->db);
    sqlite3_finalize(st);
    if (err) {
        free(v);
        return err;
    }
    *out = v;
    *n = len;
    return ST_OK;
}

int st_reader_gpu_span(st_reader *r, st_gpu_headers *out)
{
    memset(out, 0, sizeof *out);
    return r->m->gpu_span(r, out);
}

int st_rd_file_gpu_span(st_reader *r, st_gpu_headers *out)
{
    int ok = st_rd_is_table(r->db, "gpu_chunks");
    if (ok <= 0) return ok < 0 ? st_rd_bad("gpu_chunks", sqlite3_errmsg(r->db)) : ST_OK;
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(r->db,
                           "SELECT count(*), total(max(n_records, 0)), min(t0_ns), max(t1_ns) FROM main.gpu_chunks "
                           "WHERE typeof(device) = 'integer' AND device >= 0 AND device <= 2147483647",
                           -1, &st, NULL) != SQLITE_OK)
        return st_rd_unreadable("gpu_chunks", r->db);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW && sqlite3_column_int64(st, 0) > 0 && sqlite3_column_type(st, 2) == SQLITE_INTEGER &&
        sqlite3_column_type(st, 3) == SQLITE_INTEGER) {
        double n = sqlite3_column_double(st, 1); /* total(): a sum past int64 is capped, not an error */
        out->has = 1;
        out->n_records = n >= 9.2e18 ? INT64_MAX : (int64_t)n;
        out->t0_ns = sqlite3_column_int64(st, 2);
        out->t1_ns = sqlite3_column_int64(st, 3);
    }
    int err = rc == SQLITE_ROW || rc == SQLITE_DONE ? ST_OK : st_rd_unreadable("gpu_chunks", r->db);
    sqlite3_finalize(st);
    return err;
}

int st_reader_gpu_headers(st_reader *r, int64_t device, int64_t t0_ns, int64_t t1_ns, st_gpu_headers *out)
{
    memset(out, 0, sizeof *out);
    return r->m->gpu_headers(r, device, t0_ns, t1_ns, out);
}

int st_rd_file_gpu_headers(st_reader *r, int64_t device, int64_t t0_ns, int64_t t1_ns, st_gpu_headers *out)
{
    sqlite3_stmt *st;
    /* ?1 is bound either way; "device < 0" leaves it unused */
    const char *sql = device < 0 ? "SELECT sum(max(n_records, 0)), min(t0_ns), max(t1_ns) FROM main.gpu_chunks WHERE "
                                   "device < 0 AND t1_ns >= ?2 AND t0_ns < ?3"
                                 : "SELECT sum(max(n_records, 0)), min(t0_ns), max(t1_ns) FROM main.gpu_chunks WHERE "
                                   "device = ?1 AND t1_ns >= ?2 AND t0_ns < ?3";
    if (sqlite3_prepare_v2(r->db, sql, -1, &st, NULL) != SQLITE_OK) return st_rd_unreadable("gpu_chunks", r->db);
    sqlite3_bind_int64(st, 1, device);
    sqlite3_bind_int64(st, 2, t0_ns);
    sqlite3_bind_int64(st, 3, t1_ns);
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_type(st, 0) == SQLITE_INTEGER) {
        out->has = 1;
        out->n_records = sqlite3_column_int64(st, 0);
        out->t0_ns = sqlite3_column_int64(st, 1);
        out->t1_ns = sqlite3_column_int64(st, 2);
    }
    sqlite3_finalize(st);
    return ST_OK;
}
