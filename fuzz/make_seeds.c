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
 * Written with SQLite and the chunk encoder directly, like the tests.
 *   make_seeds DIR
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>

#include "encoding.h"
#include "st_schema.h"

static void die(const char *what)
{
    fprintf(stderr, "make_seeds: %s\n", what);
    exit(1);
}

static void sql(sqlite3 *db, const char *s)
{
    char *err = NULL;
    if (sqlite3_exec(db, s, NULL, NULL, &err) != SQLITE_OK) {
        fprintf(stderr, "make_seeds: %s: %s\n", s, err ? err : "?");
        exit(1);
    }
}

static void put_chunk(sqlite3 *db, int thread, st_event_encoder *e, int n_ranges)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, "INSERT INTO range_chunks(thread, t0_ns, t1_ns, n_events, n_ranges, data) VALUES (?,?,?,?,?,?)",
                           -1, &st, NULL) != SQLITE_OK)
        die("prepare");
    sqlite3_bind_int(st, 1, thread);
    sqlite3_bind_int64(st, 2, e->t0_ns);
    sqlite3_bind_int64(st, 3, e->t1_ns);
    sqlite3_bind_int(st, 4, (int)e->n_events);
    sqlite3_bind_int(st, 5, n_ranges);
    sqlite3_bind_blob(st, 6, e->buf.data, (int)e->buf.len, SQLITE_STATIC);
    if (sqlite3_step(st) != SQLITE_DONE) die("insert chunk");
    sqlite3_finalize(st);
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

static void put_gpu_chunk(sqlite3 *db, int device, int stream, st_gpu_encoder *e)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, "INSERT INTO gpu_chunks(device,stream,t0_ns,t1_ns,n_records,data) VALUES (?,?,?,?,?,?)",
                           -1, &st, NULL) != SQLITE_OK)
        die("prepare");
    sqlite3_bind_int(st, 1, device);
    sqlite3_bind_int(st, 2, stream);
    sqlite3_bind_int64(st, 3, e->t0_ns);
    sqlite3_bind_int64(st, 4, e->t1_ns);
    sqlite3_bind_int(st, 5, (int)e->n_records);
    sqlite3_bind_blob(st, 6, e->buf.data, (int)e->buf.len, SQLITE_STATIC);
    if (sqlite3_step(st) != SQLITE_DONE) die("insert gpu chunk");
    sqlite3_finalize(st);
}

/* GPU activity of the pipeline trace: per step k (t = 1000 + 10000 k), a
 * kernel launched by target0 (os tid 101) in forward, a copy, a sync; the
 * launches as named runtime calls, one with a driver call inside it. */
static void write_gpu(const char *dir, sqlite3 *db)
{
    sql(db, "CREATE TABLE gpu_strings(id INTEGER PRIMARY KEY, value TEXT NOT NULL);"
            "CREATE TABLE gpu_chunks(id INTEGER PRIMARY KEY, device INTEGER NOT NULL, stream INTEGER NOT NULL,"
            " t0_ns INTEGER NOT NULL, t1_ns INTEGER NOT NULL, n_records INTEGER NOT NULL, data BLOB NOT NULL);"
            "INSERT INTO gpu_strings VALUES (0,'fwd_kernel'),(1,'cudaLaunchKernel'),(2,'cuLaunchKernel'),"
            "(3,'cudaMemcpyAsync')");
    st_gpu_encoder dev, api, drv;
    memset(&dev, 0, sizeof dev);
    memset(&api, 0, sizeof api);
    memset(&drv, 0, sizeof drv);
    if (st_gpu_chunk_start(&dev) || st_gpu_chunk_start(&api) || st_gpu_chunk_start(&drv)) die("no memory");
    uint32_t corr = 1;
    for (int k = 0; k < 4; k++) {
        int64_t t = 1000 + 10000 * (int64_t)k;
        st_gpu_rec kern = {.kind = ST_GPU_KERNEL, .name = 1, .start_ns = t + 2500, .dur_ns = 3000, .correlation = corr};
        st_gpu_rec call = {.kind = ST_GPU_API, .name = 2, .start_ns = t + 2100, .dur_ns = 40, .correlation = corr++,
                           .copy_kind = 211, .os_tid = 101};
        st_gpu_rec inner = {.kind = ST_GPU_API, .name = 3, .start_ns = t + 2110, .dur_ns = 20, .correlation = 9000 + (uint32_t)k,
                            .copy_kind = 307, .os_tid = 101};
        st_gpu_rec copy = {.kind = ST_GPU_MEMCPY, .start_ns = t + 6000, .dur_ns = 500, .bytes = 4096, .copy_kind = 2,
                           .src_mem = 3, .dst_mem = 2, .correlation = corr};
        st_gpu_rec copy_call = {.kind = ST_GPU_API, .name = 4, .start_ns = t + 5900, .dur_ns = 30, .correlation = corr++,
                                .copy_kind = 41, .os_tid = 101};
        st_gpu_rec sync = {.kind = ST_GPU_SYNC, .start_ns = t + 6100, .dur_ns = 600, .copy_kind = 3, .correlation = corr++};
        if (st_gpu_put(&dev, &kern) || st_gpu_put(&dev, &copy) || st_gpu_put(&dev, &sync) || st_gpu_put(&api, &call) ||
            st_gpu_put(&api, &copy_call) || st_gpu_put(&drv, &inner))
            die("gpu put");
    }
    put_gpu_chunk(db, 0, 7, &dev);
    put_gpu_chunk(db, -1, 0, &api);
    put_gpu_chunk(db, -1, 1, &drv);
    write_chunk_seed(dir, "gpu_device", 2, dev.n_records, 0, &dev.buf);
    write_chunk_seed(dir, "gpu_api", 2, api.n_records, 0, &api.buf);
    /* a chunk of version 1 ('G': ten varints per record): a kernel and an API call */
    static const uint8_t v1[] = {0x47, 0x01, 0xa0, 0x1f, 0xac, 0x02, 0x03, 0x00, 0x00, 0x00, 0x00, 0x09, 0x00,
                                 0x05, 0xe7, 0x07, 0x05, 0x00, 0x00, 0xd3, 0x01, 0x00, 0x00, 0x09, 0x9a, 0x01};
    st_buf b1 = {(uint8_t *)v1, sizeof v1, sizeof v1};
    write_chunk_seed(dir, "gpu_v1", 2, 2, 0, &b1);
    st_buf_free(&dev.buf);
    st_buf_free(&api.buf);
    st_buf_free(&drv.buf);
}

/* A small pipeline trace; with_data 0 writes only the schema and meta. */
static void write_trace(const char *dir, const char *name, int with_data)
{
    char path[600];
    snprintf(path, sizeof path, "%s/reader/%s", dir, name);
    unlink(path);
    sqlite3 *db;
    if (sqlite3_open(path, &db) != SQLITE_OK) die("cannot create a seed trace");
    sql(db, "PRAGMA page_size=512; PRAGMA journal_mode=DELETE; PRAGMA synchronous=OFF");
    sql(db, st_schema_sql);
    sql(db, "BEGIN");
    sql(db, "INSERT INTO meta VALUES ('schema_version','1'),('status','complete'),('program','seed'),"
            "('tool_version','0.1.0'),('run_id','1700000000-1'),('start_ns','1000'),('clock','monotonic'),"
            "('rank','0'),('world_size','1'),('profile_interval','2'),('dropped_events','0')");
    if (with_data) {
        sql(db, "INSERT INTO threads VALUES (0,100,'loader','loader',-1,0,0),(1,101,'target0','target',0,0,0),"
                "(2,102,'drafter0','drafter',1,0,0),(3,103,'main','main',-1,0,0)");
        sql(db, "INSERT INTO stages VALUES (0,'load','work'),(1,'queue_put','wait_output'),(2,'forward','work'),"
                "(3,'queue_wait','wait_input'),(4,'stream_sync','sync'),(5,'allreduce','comm'),(6,'h2d','copy'),"
                "(7,'step_wait','wait_input')");
        sql(db, "INSERT INTO counter_names VALUES (0,'queue_depth','items'),(1,'lr','')");
        sql(db, "INSERT INTO steps VALUES (0,1000,0,3),(1,11000,100,3),(2,21000,100,3),(3,31000,100,3),(4,41000,100,3)");
        static const int pattern[4][6] = {{0, 1, -1, 0, 0, 0}, {2, 4, 1, -1, 0, 0}, {3, 2, 6, 5, -1, 0}, {7, -1, 0, 0, 0, 0}};
        for (int th = 0; th < 4; th++) {
            st_event_encoder e;
            memset(&e, 0, sizeof e);
            if (st_event_chunk_start(&e)) die("no memory");
            int64_t t = 1000;
            int n_ranges = 0;
            for (int k = 0; k < 4; k++) {
                /* stage a, then b nested in a, then c after: pattern per role */
                const int *pt = pattern[th];
                st_event_put_begin(&e, (uint32_t)pt[0], t + 100);
                if (pt[1] >= 0) {
                    st_event_put_begin(&e, (uint32_t)pt[1], t + 2000);
                    st_event_put_end(&e, t + 5000);
                    n_ranges++;
                }
                st_event_put_end(&e, t + 6000);
                n_ranges++;
                if (pt[1] >= 0 && pt[2] >= 0) {
                    st_event_put_begin(&e, (uint32_t)pt[2], t + 6000);
                    st_event_put_end(&e, t + 9000 + th);
                    n_ranges++;
                }
                if (e.n_events >= 5) {
                    put_chunk(db, th, &e, n_ranges);
                    n_ranges = 0;
                    if (st_event_chunk_start(&e)) die("no memory");
                }
                t += 10000;
            }
            if (th == 1) st_event_put_begin(&e, 2, t + 10); /* left open */
            if (e.n_events) put_chunk(db, th, &e, n_ranges);
            if (th == 2) write_chunk_seed(dir, "events_last", 0, e.n_events, 8, &e.buf);
            st_buf_free(&e.buf);
        }
        st_counter_encoder c;
        memset(&c, 0, sizeof c);
        if (st_counter_chunk_start(&c)) die("no memory");
        for (int k = 0; k < 8; k++) {
            st_counter_put(&c, 0, 1000 + k * 5000, k % 3);
            st_counter_put(&c, 1, 1000 + k * 5000 + 1, 0.5 / (k + 1));
        }
        sqlite3_stmt *st;
        if (sqlite3_prepare_v2(db, "INSERT INTO counter_chunks(thread,t0_ns,t1_ns,n_samples,data) VALUES (1,?,?,?,?)", -1,
                               &st, NULL) != SQLITE_OK)
            die("prepare");
        sqlite3_bind_int64(st, 1, c.t0_ns);
        sqlite3_bind_int64(st, 2, c.t1_ns);
        sqlite3_bind_int(st, 3, (int)c.n_samples);
        sqlite3_bind_blob(st, 4, c.buf.data, (int)c.buf.len, SQLITE_STATIC);
        if (sqlite3_step(st) != SQLITE_DONE) die("insert counters");
        sqlite3_finalize(st);
        write_chunk_seed(dir, "counters", 1, c.n_samples, 2, &c.buf);
        st_buf_free(&c.buf);
        write_gpu(dir, db);
    }
    sql(db, "COMMIT");
    sql(db, "VACUUM");
    if (sqlite3_close(db) != SQLITE_OK) die("close");
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
