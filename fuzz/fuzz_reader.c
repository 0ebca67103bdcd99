/* fuzz_reader.c: libFuzzer target over the trace reader and the analyzer's
 * pipeline model. Each input is a whole trace file: it is written to a
 * private temporary directory and opened the way `analyze` opens traces
 * (st_reader_open: read-only, defensive), then everything that reads chunks
 * runs on it: every range (all threads and per thread), every raw event,
 * every counter sample, every GPU record and API call, every CPU record
 * with its stack's frames and their names, the interval
 * windows, queries through the virtual tables, and the per-step model with
 * its GPU loads, the GPU idle split and the bottleneck verdict. The seed corpus
 * (make_seeds.c) holds small valid traces, so mutations explore corrupt
 * chunks, lying headers, wrong types and broken SQLite pages alike.
 * The analyzer's messages are sent to /dev/null while a case runs (the
 * sanitizers' reports are not).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sqlite3.h>

#include "../analyze/verdict.h"
#include "st_reader.h"

static char dir[256], path[300];
static FILE *devnull, *saved_stderr;

static void cleanup(void)
{
    static const char *const extra[] = {"", "-wal", "-shm", "-journal"};
    for (int i = 0; i < 4; i++) {
        char p2[320];
        snprintf(p2, sizeof p2, "%s%s", path, extra[i]);
        unlink(p2);
    }
    rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(dir, sizeof dir, "%s/fuzz_reader.XXXXXX", base);
    if (!mkdtemp(dir)) abort();
    snprintf(path, sizeof path, "%s/t.sqlite", dir);
    devnull = fopen("/dev/null", "w");
    if (!devnull) abort();
    an_gpu_slice_records = 3; /* many time slices: their boundaries get exercised */
    atexit(cleanup);
    return 0;
}

/* The analyzer's one-line messages go to the stdio stream stderr; the
 * sanitizers' reports go straight to file descriptor 2, so swapping the
 * stream silences the first and keeps the second. */
static void quiet(int on)
{
    if (on) {
        saved_stderr = stderr;
        stderr = devnull;
    } else {
        stderr = saved_stderr;
    }
}

static void on_window(const st_window *w, void *arg)
{
    size_t *n = arg;
    char buf[256];
    *n += st_window_format(w, buf, sizeof buf);
}

static void read_everything(void)
{
    st_reader *r;
    if (st_reader_open(&r, path) != ST_OK) return;
    st_range_iter *ri;
    st_range rg;
    uint64_t sum = 0;
    if (st_range_iter_open(&ri, r, -1, INT64_MIN, INT64_MAX) == ST_OK) {
        while (st_range_iter_next(ri, &rg) == 1) sum += (uint64_t)rg.dur_ns + rg.depth;
        st_range_iter_close(ri);
    }
    for (uint32_t i = 0; i < st_reader_n_threads(r); i++) {
        uint32_t id = st_reader_thread(r, i)->id;
        if (st_range_iter_open(&ri, r, id, 0, INT64_MAX / 2) == ST_OK) {
            while (st_range_iter_next(ri, &rg) == 1) sum += (uint64_t)rg.start_ns;
            st_range_iter_close(ri);
        }
        st_event_iter *ei;
        st_event ev;
        if (st_event_iter_open(&ei, r, id) == ST_OK) {
            while (st_event_iter_next(ei, &ev) == 1) sum += (uint64_t)ev.ts_ns;
            st_event_iter_close(ei);
        }
    }
    st_sample_iter *si;
    st_sample_row row;
    if (st_sample_iter_open(&si, r, -1, INT64_MIN, INT64_MAX) == ST_OK) {
        while (st_sample_iter_next(si, &row) == 1) sum += row.counter;
        st_sample_iter_close(si);
    }
    st_gpu_iter *gi;
    st_gpu_row g;
    if (st_gpu_iter_open(&gi, r, -1, INT64_MIN, INT64_MAX) == ST_OK) {
        while (st_gpu_iter_next(gi, &g) == 1) sum += (uint64_t)g.rec.dur_ns + (uint64_t)g.stage + (g.name ? 1 : 0);
        st_gpu_iter_close(gi);
    }
    if (st_gpu_iter_open(&gi, r, 0, 0, INT64_MAX / 2) == ST_OK) {
        while (st_gpu_iter_next(gi, &g) == 1) sum += (uint64_t)g.launch_ns;
        st_gpu_iter_close(gi);
    }
    if (st_gpu_api_iter_open(&gi, r, INT64_MIN, INT64_MAX) == ST_OK) {
        while (st_gpu_iter_next(gi, &g) == 1) sum += (uint64_t)g.thread + (g.name ? strlen(g.name) : 0);
        st_gpu_iter_close(gi);
    }
    if (st_reader_has_cpu(r) == 1) {
        st_cpu_thread_info ti;
        for (uint32_t i = 0; i < st_reader_n_threads(r); i++) {
            uint32_t id = st_reader_thread(r, i)->id;
            if (st_reader_cpu_thread(r, id, &ti) == 1) sum += (uint64_t)ti.samples + strlen(ti.status);
            st_cpu_iter *ci;
            st_cpu_row c;
            if (st_cpu_iter_open(&ci, r, id, INT64_MIN, INT64_MAX) != ST_OK) continue;
            while (st_cpu_iter_next(ci, &c) == 1) {
                sum += (uint64_t)c.ts_ns + (uint64_t)c.stage + c.n_lost;
                if (c.kind != ST_CPU_ROW_SAMPLE) continue;
                const uint64_t *f;
                uint32_t n;
                if (st_reader_cpu_stack(r, c.stack, &f, &n) != ST_OK) continue;
                for (uint32_t k = 0; k < n && k < 4; k++) {
                    st_cpu_frame fr;
                    if (st_reader_cpu_frame_name(r, c.stack, f[k], &fr) >= 0) sum += strlen(fr.name) + strlen(fr.path);
                }
            }
            st_cpu_iter_close(ci);
            st_cpu_block_iter *bi;
            st_cpu_block_row b;
            if (st_cpu_block_iter_open(&bi, r, id, INT64_MIN, INT64_MAX) != ST_OK) continue;
            while (st_cpu_block_iter_next(bi, &b) == 1) sum += (uint64_t)b.t_ns + strlen(b.name) + strlen(b.wchan);
            st_cpu_block_iter_close(bi);
        }
        st_cpu_window_iter *wi;
        st_cpu_window_row w;
        if (st_cpu_window_iter_open(&wi, r) == ST_OK) {
            while (st_cpu_window_iter_next(wi, &w) == 1) sum += (uint64_t)w.oncpu_ns + strlen(w.name);
            st_cpu_window_iter_close(wi);
        }
    }
    size_t text = 0;
    st_reader_windows(r, 1, on_window, &text);
    st_reader_windows(r, 3, on_window, &text);
    sqlite3 *db = st_reader_db(r);
    if (st_sql_register(db) == 0) {
        sqlite3_stmt *st;
        if (sqlite3_prepare_v2(db, "SELECT count(*), sum(dur_ns), max(step) FROM ranges_v; ", -1, &st, NULL) == SQLITE_OK) {
            while (sqlite3_step(st) == SQLITE_ROW) sum += (uint64_t)sqlite3_column_int64(st, 0);
            sqlite3_finalize(st);
        }
        if (sqlite3_prepare_v2(db, "SELECT count(*), sum(dur_ns), max(stage) FROM gpu", -1, &st, NULL) == SQLITE_OK) {
            while (sqlite3_step(st) == SQLITE_ROW) sum += (uint64_t)sqlite3_column_int64(st, 0);
            sqlite3_finalize(st);
        }
        if (sqlite3_prepare_v2(db, "SELECT count(*), sum(value) FROM counters_v", -1, &st, NULL) == SQLITE_OK) {
            while (sqlite3_step(st) == SQLITE_ROW) sum += (uint64_t)sqlite3_column_int64(st, 0);
            sqlite3_finalize(st);
        }
    }
    st_reader_close(r);
    if (sum == 42 && text == 42) fputc(' ', stderr); /* keep the work observable */
}

static void model(void)
{
    an_trace t;
    if (an_trace_open(&t, path) != AN_EXIT_OK) return;
    an_pipe p;
    an_pipe_opts o;
    memset(&o, 0, sizeof o);
    o.max_cells = 4096; /* small: grouped bins get exercised too */
    if (an_pipe_compute(&p, &t, &o) == AN_EXIT_OK) {
        an_role_load *loads = calloc(p.n_roles ? p.n_roles : 1, sizeof *loads);
        if (loads) {
            an_verdict v;
            an_pipe_loads(&p, 0, p.n_bins, loads);
            an_pipe_verdict(&p, 0, p.n_bins, loads, 3.0, &v);
            an_window_verdict *w = NULL;
            uint32_t n = an_pipe_window_verdicts(&p, 2, &w);
            free(an_pipe_story(&p, loads, &v, w, w ? n : 0, 2));
            free(w);
            free(an_pipe_device_loads(&p, 0, p.n_bins));
            free(loads);
        }
        an_gpu_idle *gpu = NULL;
        uint32_t n_gpu = 0;
        char *text = NULL;
        if (an_gpu_idle_steady(&t, p.bin_t[0], p.bin_t[p.n_bins], &gpu, &n_gpu, &text) == AN_EXIT_OK) {
            free(text);
            an_gpu_idle_free(gpu, n_gpu);
        }
    }
    an_pipe_free(&p);
    an_trace_close(&t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (size && fwrite(data, 1, size, f) != size) abort();
    fclose(f);
    quiet(1);
    read_everything();
    model();
    quiet(0);
    static const char *const extra[] = {"-wal", "-shm", "-journal"};
    for (int i = 0; i < 3; i++) {
        char p2[320];
        snprintf(p2, sizeof p2, "%s%s", path, extra[i]);
        unlink(p2);
    }
    return 0;
}
