/* reader_cpu.c: the reader's CPU capture (docs/trace-format.md, "CPU
 * capture"): a file's cpu_threads rows, its per-thread CPU records
 * (switches, samples with their stage, losses), its interned stacks and
 * what each frame address is (cpu_symbols, cpu_maps), why a thread was
 * blocked (cpu_blocks) and every thread's schedstat per window
 * (cpu_windows), those two read row by row with SQL and checked as read. The tables are
 * checked the first time one is read (st_rd_check_cpu_tables), then the
 * small ones are held in memory (struct cpu_data, freed with the reader);
 * chunks are decoded one at a time, as the other chunk tables. A rank set
 * does the same through its methods (reader_set.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reader_int.h"

/* Frames of one stack at most: perf's sysctl kernel.perf_event_max_stack
 * tops out at 65535; more in a row is a hostile trace. */
#define CPU_MAX_FRAMES 65535u

typedef struct cpu_stack_ent {
    int64_t id;
    uint32_t off, n; /* frames[off .. off+n) */
} cpu_stack_ent;

typedef struct cpu_map_ent {
    int64_t id;
    uint64_t start, end, file_offset;
    char *path, *build_id;
} cpu_map_ent;

typedef struct cpu_sym_ent {
    uint64_t addr, sym_offset;
    int64_t map;
    char *name;
} cpu_sym_ent;

struct cpu_data {
    int has; /* st_rd_check_cpu_tables' answer: 1, 0 */
    st_cpu_thread_info *threads; /* by thread id */
    uint32_t n_threads;
    int stacks_loaded;
    cpu_stack_ent *stacks; /* by id */
    uint32_t n_stacks;
    uint64_t *frames;
    int syms_loaded;
    cpu_map_ent *maps; /* by id */
    uint32_t n_maps;
    cpu_sym_ent *syms; /* by addr */
    uint32_t n_syms;
    int blocks_state, windows_state, lines_state; /* 0 not checked yet; 1 the table is there and passed; 2 it is absent */
    int lines_loaded;
    uint64_t *line_addrs; /* cpu_lines by (addr, depth): line_addrs[i] is lines[i]'s address */
    st_cpu_line *lines;
    uint32_t n_lines;
};

void st_rd_cpu_free(st_reader *r)
{
    struct cpu_data *c = r->cpu;
    if (!c) return;
    for (uint32_t i = 0; i < c->n_threads; i++) {
        free((char *)c->threads[i].status);
        free((char *)c->threads[i].reason);
    }
    free(c->threads);
    free(c->stacks);
    free(c->frames);
    for (uint32_t i = 0; i < c->n_maps; i++) {
        free(c->maps[i].path);
        free(c->maps[i].build_id);
    }
    free(c->maps);
    for (uint32_t i = 0; i < c->n_syms; i++) free(c->syms[i].name);
    free(c->syms);
    for (uint32_t i = 0; i < c->n_lines; i++) {
        free((char *)c->lines[i].function);
        free((char *)c->lines[i].file);
    }
    free(c->line_addrs);
    free(c->lines);
    free(c);
    r->cpu = NULL;
}

static char *dup_col(sqlite3_stmt *st, int col)
{
    const char *s = (const char *)sqlite3_column_text(st, col);
    return strdup(s ? s : "");
}

static int cmp_thread(const void *a, const void *b)
{
    uint32_t x = ((const st_cpu_thread_info *)a)->thread, y = ((const st_cpu_thread_info *)b)->thread;
    return x < y ? -1 : x > y;
}

/* The check, then cpu_threads (every row checked by it) into memory. */
static int cpu_load(st_reader *r, struct cpu_data **out)
{
    if (r->cpu) {
        *out = r->cpu;
        return ST_OK;
    }
    int has = st_rd_check_cpu_tables(r);
    if (has < 0) return has;
    struct cpu_data *c = calloc(1, sizeof *c);
    if (!c) return st_set_error(ST_ENOMEM, "out of memory");
    r->cpu = c;
    c->has = has;
    if (!has) {
        *out = c;
        return ST_OK;
    }
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(r->db,
                           "SELECT thread, os_tid, status, reason, period_ns, ring_bytes, refused_bytes, start_ns, "
                           "cpu_ns, switches, samples, lost FROM main.cpu_threads ORDER BY thread",
                           -1, &st, NULL) != SQLITE_OK)
        return st_rd_bad("cpu_threads", sqlite3_errmsg(r->db));
    int rc, err = ST_OK;
    uint32_t cap = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (c->n_threads == cap) {
            cap = cap ? cap * 2 : 16;
            st_cpu_thread_info *t = realloc(c->threads, cap * sizeof *t);
            if (!t) {
                err = st_set_error(ST_ENOMEM, "out of memory");
                break;
            }
            c->threads = t;
        }
        st_cpu_thread_info *t = &c->threads[c->n_threads];
        memset(t, 0, sizeof *t);
        t->thread = (uint32_t)sqlite3_column_int64(st, 0); /* checked: names a thread */
        t->os_tid = sqlite3_column_int64(st, 1);
        t->status = dup_col(st, 2);
        t->reason = dup_col(st, 3);
        c->n_threads++;
        if (!t->status || !t->reason) {
            err = st_set_error(ST_ENOMEM, "out of memory");
            break;
        }
        int64_t *v[] = {&t->period_ns, &t->ring_bytes, &t->refused_bytes, &t->start_ns,
                        &t->cpu_ns,    &t->switches,   &t->samples,       &t->lost};
        for (int i = 0; i < 8; i++) *v[i] = sqlite3_column_int64(st, 4 + i);
    }
    if (!err && rc != SQLITE_DONE) err = st_rd_bad("cpu_threads", sqlite3_errmsg(r->db));
    sqlite3_finalize(st);
    if (err) return err;
    if (c->n_threads) qsort(c->threads, c->n_threads, sizeof *c->threads, cmp_thread); /* never qsort(NULL, 0): UB */
    *out = c;
    return ST_OK;
}

int st_reader_has_cpu(st_reader *r) { return r->m->has_cpu(r); }

int st_rd_file_has_cpu(st_reader *r)
{
    struct cpu_data *c;
    int rc = cpu_load(r, &c);
    return rc ? rc : c->has;
}

int st_reader_cpu_thread(st_reader *r, uint32_t thread, st_cpu_thread_info *out)
{
    memset(out, 0, sizeof *out);
    return r->m->cpu_thread(r, thread, out);
}

int st_rd_file_cpu_thread(st_reader *r, uint32_t thread, st_cpu_thread_info *out)
{
    struct cpu_data *c;
    int rc = cpu_load(r, &c);
    if (rc) return rc;
    st_cpu_thread_info key = {.thread = thread};
    const st_cpu_thread_info *t = c->n_threads ? bsearch(&key, c->threads, c->n_threads, sizeof key, cmp_thread) : NULL;
    if (!t) return 0;
    *out = *t;
    return 1;
}

/* ---- stacks ---- */

static int cmp_stack(const void *a, const void *b)
{
    int64_t x = ((const cpu_stack_ent *)a)->id, y = ((const cpu_stack_ent *)b)->id;
    return x < y ? -1 : x > y;
}

static int stack_corrupt(int64_t id, const char *what)
{
    return st_set_error(ST_ECORRUPT, "trace table 'cpu_stacks': stack %lld: %s", (long long)id, what);
}

/* Every row of cpu_stacks, decoded into one array of frames. */
static int stacks_load(st_reader *r, struct cpu_data *c)
{
    if (c->stacks_loaded) return ST_OK;
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(r->db, "SELECT id, n_frames, data, typeof(n_frames) FROM main.cpu_stacks ORDER BY id", -1,
                           &st, NULL) != SQLITE_OK)
        return st_rd_bad("cpu_stacks", sqlite3_errmsg(r->db));
    int rc, err = ST_OK;
    size_t cap = 0, fcap = 0, flen = 0;
    while (!err && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t id = sqlite3_column_int64(st, 0), n;
        const char *ty = (const char *)sqlite3_column_text(st, 3);
        if (!ty || strcmp(ty, "integer") != 0) {
            err = stack_corrupt(id, "column 'n_frames' is not an integer");
            break;
        }
        n = sqlite3_column_int64(st, 1);
        if (id < 0 || id > UINT32_MAX - 1) {
            err = stack_corrupt(id, "id is out of range");
            break;
        }
        if (n < 0 || n > CPU_MAX_FRAMES) {
            err = stack_corrupt(id, "column 'n_frames' is out of range");
            break;
        }
        int type = sqlite3_column_type(st, 2);
        if (type != SQLITE_BLOB && !(type == SQLITE_NULL && n == 0)) {
            /* an empty BLOB reads back as a zero-length blob; NULL only for 0 frames */
            err = stack_corrupt(id, "column 'data' is not a blob");
            break;
        }
        if (c->n_stacks == cap) {
            cap = cap ? cap * 2 : 64;
            cpu_stack_ent *s = realloc(c->stacks, cap * sizeof *s);
            if (!s) {
                err = st_set_error(ST_ENOMEM, "out of memory");
                break;
            }
            c->stacks = s;
        }
        if (flen + (size_t)n > UINT32_MAX) {
            err = stack_corrupt(id, "too many frames in all");
            break;
        }
        if (flen + (size_t)n > fcap) {
            size_t nc = fcap ? fcap : 256;
            while (nc < flen + (size_t)n) nc *= 2;
            uint64_t *f = realloc(c->frames, nc * sizeof *f);
            if (!f) {
                err = st_set_error(ST_ENOMEM, "out of memory");
                break;
            }
            c->frames = f;
            fcap = nc;
        }
        const void *data = sqlite3_column_blob(st, 2);
        int size = sqlite3_column_bytes(st, 2);
        if (st_cpu_stack_get(data, (size_t)size, (uint32_t)n, n ? c->frames + flen : NULL)) {
            err = stack_corrupt(id, "its frames are corrupt or truncated");
            break;
        }
        c->stacks[c->n_stacks++] = (cpu_stack_ent){id, (uint32_t)flen, (uint32_t)n};
        flen += (size_t)n;
    }
    if (!err && rc != SQLITE_DONE) err = st_rd_bad("cpu_stacks", sqlite3_errmsg(r->db));
    sqlite3_finalize(st);
    if (err) return err;
    c->stacks_loaded = 1;
    return ST_OK;
}

static const cpu_stack_ent *stack_find(const struct cpu_data *c, uint64_t id)
{
    if (id > INT64_MAX || !c->n_stacks) return NULL;
    cpu_stack_ent key = {.id = (int64_t)id};
    return bsearch(&key, c->stacks, c->n_stacks, sizeof key, cmp_stack);
}

int st_reader_cpu_stack(st_reader *r, uint64_t stack, const uint64_t **frames, uint32_t *n)
{
    *frames = NULL;
    *n = 0;
    return r->m->cpu_stack(r, stack, frames, n);
}

int st_rd_file_cpu_stack(st_reader *r, uint64_t stack, const uint64_t **frames, uint32_t *n)
{
    struct cpu_data *c;
    int rc = cpu_load(r, &c);
    if (!rc && c->has) rc = stacks_load(r, c);
    if (rc) return rc;
    const cpu_stack_ent *s = c->has ? stack_find(c, stack) : NULL;
    if (!s) return st_set_error(ST_EINVAL, "the trace has no CPU stack %llu", (unsigned long long)stack);
    *frames = s->n ? c->frames + s->off : NULL; /* no frames: NULL, never NULL + 0 */
    *n = s->n;
    return ST_OK;
}

/* ---- symbols and mappings ---- */

static int cmp_map(const void *a, const void *b)
{
    int64_t x = ((const cpu_map_ent *)a)->id, y = ((const cpu_map_ent *)b)->id;
    return x < y ? -1 : x > y;
}

static int cmp_sym(const void *a, const void *b)
{
    uint64_t x = ((const cpu_sym_ent *)a)->addr, y = ((const cpu_sym_ent *)b)->addr;
    return x < y ? -1 : x > y;
}

static const cpu_map_ent *map_find(const struct cpu_data *c, int64_t id)
{
    if (!c->n_maps) return NULL;
    cpu_map_ent key = {.id = id};
    return bsearch(&key, c->maps, c->n_maps, sizeof key, cmp_map);
}

/* cpu_maps and cpu_symbols (every row type-checked and key-unique at the
 * check): a map's start above its end, or a symbol naming a map that is
 * not there, is refused. */
static int syms_load(st_reader *r, struct cpu_data *c)
{
    if (c->syms_loaded) return ST_OK;
    sqlite3_stmt *st;
    int rc, err = ST_OK;
    uint32_t cap = 0;
    if (sqlite3_prepare_v2(r->db, "SELECT id, start, end, file_offset, path, build_id FROM main.cpu_maps", -1, &st,
                           NULL) != SQLITE_OK)
        return st_rd_bad("cpu_maps", sqlite3_errmsg(r->db));
    while (!err && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (c->n_maps == cap) {
            cap = cap ? cap * 2 : 64;
            cpu_map_ent *m = realloc(c->maps, cap * sizeof *m);
            if (!m) {
                err = st_set_error(ST_ENOMEM, "out of memory");
                break;
            }
            c->maps = m;
        }
        cpu_map_ent *m = &c->maps[c->n_maps++];
        m->id = sqlite3_column_int64(st, 0);
        m->start = (uint64_t)sqlite3_column_int64(st, 1);
        m->end = (uint64_t)sqlite3_column_int64(st, 2);
        m->file_offset = (uint64_t)sqlite3_column_int64(st, 3);
        m->path = dup_col(st, 4);
        m->build_id = dup_col(st, 5);
        if (!m->path || !m->build_id) err = st_set_error(ST_ENOMEM, "out of memory");
        else if (m->start > m->end)
            err = st_set_error(ST_ECORRUPT, "trace table 'cpu_maps': map %lld: start is above end", (long long)m->id);
    }
    if (!err && rc != SQLITE_DONE) err = st_rd_bad("cpu_maps", sqlite3_errmsg(r->db));
    sqlite3_finalize(st);
    if (err) return err;
    if (c->n_maps) qsort(c->maps, c->n_maps, sizeof *c->maps, cmp_map);
    cap = 0;
    if (sqlite3_prepare_v2(r->db, "SELECT addr, map, sym_offset, name FROM main.cpu_symbols", -1, &st, NULL) !=
        SQLITE_OK)
        return st_rd_bad("cpu_symbols", sqlite3_errmsg(r->db));
    while (!err && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (c->n_syms == cap) {
            cap = cap ? cap * 2 : 256;
            cpu_sym_ent *s = realloc(c->syms, cap * sizeof *s);
            if (!s) {
                err = st_set_error(ST_ENOMEM, "out of memory");
                break;
            }
            c->syms = s;
        }
        cpu_sym_ent *s = &c->syms[c->n_syms++];
        s->addr = (uint64_t)sqlite3_column_int64(st, 0);
        s->map = sqlite3_column_int64(st, 1);
        s->sym_offset = (uint64_t)sqlite3_column_int64(st, 2);
        s->name = dup_col(st, 3);
        if (!s->name) err = st_set_error(ST_ENOMEM, "out of memory");
        else if (s->map != -1 && !map_find(c, s->map))
            err = st_set_error(ST_ECORRUPT, "trace table 'cpu_symbols': address 0x%llx names unknown map %lld",
                               (unsigned long long)s->addr, (long long)s->map);
    }
    if (!err && rc != SQLITE_DONE) err = st_rd_bad("cpu_symbols", sqlite3_errmsg(r->db));
    sqlite3_finalize(st);
    if (err) return err;
    if (c->n_syms) qsort(c->syms, c->n_syms, sizeof *c->syms, cmp_sym);
    c->syms_loaded = 1;
    return ST_OK;
}

int st_reader_cpu_frame_name(st_reader *r, uint64_t stack, uint64_t addr, st_cpu_frame *out)
{
    *out = (st_cpu_frame){.name = "", .map = -1, .path = "", .build_id = ""};
    return r->m->cpu_frame_name(r, stack, addr, out);
}

int st_rd_file_cpu_frame_name(st_reader *r, uint64_t stack, uint64_t addr, st_cpu_frame *out)
{
    (void)stack; /* a file is one process */
    struct cpu_data *c;
    int rc = cpu_load(r, &c);
    if (!rc && c->has) rc = syms_load(r, c);
    if (rc || !c->has) return rc;
    cpu_sym_ent key = {.addr = addr};
    const cpu_sym_ent *s = c->n_syms ? bsearch(&key, c->syms, c->n_syms, sizeof key, cmp_sym) : NULL;
    const cpu_map_ent *m = NULL;
    if (s) {
        out->name = s->name;
        out->sym_offset = s->name[0] ? s->sym_offset : 0;
        m = s->map >= 0 ? map_find(c, s->map) : NULL;
    } else {
        /* the mapping holding it ([start, end]: a return address equal to end belongs to it) */
        for (uint32_t i = 0; i < c->n_maps && !m; i++)
            if (addr >= c->maps[i].start && addr <= c->maps[i].end) m = &c->maps[i];
    }
    if (m) {
        out->map = m->id;
        out->path = m->path;
        out->build_id = m->build_id;
        out->file_offset = addr - m->start + m->file_offset;
    }
    return s != NULL;
}

int st_reader_cpu_map(st_reader *r, uint64_t stack, int64_t map, st_cpu_map *out)
{
    *out = (st_cpu_map){.id = -1, .path = "", .build_id = ""};
    return r->m->cpu_map(r, stack, map, out);
}

int st_rd_file_cpu_map(st_reader *r, uint64_t stack, int64_t map, st_cpu_map *out)
{
    (void)stack; /* a file is one process */
    struct cpu_data *c;
    int rc = cpu_load(r, &c);
    if (!rc && c->has) rc = syms_load(r, c);
    if (rc || !c->has) return rc;
    const cpu_map_ent *m = map_find(c, map);
    if (!m) return 0;
    *out = (st_cpu_map){m->id, m->start, m->end, m->file_offset, m->path, m->build_id};
    return 1;
}

/* ---- records ---- */

int st_cpu_iter_open(st_cpu_iter **out, st_reader *r, uint32_t thread, int64_t t0, int64_t t1)
{
    *out = NULL;
    st_cpu_iter *it = calloc(1, sizeof *it);
    if (!it) return st_set_error(ST_ENOMEM, "out of memory");
    it->m = r->m;
    it->r = r;
    it->thread = thread;
    it->t0 = t0;
    it->t1 = t1;
    int rc = r->m->cpu_open(it, r, thread);
    if (rc) {
        st_cpu_iter_close(it);
        return rc;
    }
    *out = it;
    return ST_OK;
}

int st_rd_file_cpu_open(st_cpu_iter *it, st_reader *r, uint32_t thread)
{
    struct cpu_data *c;
    int rc = cpu_load(r, &c);
    if (!rc && c->has) rc = stacks_load(r, c);
    if (rc) return rc;
    if (!c->has || !st_rd_thread_by_id(r, thread)) {
        it->empty = 1;
        return ST_OK;
    }
    st_cpu_thread_info info;
    rc = st_reader_cpu_thread(r, thread, &info);
    if (rc < 0) return rc;
    it->timer_thread = rc == 1 && strcmp(info.status, "timer") == 0;
    return st_rd_chunk_rows_open(&it->rows, r, "cpu_chunks", "n_records", thread, it->t0, it->t1);
}

/* The thread's innermost stage after each of its events (begin: the new
 * range's; end: its parent's), for samples the writer could not place. A
 * range is open on [start, end): at a time with several events, the last
 * one's stage holds. */
static int timeline_load(st_cpu_iter *it)
{
    st_event_iter *ev;
    int rc = st_event_iter_open(&ev, it->r, it->thread);
    if (rc) return rc;
    int32_t stack[ST_MAX_DEPTH];
    uint32_t depth = 0, cap = 0;
    st_event e;
    while ((rc = st_event_iter_next(ev, &e)) == 1) {
        if (e.depth >= ST_MAX_DEPTH) {
            rc = st_set_error(ST_ECORRUPT, "thread %u: a range's depth %u is out of range", it->thread, e.depth);
            break;
        }
        if (!e.is_end) {
            stack[e.depth] = (int32_t)e.stage;
            depth = e.depth + 1;
        } else {
            depth = e.depth;
        }
        if (it->n_changes == cap) {
            cap = cap ? cap * 2 : 256;
            int64_t *ts = realloc(it->change_ts, cap * sizeof *ts);
            if (ts) it->change_ts = ts;
            int32_t *sg = ts ? realloc(it->change_stage, cap * sizeof *sg) : NULL;
            if (sg) it->change_stage = sg;
            if (!ts || !sg) {
                rc = st_set_error(ST_ENOMEM, "out of memory");
                break;
            }
        }
        it->change_ts[it->n_changes] = e.ts_ns;
        it->change_stage[it->n_changes] = depth ? stack[depth - 1] : -1;
        it->n_changes++;
    }
    st_event_iter_close(ev);
    if (rc < 0) return rc;
    it->timeline_loaded = 1;
    return ST_OK;
}

/* The stage after the last event at or before ts (events are in time order). */
static int32_t timeline_stage_at(const st_cpu_iter *it, int64_t ts)
{
    uint32_t lo = 0, hi = it->n_changes; /* first change with ts > the sample's */
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (it->change_ts[mid] <= ts) lo = mid + 1;
        else hi = mid;
    }
    return lo ? it->change_stage[lo - 1] : -1;
}

int st_cpu_iter_next(st_cpu_iter *it, st_cpu_row *out)
{
    memset(out, 0, sizeof *out);
    return it->m->cpu_next(it, out);
}

int st_rd_file_cpu_next(st_cpu_iter *it, st_cpu_row *out)
{
    if (it->empty) return 0;
    for (;;) {
        if (!it->in_chunk) {
            int rc = st_rd_chunk_rows_next(&it->rows);
            if (rc <= 0) return rc;
            if (st_cpu_cursor_open(&it->cur, it->rows.data, (size_t)it->rows.size, (uint32_t)it->rows.n_items))
                return st_rd_chunk_corrupt(&it->rows);
            it->in_chunk = 1;
        }
        st_cpu_rec rec;
        int rc = st_cpu_next(&it->cur, &rec);
        if (rc == 0) {
            it->in_chunk = 0;
            continue;
        }
        if (rc < 0) return st_rd_chunk_corrupt(&it->rows);
        int flagged = rec.kind == ST_CPU_REC_SAMPLE_FLAGS || rec.kind == ST_CPU_REC_SAMPLE_FLAGS_UNKNOWN;
        int py = rec.kind == ST_CPU_REC_PY_SAMPLE || rec.kind == ST_CPU_REC_PY_SAMPLE_UNKNOWN;
        int sample = rec.kind == ST_CPU_REC_SAMPLE || rec.kind == ST_CPU_REC_SAMPLE_UNKNOWN || flagged || py;
        int known_stage = rec.kind == ST_CPU_REC_SAMPLE || rec.kind == ST_CPU_REC_SAMPLE_FLAGS ||
                          rec.kind == ST_CPU_REC_PY_SAMPLE;
        int sched = rec.kind == ST_CPU_REC_OUT_SCHED;
        const cpu_stack_ent *se = NULL;
        if ((sample || rec.kind == ST_CPU_REC_OUT_STACK || sched) && !(se = stack_find(it->r->cpu, rec.stack)))
            return st_set_error(ST_ECORRUPT, "trace table 'cpu_chunks': chunk %lld (thread %lld) names unknown stack %u",
                                (long long)it->rows.row_id, (long long)it->rows.thread, rec.stack);
        if (sched && rec.n > se->n)
            return st_set_error(ST_ECORRUPT,
                                "trace table 'cpu_chunks': chunk %lld (thread %lld) gives stack %u %llu kernel frames "
                                "of %u", (long long)it->rows.row_id, (long long)it->rows.thread, rec.stack,
                                (unsigned long long)rec.n, (unsigned)se->n);
        if (known_stage && rec.stage != ST_CPU_NO_STAGE && rec.stage >= it->r->n_stages)
            return st_set_error(ST_ECORRUPT, "trace table 'cpu_chunks': chunk %lld (thread %lld) names unknown stage %u",
                                (long long)it->rows.row_id, (long long)it->rows.thread, rec.stage);
        if (rec.ts_ns < it->t0 || rec.ts_ns >= it->t1) continue;
        out->thread = it->thread;
        out->ts_ns = rec.ts_ns;
        out->stage = -1;
        out->gil = -1;
        if (sample) {
            out->kind = py ? ST_CPU_ROW_PY_SAMPLE : ST_CPU_ROW_SAMPLE;
            out->source = py ? ST_CPU_SOURCE_PYTHON_FRAMES
                          : flagged || it->timer_thread ? ST_CPU_SOURCE_TIMER : ST_CPU_SOURCE_PERF;
            out->stack = rec.stack;
            if (flagged && (rec.flags & ST_CPU_FLAG_GIL_KNOWN)) out->gil = (rec.flags & ST_CPU_FLAG_GIL_HELD) ? 1 : 0;
            if (known_stage) {
                out->stage = rec.stage == ST_CPU_NO_STAGE ? -1 : (int32_t)rec.stage;
            } else {
                if (!it->timeline_loaded && (rc = timeline_load(it))) return rc;
                out->stage = timeline_stage_at(it, rec.ts_ns);
                out->stage_from_ranges = 1;
            }
        } else if (rec.kind == ST_CPU_REC_OUT_STACK || sched) {
            out->kind = ST_CPU_ROW_OUT_BLOCKED;
            out->stack = rec.stack;
            out->wait_stack = 1;
            if (sched) {
                out->state = (int32_t)rec.flags;
                out->kernel_frames = (uint32_t)rec.n;
            }
        } else {
            out->kind = rec.kind; /* ST_CPU_ROW_* has the encoding's numbers */
            out->n_lost = rec.n;
        }
        return 1;
    }
}

void st_cpu_iter_close(st_cpu_iter *it)
{
    if (!it) return;
    it->m->cpu_close(it);
    free(it->change_ts);
    free(it->change_stage);
    free(it);
}

void st_rd_file_cpu_close(st_cpu_iter *it) { sqlite3_finalize(it->rows.st); }

/* Where the last returned record is stored, for the SQL tables' rowids
 * (vtab.c): its cpu_chunks row and its index among the chunk's records (all
 * kinds count). A rank set's iterator answers for the rank's file. */
void st_cpu_iter_pos(const st_cpu_iter *it, int64_t *chunk_id, uint32_t *index)
{
    while (it->sub) it = it->sub;
    *chunk_id = it->rows.row_id;
    *index = (uint32_t)it->rows.n_items - it->cur.remaining - 1;
}
/* ---- cpu_blocks and cpu_windows ---- */

/* Whether the optional table is there (1) or not (0), checked once. */
static int extra_table(st_reader *r, int *state, const char *table)
{
    struct cpu_data *c;
    int rc = cpu_load(r, &c);
    if (rc) return rc;
    if (!c->has) return 0;
    if (!*state) {
        int has = st_rd_check_cpu_extra(r, table);
        if (has < 0) return has;
        *state = has ? 1 : 2;
    }
    return *state == 1;
}

/* Columns first .. first + n - 1 of st are typeof() of the named columns;
 * want[i] 'i' an integer, 't' text. */
static int row_types(sqlite3_stmt *st, int first, const char *const *names, const char *want, int n, const char *table,
                     const char *label)
{
    for (int i = 0; i < n; i++) {
        const char *ty = (const char *)sqlite3_column_text(st, first + i);
        int ok = ty && ty[0] == want[i];
        if (!ok) {
            int got = !ty ? SQLITE_NULL : ty[0] == 'i' ? SQLITE_INTEGER : ty[0] == 'r' ? SQLITE_FLOAT
                      : ty[0] == 't' ? SQLITE_TEXT : ty[0] == 'b' ? SQLITE_BLOB : SQLITE_NULL;
            return st_set_error(ST_ECORRUPT, "trace table '%s': %s: column '%s' is %s, not %s", table, label, names[i],
                                st_rd_type_name(got), st_rd_type_name(want[i] == 'i' ? SQLITE_INTEGER : SQLITE_TEXT));
        }
    }
    return ST_OK;
}

static const char *text_col(sqlite3_stmt *st, int col)
{
    const char *s = (const char *)sqlite3_column_text(st, col);
    return s ? s : "";
}

int st_cpu_block_iter_open(st_cpu_block_iter **out, st_reader *r, uint32_t thread, int64_t t0_ns, int64_t t1_ns)
{
    *out = NULL;
    st_cpu_block_iter *it = calloc(1, sizeof *it);
    if (!it) return st_set_error(ST_ENOMEM, "out of memory");
    it->m = r->m;
    it->r = r;
    it->thread = thread;
    it->t0 = t0_ns;
    it->t1 = t1_ns;
    int rc = r->m->cpu_block_open(it, r, thread);
    if (rc) {
        st_cpu_block_iter_close(it);
        return rc;
    }
    *out = it;
    return ST_OK;
}

int st_cpu_block_iter_next(st_cpu_block_iter *it, st_cpu_block_row *out)
{
    memset(out, 0, sizeof *out);
    out->name = out->wchan = "";
    return it->m->cpu_block_next(it, out);
}

void st_cpu_block_iter_close(st_cpu_block_iter *it)
{
    if (!it) return;
    it->m->cpu_block_close(it);
    free(it);
}

int st_rd_file_cpu_block_open(st_cpu_block_iter *it, st_reader *r, uint32_t thread)
{
    struct cpu_data *c;
    int rc = cpu_load(r, &c);
    if (rc) return rc;
    int has = extra_table(r, &c->blocks_state, "cpu_blocks");
    if (has <= 0) return has;
    if (!st_rd_thread_by_id(r, thread)) return ST_OK;
    /* a row whose time is not an integer is read (and refused) whatever the window */
    if (sqlite3_prepare_v2(r->db,
                           "SELECT id, typeof(t_ns), typeof(seen_ns), typeof(syscall), typeof(name), typeof(arg0), "
                           "typeof(arg1), typeof(wchan), t_ns, seen_ns, syscall, name, arg0, arg1, wchan "
                           "FROM main.cpu_blocks WHERE thread = ?1 AND (typeof(t_ns) <> 'integer' OR "
                           "(t_ns >= ?2 AND t_ns < ?3)) ORDER BY t_ns, id",
                           -1, &it->st, NULL) != SQLITE_OK)
        return st_rd_bad("cpu_blocks", sqlite3_errmsg(r->db));
    sqlite3_bind_int64(it->st, 1, thread);
    sqlite3_bind_int64(it->st, 2, it->t0);
    sqlite3_bind_int64(it->st, 3, it->t1);
    return ST_OK;
}

int st_rd_file_cpu_block_next(st_cpu_block_iter *it, st_cpu_block_row *out)
{
    if (!it->st) return 0;
    int rc = sqlite3_step(it->st);
    if (rc == SQLITE_DONE) return 0;
    if (rc != SQLITE_ROW) return st_rd_bad("cpu_blocks", sqlite3_errmsg(it->r->db));
    sqlite3_stmt *st = it->st;
    char label[64];
    snprintf(label, sizeof label, "row id %lld", (long long)sqlite3_column_int64(st, 0));
    static const char *const names[] = {"t_ns", "seen_ns", "syscall", "name", "arg0", "arg1", "wchan"};
    if ((rc = row_types(st, 1, names, "iiitiit", 7, "cpu_blocks", label))) return rc;
    out->thread = it->thread;
    out->t_ns = sqlite3_column_int64(st, 8);
    out->seen_ns = sqlite3_column_int64(st, 9);
    out->syscall = sqlite3_column_int64(st, 10);
    out->name = text_col(st, 11);
    out->arg0 = sqlite3_column_int64(st, 12);
    out->arg1 = sqlite3_column_int64(st, 13);
    out->wchan = text_col(st, 14);
    const char *bad = out->t_ns < 0 ? "t_ns is negative"
                      : out->seen_ns < out->t_ns ? "seen_ns is before t_ns"
                      : out->syscall < -1 ? "syscall is below -1"
                      : sqlite3_column_bytes(st, 11) > ST_NAME_MAX ? "name is too long"
                      : sqlite3_column_bytes(st, 14) > ST_NAME_MAX ? "wchan is too long"
                                                                   : NULL;
    if (bad) return st_set_error(ST_ECORRUPT, "trace table 'cpu_blocks': %s: %s", label, bad);
    return 1;
}

void st_rd_file_cpu_block_close(st_cpu_block_iter *it) { sqlite3_finalize(it->st); }

int st_cpu_window_iter_open(st_cpu_window_iter **out, st_reader *r)
{
    *out = NULL;
    st_cpu_window_iter *it = calloc(1, sizeof *it);
    if (!it) return st_set_error(ST_ENOMEM, "out of memory");
    it->m = r->m;
    it->r = r;
    int rc = r->m->cpu_window_open(it, r);
    if (rc) {
        st_cpu_window_iter_close(it);
        return rc;
    }
    *out = it;
    return ST_OK;
}

int st_cpu_window_iter_next(st_cpu_window_iter *it, st_cpu_window_row *out)
{
    memset(out, 0, sizeof *out);
    out->name = "";
    out->rank = -1;
    return it->m->cpu_window_next(it, out);
}

void st_cpu_window_iter_close(st_cpu_window_iter *it)
{
    if (!it) return;
    it->m->cpu_window_close(it);
    free(it);
}

int st_rd_file_cpu_window_open(st_cpu_window_iter *it, st_reader *r)
{
    struct cpu_data *c;
    int rc = cpu_load(r, &c);
    if (rc) return rc;
    int has = extra_table(r, &c->windows_state, "cpu_windows");
    if (has <= 0) return has;
    if (sqlite3_prepare_v2(r->db,
                           "SELECT typeof(window), typeof(step), typeof(t0_ns), typeof(t1_ns), typeof(os_tid), "
                           "typeof(thread), typeof(name), typeof(oncpu_ns), typeof(runq_ns), typeof(slices), "
                           "window, step, t0_ns, t1_ns, os_tid, thread, name, oncpu_ns, runq_ns, slices "
                           "FROM main.cpu_windows ORDER BY window, os_tid",
                           -1, &it->st, NULL) != SQLITE_OK)
        return st_rd_bad("cpu_windows", sqlite3_errmsg(r->db));
    return ST_OK;
}

int st_rd_file_cpu_window_next(st_cpu_window_iter *it, st_cpu_window_row *out)
{
    if (!it->st) return 0;
    int rc = sqlite3_step(it->st);
    if (rc == SQLITE_DONE) return 0;
    if (rc != SQLITE_ROW) return st_rd_bad("cpu_windows", sqlite3_errmsg(it->r->db));
    sqlite3_stmt *st = it->st;
    char label[96];
    const char *ty0 = (const char *)sqlite3_column_text(st, 0), *ty4 = (const char *)sqlite3_column_text(st, 4);
    if (ty0 && ty0[0] == 'i' && ty4 && ty4[0] == 'i')
        snprintf(label, sizeof label, "row (window %lld, os_tid %lld)", (long long)sqlite3_column_int64(st, 10),
                 (long long)sqlite3_column_int64(st, 14));
    else
        snprintf(label, sizeof label, "a row");
    static const char *const names[] = {"window", "step",   "t0_ns",  "t1_ns",   "os_tid",
                                        "thread", "name",   "oncpu_ns", "runq_ns", "slices"};
    if ((rc = row_types(st, 0, names, "iiiiiitiii", 10, "cpu_windows", label))) return rc;
    out->window = sqlite3_column_int64(st, 10);
    out->step = sqlite3_column_int64(st, 11);
    out->t0_ns = sqlite3_column_int64(st, 12);
    out->t1_ns = sqlite3_column_int64(st, 13);
    out->os_tid = sqlite3_column_int64(st, 14);
    out->thread = sqlite3_column_int64(st, 15);
    out->name = text_col(st, 16);
    out->oncpu_ns = sqlite3_column_int64(st, 17);
    out->runq_ns = sqlite3_column_int64(st, 18);
    out->slices = sqlite3_column_int64(st, 19);
    const char *bad = out->window < 0 ? "window is negative"
                      : out->step < -1 ? "step is below -1"
                      : out->t0_ns < 0 ? "t0_ns is negative"
                      : out->t1_ns < out->t0_ns ? "t1_ns is before t0_ns"
                      : out->os_tid <= 0 ? "os_tid is not positive"
                      : out->oncpu_ns < 0 ? "oncpu_ns is negative"
                      : out->runq_ns < 0 ? "runq_ns is negative"
                      : out->slices < 0 ? "slices is negative"
                      : sqlite3_column_bytes(st, 16) > ST_NAME_MAX ? "name is too long"
                                                                   : NULL;
    if (bad) return st_set_error(ST_ECORRUPT, "trace table 'cpu_windows': %s: %s", label, bad);
    if (out->thread != -1 && (out->thread < 0 || out->thread > UINT32_MAX ||
                              !st_rd_thread_by_id(it->r, (uint32_t)out->thread)))
        return st_set_error(ST_ECORRUPT, "trace table 'cpu_windows': %s names unknown thread %lld", label,
                            (long long)out->thread);
    return 1;
}

void st_rd_file_cpu_window_close(st_cpu_window_iter *it) { sqlite3_finalize(it->st); }

/* ---- cpu_lines ---- */

typedef struct line_ent {
    uint64_t addr;
    int64_t depth;
    st_cpu_line line;
} line_ent;

static int cmp_line(const void *a, const void *b)
{
    const line_ent *x = a, *y = b;
    if (x->addr != y->addr) return x->addr < y->addr ? -1 : 1;
    return x->depth < y->depth ? -1 : x->depth > y->depth;
}

/* Every row of cpu_lines, type-checked, sorted by (addr, depth): each
 * address's depths must be 0, 1, ... */
static int lines_load(st_reader *r, struct cpu_data *c)
{
    if (c->lines_loaded) return ST_OK;
    static const char *const names[] = {"addr", "depth", "function", "file", "line", "col"};
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(r->db,
                           "SELECT addr, depth, function, file, line, col, typeof(addr), typeof(depth), "
                           "typeof(function), typeof(file), typeof(line), typeof(col) FROM main.cpu_lines",
                           -1, &st, NULL) != SQLITE_OK)
        return st_rd_bad("cpu_lines", sqlite3_errmsg(r->db));
    line_ent *v = NULL;
    size_t n = 0, cap = 0;
    int rc, err = ST_OK;
    while (!err && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        char label[64];
        snprintf(label, sizeof label, "row %zu", n + 1);
        if ((err = row_types(st, 6, names, "iittii", 6, "cpu_lines", label))) break;
        if (n == cap) {
            cap = cap ? cap * 2 : 256;
            line_ent *a = realloc(v, cap * sizeof *a);
            if (!a) {
                err = st_set_error(ST_ENOMEM, "out of memory");
                break;
            }
            v = a;
        }
        line_ent *e = &v[n];
        e->addr = (uint64_t)sqlite3_column_int64(st, 0);
        e->depth = sqlite3_column_int64(st, 1);
        e->line.line = sqlite3_column_int64(st, 4);
        e->line.col = sqlite3_column_int64(st, 5);
        e->line.function = dup_col(st, 2);
        e->line.file = dup_col(st, 3);
        n++;
        if (!e->line.function || !e->line.file) err = st_set_error(ST_ENOMEM, "out of memory");
        else if (e->depth < 0 || e->line.line < 0 || e->line.col < 0)
            err = st_set_error(ST_ECORRUPT, "trace table 'cpu_lines': %s: a negative depth, line or col", label);
    }
    if (!err && rc != SQLITE_DONE) err = st_rd_bad("cpu_lines", sqlite3_errmsg(r->db));
    sqlite3_finalize(st);
    if (!err && n) {
        qsort(v, n, sizeof *v, cmp_line);
        for (size_t i = 0; i < n && !err; i++) {
            int64_t want = i && v[i - 1].addr == v[i].addr ? v[i - 1].depth + 1 : 0;
            if (v[i].depth != want)
                err = st_set_error(ST_ECORRUPT, "trace table 'cpu_lines': address 0x%llx: depth %lld %s",
                                   (unsigned long long)v[i].addr, (long long)v[i].depth,
                                   v[i].depth < want ? "twice" : "after a gap");
        }
    }
    if (!err && n) {
        c->line_addrs = malloc(n * sizeof *c->line_addrs);
        c->lines = malloc(n * sizeof *c->lines);
        if (!c->line_addrs || !c->lines) err = st_set_error(ST_ENOMEM, "out of memory");
    }
    if (err) {
        for (size_t i = 0; i < n; i++) {
            free((char *)v[i].line.function);
            free((char *)v[i].line.file);
        }
        free(v);
        free(c->line_addrs);
        free(c->lines);
        c->line_addrs = NULL;
        c->lines = NULL;
        return err;
    }
    for (size_t i = 0; i < n; i++) {
        c->line_addrs[i] = v[i].addr;
        c->lines[i] = v[i].line;
    }
    c->n_lines = (uint32_t)n;
    free(v);
    c->lines_loaded = 1;
    return ST_OK;
}

int st_reader_cpu_frame_lines(st_reader *r, uint64_t stack, uint64_t addr, const st_cpu_line **lines, uint32_t *n)
{
    *lines = NULL;
    *n = 0;
    return r->m->cpu_frame_lines(r, stack, addr, lines, n);
}

int st_rd_file_cpu_frame_lines(st_reader *r, uint64_t stack, uint64_t addr, const st_cpu_line **lines, uint32_t *n)
{
    (void)stack; /* a file is one process */
    struct cpu_data *c;
    int rc = cpu_load(r, &c);
    if (rc) return rc;
    int has = extra_table(r, &c->lines_state, "cpu_lines");
    if (has <= 0) return has;
    if ((rc = lines_load(r, c))) return rc;
    size_t lo = 0, hi = c->n_lines;
    while (lo < hi) { /* the first row of addr */
        size_t mid = (lo + hi) / 2;
        if (c->line_addrs[mid] < addr) lo = mid + 1;
        else hi = mid;
    }
    size_t end = lo;
    while (end < c->n_lines && c->line_addrs[end] == addr) end++;
    if (end == lo) return 0;
    *lines = &c->lines[lo];
    *n = (uint32_t)(end - lo);
    return 1;
}
