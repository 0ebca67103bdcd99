/* bench_store.c: the storage side, in one run so the figures compare.
 *
 * writer: one producer thread records N ranges (8 stages, every fourth range
 *   nested in the previous one) as fast as it can, ring in blocking mode so
 *   nothing is dropped; the figure is N over the time from the first record
 *   until st_close has stored everything, and the file's bytes per range.
 *   Beside it, the naive way: one INSERT per range row into a plain table
 *   (prepared statement, WAL, one transaction per 100k rows).
 * reader: the same N stored ranges decoded and summed per stage through the
 *   library's reader, beside SELECT stage, count(*), sum(dur_ns) ... GROUP BY
 *   stage over a plain row table holding the same ranges.
 *
 *   build/bench/bench_store [N ranges, default 10000000] */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "stagetrace.h"
#include "stagetrace_reader.h"

#define N_STAGES 8

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static long long file_bytes(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 ? (long long)sb.st_size : -1;
}

static void check(int rc, sqlite3 *db, const char *what)
{
    if (rc != SQLITE_OK && rc != SQLITE_DONE && rc != SQLITE_ROW) {
        fprintf(stderr, "bench_store: %s: %s\n", what, sqlite3_errmsg(db));
        exit(1);
    }
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 10000000;
    if (n < 1000) {
        fprintf(stderr, "bench_store: usage: bench_store [ranges >= 1000]\n");
        return 2;
    }
    const char *dir = getenv("ST_BENCH_TMP") ? getenv("ST_BENCH_TMP") : "/tmp";
    char trace_path[4096], rows_path[4096], naive_path[4096];
    snprintf(trace_path, sizeof trace_path, "%s/bench_store_%d.sqlite", dir, (int)getpid());
    snprintf(rows_path, sizeof rows_path, "%s/bench_store_rows_%d.sqlite", dir, (int)getpid());
    snprintf(naive_path, sizeof naive_path, "%s/bench_store_naive_%d.sqlite", dir, (int)getpid());

    /* ---- writer ---- */
    st_options opt;
    st_options_init(&opt);
    opt.path = trace_path;
    opt.overwrite = 1;
    opt.program = "bench_store";
    opt.nvtx = 0;
    opt.block_when_full = 1;
    opt.ring_records = 1u << 20;
    st_trace *t;
    if (st_open(&t, &opt)) {
        fprintf(stderr, "bench_store: %s\n", st_last_error());
        return 1;
    }
    int stages[N_STAGES];
    for (int i = 0; i < N_STAGES; i++) {
        char name[16];
        snprintf(name, sizeof name, "stage%d", i);
        stages[i] = st_stage_register(t, name, (st_kind)(i % ST_KIND_COUNT));
    }
    st_thread_register(t, "producer", "bench", -1, 0);
    double a = now_s();
    for (long i = 0; i < n;) {
        st_stage outer = (st_stage)stages[i % N_STAGES];
        st_begin(outer);
        i++;
        if (i % 4 == 0 && i < n) {
            st_stage inner = (st_stage)stages[i % N_STAGES];
            st_begin(inner);
            st_end(inner);
            i++;
        }
        st_end(outer);
    }
    uint64_t dropped = st_dropped(t);
    st_close(t);
    double writer_s = now_s() - a;
    long long trace_bytes = file_bytes(trace_path);

    /* ---- naive baseline: one INSERT per range ---- */
    long n_naive = n / 5 > 200000 ? n / 5 : n;
    sqlite3 *db;
    unlink(naive_path);
    check(sqlite3_open(naive_path, &db), db, "open");
    check(sqlite3_exec(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"
                           "CREATE TABLE ranges(thread INTEGER, stage INTEGER, start_ns INTEGER,"
                           " dur_ns INTEGER, depth INTEGER)", NULL, NULL, NULL), db, "schema");
    sqlite3_stmt *ins;
    check(sqlite3_prepare_v2(db, "INSERT INTO ranges VALUES (?, ?, ?, ?, ?)", -1, &ins, NULL), db, "prepare");
    a = now_s();
    int64_t ts0 = st_now_ns();
    check(sqlite3_exec(db, "BEGIN", NULL, NULL, NULL), db, "begin");
    for (long i = 0; i < n_naive; i++) {
        sqlite3_bind_int64(ins, 1, 0);
        sqlite3_bind_int64(ins, 2, i % N_STAGES);
        sqlite3_bind_int64(ins, 3, ts0 + i * 40);
        sqlite3_bind_int64(ins, 4, 30);
        sqlite3_bind_int64(ins, 5, 0);
        check(sqlite3_step(ins), db, "insert");
        sqlite3_reset(ins);
        if (i % 100000 == 99999) {
            check(sqlite3_exec(db, "COMMIT; BEGIN", NULL, NULL, NULL), db, "commit");
        }
    }
    check(sqlite3_exec(db, "COMMIT", NULL, NULL, NULL), db, "commit");
    sqlite3_finalize(ins);
    check(sqlite3_exec(db, "PRAGMA journal_mode=DELETE", NULL, NULL, NULL), db, "checkpoint");
    double naive_s = now_s() - a;
    sqlite3_close(db);
    long long naive_bytes = file_bytes(naive_path);
    unlink(naive_path);

    /* ---- reader: decode + sum per stage ---- */
    st_reader *r;
    if (st_reader_open(&r, trace_path)) {
        fprintf(stderr, "bench_store: %s\n", st_last_error());
        return 1;
    }
    int64_t sum[N_STAGES] = {0};
    long count[N_STAGES] = {0}, total = 0;
    a = now_s();
    st_range_iter *it;
    st_range_iter_open(&it, r, -1, INT64_MIN, INT64_MAX);
    st_range rg;
    while (st_range_iter_next(it, &rg) == 1) {
        sum[rg.stage] += rg.dur_ns;
        count[rg.stage]++;
    }
    st_range_iter_close(it);
    double reader_s = now_s() - a;
    for (int i = 0; i < N_STAGES; i++) total += count[i];

    /* the same ranges as a plain row table (built untimed) */
    unlink(rows_path);
    check(sqlite3_open(rows_path, &db), db, "open rows");
    check(sqlite3_exec(db, "PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF;"
                           "CREATE TABLE ranges(thread INTEGER, stage INTEGER, start_ns INTEGER,"
                           " dur_ns INTEGER, depth INTEGER); BEGIN", NULL, NULL, NULL), db, "rows schema");
    check(sqlite3_prepare_v2(db, "INSERT INTO ranges VALUES (?, ?, ?, ?, ?)", -1, &ins, NULL), db, "prepare");
    st_range_iter_open(&it, r, -1, INT64_MIN, INT64_MAX);
    while (st_range_iter_next(it, &rg) == 1) {
        sqlite3_bind_int64(ins, 1, rg.thread);
        sqlite3_bind_int64(ins, 2, rg.stage);
        sqlite3_bind_int64(ins, 3, rg.start_ns);
        sqlite3_bind_int64(ins, 4, rg.dur_ns);
        sqlite3_bind_int64(ins, 5, rg.depth);
        sqlite3_step(ins);
        sqlite3_reset(ins);
    }
    st_range_iter_close(it);
    sqlite3_finalize(ins);
    check(sqlite3_exec(db, "COMMIT", NULL, NULL, NULL), db, "commit rows");
    st_reader_close(r);
    sqlite3_close(db);
    check(sqlite3_open_v2(rows_path, &db, SQLITE_OPEN_READONLY, NULL), db, "reopen rows");
    sqlite3_stmt *q;
    check(sqlite3_prepare_v2(db, "SELECT stage, count(*), sum(dur_ns) FROM ranges GROUP BY stage",
                             -1, &q, NULL), db, "group by");
    a = now_s();
    long sql_total = 0;
    int64_t sql_sum = 0, lib_sum = 0;
    while (sqlite3_step(q) == SQLITE_ROW) {
        sql_total += sqlite3_column_int64(q, 1);
        sql_sum += sqlite3_column_int64(q, 2);
    }
    double sql_s = now_s() - a;
    sqlite3_finalize(q);
    sqlite3_close(db);
    unlink(rows_path);
    for (int i = 0; i < N_STAGES; i++) lib_sum += sum[i];

    printf("storage, %ld ranges (1 producer thread, blocking ring, no NVTX)\n", n);
    printf("  writer: %.2f M ranges/s, %.2f bytes/range on disk, %llu dropped\n",
           n / writer_s / 1e6, (double)trace_bytes / n, (unsigned long long)dropped);
    printf("  naive one INSERT per range (%ld rows): %.2f M ranges/s, %.2f bytes/range\n", n_naive,
           n_naive / naive_s / 1e6, (double)naive_bytes / n_naive);
    printf("  writer / naive throughput: %.1fx\n", (n / writer_s) / (n_naive / naive_s));
    printf("  reader decode+sum: %.3f s (%.1f M ranges/s)\n", reader_s, total / reader_s / 1e6);
    printf("  GROUP BY over plain rows: %.3f s\n", sql_s);
    printf("  reader / GROUP BY speedup: %.1fx\n", sql_s / reader_s);
    printf("  check: %ld ranges read, %ld by SQL, sums %s\n", total, sql_total,
           lib_sum == sql_sum ? "equal" : "DIFFER");
    unlink(trace_path);
    return total == n && sql_total == n && lib_sum == sql_sum ? 0 : 1;
}
