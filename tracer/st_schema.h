/* st_schema.h: the SQL that creates a trace file, schema version 1. Every
 * table and column is documented in docs/trace-format.md. */
#ifndef ST_SCHEMA_H
#define ST_SCHEMA_H

static const char st_schema_sql[] =
    "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);\n"
    "CREATE TABLE threads(id INTEGER PRIMARY KEY, os_tid INTEGER NOT NULL, name TEXT NOT NULL,\n"
    "  role TEXT NOT NULL, device INTEGER NOT NULL, rank INTEGER NOT NULL,\n"
    "  dropped INTEGER NOT NULL DEFAULT 0);\n"
    "CREATE TABLE stages(id INTEGER PRIMARY KEY, name TEXT NOT NULL, kind TEXT NOT NULL);\n"
    "CREATE TABLE counter_names(id INTEGER PRIMARY KEY, name TEXT NOT NULL, unit TEXT NOT NULL);\n"
    "CREATE TABLE strings(id INTEGER PRIMARY KEY, value TEXT NOT NULL);\n"
    "CREATE TABLE steps(step INTEGER PRIMARY KEY, ts_ns INTEGER NOT NULL, tokens INTEGER NOT NULL,\n"
    "  thread INTEGER NOT NULL);\n"
    "CREATE TABLE marks(thread INTEGER NOT NULL, ts_ns INTEGER NOT NULL, string INTEGER NOT NULL);\n"
    "CREATE TABLE range_chunks(id INTEGER PRIMARY KEY, thread INTEGER NOT NULL,\n"
    "  t0_ns INTEGER NOT NULL, t1_ns INTEGER NOT NULL, n_events INTEGER NOT NULL,\n"
    "  n_ranges INTEGER NOT NULL, data BLOB NOT NULL);\n"
    "CREATE INDEX range_chunks_by_thread ON range_chunks(thread, id);\n"
    "CREATE TABLE counter_chunks(id INTEGER PRIMARY KEY, thread INTEGER NOT NULL,\n"
    "  t0_ns INTEGER NOT NULL, t1_ns INTEGER NOT NULL, n_samples INTEGER NOT NULL,\n"
    "  data BLOB NOT NULL);\n"
    "CREATE INDEX counter_chunks_by_thread ON counter_chunks(thread, id);\n";

/* The GPU tables, created with the first GPU data (a trace without GPU
 * tracing has neither). */
static const char st_gpu_schema_sql[] =
    "CREATE TABLE IF NOT EXISTS gpu_strings(id INTEGER PRIMARY KEY, value TEXT NOT NULL);\n"
    "CREATE TABLE IF NOT EXISTS gpu_chunks(id INTEGER PRIMARY KEY, device INTEGER NOT NULL,\n"
    "  stream INTEGER NOT NULL, t0_ns INTEGER NOT NULL, t1_ns INTEGER NOT NULL,\n"
    "  n_records INTEGER NOT NULL, data BLOB NOT NULL);\n"
    "CREATE INDEX IF NOT EXISTS gpu_chunks_by_stream ON gpu_chunks(device, stream, id);\n";

/* The GPU capture's pauses (st_gpu_pause), created with the first one. */
static const char st_gpu_pauses_sql[] =
    "CREATE TABLE IF NOT EXISTS gpu_pauses(id INTEGER PRIMARY KEY, t0_ns INTEGER NOT NULL,\n"
    "  t1_ns INTEGER NOT NULL);\n";

/* The names of launching threads the trace did not register, by OS thread
 * id (the GPU collector's), created with the first one. */
static const char st_gpu_threads_sql[] =
    "CREATE TABLE IF NOT EXISTS gpu_threads(os_tid INTEGER PRIMARY KEY, name TEXT NOT NULL);\n";

/* The flow table, created with the first flow record (a trace without
 * flows has none). */
static const char st_flow_schema_sql[] =
    "CREATE TABLE IF NOT EXISTS flow_chunks(id INTEGER PRIMARY KEY, thread INTEGER NOT NULL,\n"
    "  t0_ns INTEGER NOT NULL, t1_ns INTEGER NOT NULL, n_records INTEGER NOT NULL,\n"
    "  data BLOB NOT NULL);\n"
    "CREATE INDEX IF NOT EXISTS flow_chunks_by_thread ON flow_chunks(thread, id);\n";

/* The CPU capture's tables (opt.cpu), created when the trace opens with it
 * on (a trace recorded without it has none). */
static const char st_cpu_schema_sql[] =
    "CREATE TABLE IF NOT EXISTS cpu_threads(thread INTEGER PRIMARY KEY, os_tid INTEGER NOT NULL,\n"
    "  status TEXT NOT NULL, reason TEXT NOT NULL, period_ns INTEGER NOT NULL,\n"
    "  ring_bytes INTEGER NOT NULL, refused_bytes INTEGER NOT NULL, start_ns INTEGER NOT NULL,\n"
    "  cpu_ns INTEGER NOT NULL, switches INTEGER NOT NULL, samples INTEGER NOT NULL,\n"
    "  lost INTEGER NOT NULL);\n"
    "CREATE TABLE IF NOT EXISTS cpu_chunks(id INTEGER PRIMARY KEY, thread INTEGER NOT NULL,\n"
    "  t0_ns INTEGER NOT NULL, t1_ns INTEGER NOT NULL, n_records INTEGER NOT NULL,\n"
    "  data BLOB NOT NULL);\n"
    "CREATE INDEX IF NOT EXISTS cpu_chunks_by_thread ON cpu_chunks(thread, id);\n"
    "CREATE TABLE IF NOT EXISTS cpu_stacks(id INTEGER PRIMARY KEY, n_frames INTEGER NOT NULL,\n"
    "  data BLOB NOT NULL);\n"
    "CREATE TABLE IF NOT EXISTS cpu_maps(id INTEGER PRIMARY KEY, start INTEGER NOT NULL,\n"
    "  end INTEGER NOT NULL, file_offset INTEGER NOT NULL, path TEXT NOT NULL,\n"
    "  build_id TEXT NOT NULL);\n"
    "CREATE TABLE IF NOT EXISTS cpu_symbols(addr INTEGER PRIMARY KEY, map INTEGER NOT NULL,\n"
    "  file_offset INTEGER NOT NULL, name TEXT NOT NULL, sym_offset INTEGER NOT NULL);\n"
    "CREATE TABLE IF NOT EXISTS cpu_lines(addr INTEGER NOT NULL, depth INTEGER NOT NULL,\n"
    "  function TEXT NOT NULL, file TEXT NOT NULL, line INTEGER NOT NULL, col INTEGER NOT NULL,\n"
    "  PRIMARY KEY(addr, depth));\n"
    "CREATE TABLE IF NOT EXISTS cpu_blocks(id INTEGER PRIMARY KEY, thread INTEGER NOT NULL,\n"
    "  t_ns INTEGER NOT NULL, seen_ns INTEGER NOT NULL, syscall INTEGER NOT NULL,\n"
    "  name TEXT NOT NULL, arg0 INTEGER NOT NULL, arg1 INTEGER NOT NULL, wchan TEXT NOT NULL);\n"
    "CREATE INDEX IF NOT EXISTS cpu_blocks_by_thread ON cpu_blocks(thread, t_ns);\n"
    "CREATE TABLE IF NOT EXISTS cpu_windows(window INTEGER NOT NULL, step INTEGER NOT NULL,\n"
    "  t0_ns INTEGER NOT NULL, t1_ns INTEGER NOT NULL, os_tid INTEGER NOT NULL,\n"
    "  thread INTEGER NOT NULL, name TEXT NOT NULL, oncpu_ns INTEGER NOT NULL,\n"
    "  runq_ns INTEGER NOT NULL, slices INTEGER NOT NULL, PRIMARY KEY(window, os_tid));\n";

#endif
