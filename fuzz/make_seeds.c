/* make_seeds.c: writes the seed corpora of the fuzz targets (make fuzz):
 *   DIR/reader/  small valid traces (SQLite page size 512, so a few kB each):
 *                a pipeline with nested ranges, step marks and a queue-depth
 *                counter, chunks of a few events cut through open ranges, a
 *                range left open at the end; and an empty trace;
 *                The pipeline trace also holds GPU activity: kernels, a
 *                copy and a sync on device 0, and named API calls of
 *                target0 that launched them.
 *   DIR/chunks/  inputs of fuzz_chunks: 12 bytes of parameters (mode,
 *                count, limit, little-endian) followed by an encoded event,
 *                counter or GPU chunk.
 * Written with the tests' trace writer (tests/tracegen.h); the chunk
 * seeds are chunks of the pipeline trace, read back.
 *   make_seeds DIR
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>

#include "encoding.h"
#include "tracegen.h"

static void die(const char *what)
{
    fprintf(stderr, "make_seeds: %s\n", what);
    exit(1);
}

static void write_chunk_seed(const char *dir, const char *name, uint32_t mode, uint32_t count, uint32_t limit,
                             const st_buf *b)
{
    char path[600];
    snprintf(path, sizeof path, "%s/chunks/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) die("cannot write a chunk seed");
    uint32_t head[3] = {mode, count, limit};
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < 4; k++) fputc((int)(head[i] >> (8 * k)) & 0xff, f);
    fwrite(b->data, 1, b->len, f);
    fclose(f);
}

/* The chunk that sql selects (count, data) from the trace at path, written
 * as a chunk seed. */
static void seed_from_trace(const char *dir, const char *path, const char *name, uint32_t mode, uint32_t limit,
                            const char *sql)
{
    sqlite3 *db;
    sqlite3_stmt *st = NULL;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK || sqlite3_step(st) != SQLITE_ROW)
        die("cannot read a chunk back");
    st_buf b = {(uint8_t *)sqlite3_column_blob(st, 1), (size_t)sqlite3_column_bytes(st, 1), 0};
    write_chunk_seed(dir, name, mode, (uint32_t)sqlite3_column_int64(st, 0), limit, &b);
    sqlite3_finalize(st);
    sqlite3_close(db);
}

/* GPU activity of the pipeline trace: per step k (t = 1000 + 10000 k), a
 * kernel launched by target0 (os tid 101) in forward, a copy, a sync; the
 * launches as named runtime calls, one with a driver call inside it. */
static void add_gpu(tg_trace *g)
{
    static const char *const names[] = {"fwd_kernel", "cudaLaunchKernel", "cuLaunchKernel", "cudaMemcpyAsync"};
    for (int i = 0; i < 4; i++) tg_gpu_string(g, names[i]);
    st_gpu_rec dev[12], api[8], drv[4];
    int n_dev = 0, n_api = 0, n_drv = 0;
    uint32_t corr = 1;
    for (int k = 0; k < 4; k++) {
        int64_t t = 1000 + 10000 * (int64_t)k;
        dev[n_dev++] = (st_gpu_rec){.kind = ST_GPU_KERNEL, .name = 1, .start_ns = t + 2500, .dur_ns = 3000, .correlation = corr};
        api[n_api++] = (st_gpu_rec){.kind = ST_GPU_API, .name = 2, .start_ns = t + 2100, .dur_ns = 40, .correlation = corr++,
                                    .copy_kind = 211, .os_tid = 101};
        drv[n_drv++] = (st_gpu_rec){.kind = ST_GPU_API, .name = 3, .start_ns = t + 2110, .dur_ns = 20,
                                    .correlation = 9000 + (uint32_t)k, .copy_kind = 307, .os_tid = 101};
        dev[n_dev++] = (st_gpu_rec){.kind = ST_GPU_MEMCPY, .start_ns = t + 6000, .dur_ns = 500, .bytes = 4096, .copy_kind = 2,
                                    .src_mem = 3, .dst_mem = 2, .correlation = corr};
        api[n_api++] = (st_gpu_rec){.kind = ST_GPU_API, .name = 4, .start_ns = t + 5900, .dur_ns = 30, .correlation = corr++,
                                    .copy_kind = 41, .os_tid = 101};
        dev[n_dev++] = (st_gpu_rec){.kind = ST_GPU_SYNC, .start_ns = t + 6100, .dur_ns = 600, .copy_kind = 3, .correlation = corr++};
    }
    tg_gpu_chunk(g, 0, 7, dev, (size_t)n_dev);
    tg_gpu_chunk(g, -1, 0, api, (size_t)n_api);
    tg_gpu_chunk(g, -1, 1, drv, (size_t)n_drv);
}

/* The CPU capture's tables: thread 1's switches and samples (one stored
 * "unknown", for the reader to resolve), two stacks, a mapping, symbols. */
static void add_cpu(tg_trace *g)
{
    static const uint64_t f0[] = {0x401000, 0x401234, 0x400f00}, f1[] = {0x7f0000001000ull};
    tg_cpu_thread(g, 1, "perf", 1000000, 500, 30000);
    tg_cpu_stack(g, f0, 3);
    tg_cpu_stack(g, f1, 1);
    const st_cpu_rec c[] = {{.kind = ST_CPU_REC_OUT, .ts_ns = 2000},
                            {.kind = ST_CPU_REC_IN, .ts_ns = 3000},
                            {.kind = ST_CPU_REC_SAMPLE, .ts_ns = 3500, .stack = 0, .stage = 1},
                            {.kind = ST_CPU_REC_SAMPLE_UNKNOWN, .ts_ns = 4000, .stack = 1},
                            {.kind = ST_CPU_REC_PREEMPTED, .ts_ns = 7000},
                            {.kind = ST_CPU_REC_IN, .ts_ns = 7500},
                            {.kind = ST_CPU_REC_LOST, .ts_ns = 8000, .n = 3},
                            {.kind = ST_CPU_REC_SAMPLE, .ts_ns = 12000, .stack = 0, .stage = ST_CPU_NO_STAGE}};
    tg_cpu_chunk(g, 1, c, 4);
    tg_cpu_chunk(g, 1, c + 4, 4);
    tg_cpu_map(g, 0x400000, 0x402000, 0, "/bin/prog", "abcd");
    tg_cpu_symbol(g, 0x401000, 0, "main", 0);
    tg_cpu_symbol(g, 0x401234, 0, "burn", 0x34);
}

/* A small pipeline trace; with_data 0 writes only the schema and meta. */
static void write_trace(const char *dir, const char *name, int with_data)
{
    char path[600];
    snprintf(path, sizeof path, "%s/reader/%s", dir, name);
    tg_trace *g = tg_create("seed");
    tg_meta_clear(g);
    static const char *const meta[][2] = {
        {"schema_version", "1"}, {"status", "complete"}, {"program", "seed"}, {"tool_version", "0.1.0"},
        {"run_id", "1700000000-1"}, {"start_ns", "1000"}, {"clock", "monotonic"}, {"rank", "0"},
        {"world_size", "1"}, {"profile_interval", "2"}, {"dropped_events", "0"},
    };
    for (size_t i = 0; i < sizeof meta / sizeof meta[0]; i++) tg_meta(g, meta[i][0], meta[i][1]);
    tg_set_page_size(g, 512);
    tg_set_chunk_events(g, 0); /* cut where the script says */
    tg_set_os_tid_base(g, 100);
    tg_set_step_thread(g, 3);
    if (with_data) {
        static const struct {
            const char *name, *role;
            int device;
        } threads[] = {{"loader", "loader", -1}, {"target0", "target", 0}, {"drafter0", "drafter", 1}, {"main", "main", -1}};
        for (uint32_t i = 0; i < 4; i++) tg_thread_at(g, tg_thread(g, threads[i].name, threads[i].role))->device = threads[i].device;
        static const char *const stages[][2] = {{"load", "work"},        {"queue_put", "wait_output"}, {"forward", "work"},
                                                {"queue_wait", "wait_input"}, {"stream_sync", "sync"}, {"allreduce", "comm"},
                                                {"h2d", "copy"},          {"step_wait", "wait_input"}};
        for (int i = 0; i < 8; i++) tg_stage(g, stages[i][0], stages[i][1]);
        tg_counter(g, "queue_depth", "items");
        tg_counter(g, "lr", "");
        for (int k = 0; k <= 4; k++) tg_step(g, (uint64_t)k, 1000 + 10000 * k, k ? 100 : 0);
        static const int pattern[4][6] = {{0, 1, -1, 0, 0, 0}, {2, 4, 1, -1, 0, 0}, {3, 2, 6, 5, -1, 0}, {7, -1, 0, 0, 0, 0}};
        for (uint32_t th = 0; th < 4; th++) {
            int64_t t = 1000;
            uint32_t n_events = 0;
            for (int k = 0; k < 4; k++) {
                /* stage a, then b nested in a, then c after: pattern per role */
                const int *pt = pattern[th];
                tg_begin(g, th, (uint32_t)pt[0], t + 100);
                n_events++;
                if (pt[1] >= 0) {
                    tg_range(g, th, (uint32_t)pt[1], t + 2000, t + 5000);
                    n_events += 2;
                }
                tg_end(g, th, t + 6000);
                n_events++;
                if (pt[1] >= 0 && pt[2] >= 0) {
                    tg_range(g, th, (uint32_t)pt[2], t + 6000, t + 9000 + th);
                    n_events += 2;
                }
                if (n_events >= 5) { /* chunks of a few events, cut through open ranges */
                    tg_cut(g, th);
                    n_events = 0;
                }
                t += 10000;
            }
            if (th == 1) tg_begin(g, th, 2, t + 10); /* left open */
        }
        for (int k = 0; k < 8; k++) {
            tg_sample(g, 1, 0, 1000 + k * 5000, k % 3);
            tg_sample(g, 1, 1, 1000 + k * 5000 + 1, 0.5 / (k + 1));
        }
        add_gpu(g);
        add_cpu(g);
    }
    tg_write(g, path);
    tg_free(g);
    if (with_data) /* why thread 1 blocked, every thread's schedstat per window */
        tg_exec(path, "INSERT INTO cpu_blocks(thread, t_ns, seen_ns, syscall, name, arg0, arg1, wchan) VALUES "
                      "(1, 2000, 2900, 202, 'futex', 4096, 393, 'futex_do_wait');"
                      "INSERT INTO cpu_windows VALUES (0, 2, 1000, 9000, 101, 1, 'w', 5000, 10, 3),"
                      "(0, 2, 1000, 9000, 555, -1, 'helper', 20, 0, 1)");
    if (with_data) {
        seed_from_trace(dir, path, "events_last", 0, 8,
                        "SELECT n_events, data FROM range_chunks WHERE thread = 2 ORDER BY id DESC LIMIT 1");
        seed_from_trace(dir, path, "counters", 1, 2, "SELECT n_samples, data FROM counter_chunks WHERE thread = 1");
        seed_from_trace(dir, path, "gpu_device", 2, 0, "SELECT n_records, data FROM gpu_chunks WHERE device = 0");
        seed_from_trace(dir, path, "gpu_api", 2, 0, "SELECT n_records, data FROM gpu_chunks WHERE device = -1 AND stream = 0");
        /* a chunk of version 1 ('G': ten varints per record): a kernel and an API call */
        st_gpu_rec v1[] = {
            {.kind = ST_GPU_KERNEL, .name = 3, .start_ns = 2000, .dur_ns = 300, .correlation = 9},
            {.kind = ST_GPU_API, .start_ns = 1500, .dur_ns = 5, .copy_kind = 211, .correlation = 9, .os_tid = 77},
        };
        st_buf b = {0};
        tg_encode_gpu_v1(&b, v1, 2, NULL, NULL);
        write_chunk_seed(dir, "gpu_v1", 2, 2, 0, &b);
        st_buf_free(&b);
    }
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: make_seeds DIR\n");
        return 2;
    }
    char sub[600];
    mkdir(argv[1], 0777);
    snprintf(sub, sizeof sub, "%s/reader", argv[1]);
    mkdir(sub, 0777);
    snprintf(sub, sizeof sub, "%s/chunks", argv[1]);
    mkdir(sub, 0777);
    write_trace(argv[1], "pipeline.sqlite", 1);
    write_trace(argv[1], "empty.sqlite", 0);
    /* a chunk with an open stack in its header */
    st_event_encoder e;
    memset(&e, 0, sizeof e);
    st_event_put_begin(&e, 1, 5);
    st_event_put_begin(&e, 2, 9);
    if (st_event_chunk_start(&e)) die("no memory");
    st_event_put_end(&e, 20);
    st_event_put_begin(&e, 0, 30);
    st_event_put_end(&e, 31);
    st_event_put_end(&e, 40);
    write_chunk_seed(argv[1], "events_open", 0, e.n_events, 3, &e.buf);
    st_buf_free(&e.buf);
    return 0;
}
