/* _reader.c: the reading half of the stagetrace extension: stagetrace._read
 * opens a trace with libstagetrace's reader and returns its small tables as
 * lists and dicts and its ranges, counter samples, GPU records and CPU
 * samples (with their stacks' frame names in a dict) as
 * bytearrays of fixed rows (the layouts below), which __init__.py views as
 * NumPy arrays; _layouts gives the row sizes it checks them against. The
 * module and the recording side are in _stagetrace.c; _stagetrace.h is what
 * the two share. */
#include "_stagetrace.h" /* first: Python.h on the limited API */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sqlite3.h>

#include "stagetrace.h"
#include "stagetrace_reader.h"

/* Row layouts, mirrored by the NumPy dtypes in __init__.py. */
typedef struct {
    int64_t start_ns, dur_ns;
    uint32_t thread;
    uint16_t stage, depth;
} py_range;
typedef struct {
    int64_t ts_ns;
    double value;
    uint32_t thread, counter;
} py_sample;
typedef struct {
    uint64_t step;
    int64_t ts_ns;
    uint64_t tokens;
} py_step;
typedef struct {
    int64_t start_ns, dur_ns;
    uint64_t bytes;
    int64_t launch_ns, thread, stage;
    int32_t device;
    uint32_t stream, kind, name, copy_kind, src_mem, dst_mem, correlation;
    int64_t launch_tid; /* the launching call's OS thread, 0 unknown */
} py_gpu;

/* A CPU sample (st_cpu_iter's ST_CPU_ROW_SAMPLE rows): gil 1 the thread
 * held the GIL, 0 not, -1 unknown (and always -1 where the library has no
 * GIL probe, ST_HAVE_GIL_PROBE). */
typedef struct {
    int64_t ts_ns;
    uint64_t stack;
    uint32_t thread;
    int32_t stage;
    int8_t gil;
} py_cpu_sample;

/* A bytearray filled without the GIL (nobody else sees it yet); grown with it. */
typedef struct {
    PyObject *buf;
    char *data;
    size_t n, cap, item;
} growbuf;

static int growbuf_init(growbuf *g, size_t item, double hint)
{
    g->item = item;
    g->n = 0;
    g->cap = hint > 0 && hint < 4e9 ? (size_t)hint : 1024;
    if (g->cap < 16) g->cap = 16;
    g->buf = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)(g->cap * item));
    if (!g->buf) return -1;
    g->data = PyByteArray_AsString(g->buf);
    return 0;
}
/* With the GIL held. */
static int growbuf_grow(growbuf *g)
{
    size_t cap = g->cap + g->cap / 2 + 1024;
    if (PyByteArray_Resize(g->buf, (Py_ssize_t)(cap * g->item))) return -1;
    g->cap = cap;
    g->data = PyByteArray_AsString(g->buf);
    return 0;
}
static int growbuf_finish(growbuf *g)
{
    return PyByteArray_Resize(g->buf, (Py_ssize_t)(g->n * g->item));
}

static int read_ranges(st_reader *r, growbuf *g)
{
    st_chunk_totals tot;
    double hint = st_reader_chunk_totals(r, &tot) == ST_OK ? tot.n_ranges : 0;
    if (growbuf_init(g, sizeof(py_range), hint)) return -1;
    st_range_iter *it;
    if (st_range_iter_open(&it, r, -1, INT64_MIN, INT64_MAX) != ST_OK) return stp_set_error(0, "cannot read ranges"), -1;
    int rc = 1;
    for (;;) {
        Py_BEGIN_ALLOW_THREADS
        py_range *out = (py_range *)g->data + g->n, *end = (py_range *)g->data + g->cap;
        st_range rg;
        while (out < end && (rc = st_range_iter_next(it, &rg)) == 1) {
            out->start_ns = rg.start_ns;
            out->dur_ns = rg.dur_ns;
            out->thread = rg.thread;
            out->stage = (uint16_t)rg.stage;
            out->depth = (uint16_t)rg.depth;
            out++;
        }
        g->n = (size_t)(out - (py_range *)g->data);
        Py_END_ALLOW_THREADS
        if (rc != 1) break;
        if (growbuf_grow(g)) {
            st_range_iter_close(it);
            return -1;
        }
    }
    st_range_iter_close(it);
    if (rc < 0) return stp_set_error(rc, "cannot read ranges"), -1;
    return growbuf_finish(g);
}

static int read_samples(st_reader *r, growbuf *g)
{
    st_chunk_totals tot;
    double hint = st_reader_chunk_totals(r, &tot) == ST_OK ? tot.n_samples : 0;
    if (growbuf_init(g, sizeof(py_sample), hint)) return -1;
    st_sample_iter *it;
    if (st_sample_iter_open(&it, r, -1, INT64_MIN, INT64_MAX) != ST_OK)
        return stp_set_error(0, "cannot read counters"), -1;
    int rc = 1;
    for (;;) {
        Py_BEGIN_ALLOW_THREADS
        py_sample *out = (py_sample *)g->data + g->n, *end = (py_sample *)g->data + g->cap;
        st_sample_row s;
        while (out < end && (rc = st_sample_iter_next(it, &s)) == 1) {
            out->ts_ns = s.ts_ns;
            out->value = s.value;
            out->thread = s.thread;
            out->counter = s.counter;
            out++;
        }
        g->n = (size_t)(out - (py_sample *)g->data);
        Py_END_ALLOW_THREADS
        if (rc != 1) break;
        if (growbuf_grow(g)) {
            st_sample_iter_close(it);
            return -1;
        }
    }
    st_sample_iter_close(it);
    if (rc < 0) return stp_set_error(rc, "cannot read counters"), -1;
    return growbuf_finish(g);
}

/* dict[key] = name (UTF-8, bad bytes replaced) unless key is there; key is
 * a new reference (NULL: its creation failed), consumed. -1 on an error. */
static int put_name(PyObject *dict, PyObject *key, const char *name)
{
    if (!key) return -1;
    int have = PyDict_Contains(dict, key);
    if (have == 0) {
        PyObject *v = PyUnicode_DecodeUTF8(name, (Py_ssize_t)strlen(name), "replace");
        if (!v || PyDict_SetItem(dict, key, v)) have = -1;
        Py_XDECREF(v);
    }
    Py_DECREF(key);
    return have < 0 ? -1 : 0;
}

/* GPU records with the GIL held (they are few next to ranges); names go
 * into `names` (gpu_strings id + 1 -> str), the launching threads' names
 * (gpu_threads) into `tnames` (OS thread id -> str). */
static int read_gpu(st_reader *r, growbuf *g, PyObject *names, PyObject *tnames)
{
    st_gpu_headers span;
    double hint = st_reader_gpu_span(r, &span) == ST_OK && span.has ? (double)span.n_records : 0;
    if (growbuf_init(g, sizeof(py_gpu), hint)) return -1;
    int has = st_reader_has_gpu(r);
    if (has < 0) return stp_set_error(has, "cannot read GPU records"), -1;
    if (!has) return growbuf_finish(g);
    st_gpu_iter *it;
    if (st_gpu_iter_open(&it, r, -1, INT64_MIN, INT64_MAX) != ST_OK)
        return stp_set_error(0, "cannot read GPU records"), -1;
    int rc;
    st_gpu_row row;
    while ((rc = st_gpu_iter_next(it, &row)) == 1) {
        if (g->n == g->cap && growbuf_grow(g)) {
            st_gpu_iter_close(it);
            return -1;
        }
        py_gpu *o = (py_gpu *)g->data + g->n++;
        o->start_ns = row.rec.start_ns;
        o->dur_ns = row.rec.dur_ns;
        o->bytes = row.rec.bytes;
        o->launch_ns = row.launch_ns;
        o->thread = row.thread;
        o->stage = row.stage;
        o->device = row.device;
        o->stream = row.stream;
        o->kind = row.rec.kind;
        o->name = row.name ? row.rec.name : 0;
        o->copy_kind = row.rec.copy_kind;
        o->src_mem = row.rec.src_mem;
        o->dst_mem = row.rec.dst_mem;
        o->correlation = row.rec.correlation;
        o->launch_tid = row.launch_os_tid;
        if (row.launch_thread && row.launch_os_tid > 0 &&
            put_name(tnames, PyLong_FromLongLong(row.launch_os_tid), row.launch_thread))
            break;
        if (row.name && put_name(names, PyLong_FromUnsignedLong(row.rec.name), row.name)) break;
    }
    st_gpu_iter_close(it);
    if (PyErr_Occurred()) return -1;
    if (rc < 0) return stp_set_error(rc, "cannot read GPU records"), -1;
    return growbuf_finish(g);
}

/* One frame's label: its symbol's name, else "<path>+0x<file offset>" in a
 * mapped file, else "0x<address>". */
static PyObject *frame_label(st_reader *r, uint64_t stack, uint64_t addr)
{
    st_cpu_frame fr;
    int rc = st_reader_cpu_frame_name(r, stack, addr, &fr);
    if (rc < 0) return stp_set_error(rc, "cannot read a frame's name");
    if (rc == 1 && fr.name && fr.name[0])
        return PyUnicode_DecodeUTF8(fr.name, (Py_ssize_t)strlen(fr.name), "replace");
    if (fr.map >= 0 && fr.path && fr.path[0])
        return PyUnicode_FromFormat("%s+0x%llx", fr.path, (unsigned long long)fr.file_offset);
    return PyUnicode_FromFormat("0x%llx", (unsigned long long)addr);
}

/* The CPU samples of every thread of one row kind (the kernel's,
 * ST_CPU_ROW_SAMPLE, or the Python-frame samples, ST_CPU_ROW_PY_SAMPLE),
 * with the GIL held (samples are a few hundred a second), and each stack
 * they name once in `stacks` (stack id -> tuple of frame labels, innermost
 * first). */
static int read_cpu(st_reader *r, growbuf *g, PyObject *stacks, uint32_t kind)
{
    if (growbuf_init(g, sizeof(py_cpu_sample), 0)) return -1;
    int has = st_reader_has_cpu(r);
    if (has < 0) return stp_set_error(has, "cannot read the CPU capture"), -1;
    if (!has) return growbuf_finish(g);
    uint32_t n_threads = st_reader_n_threads(r);
    for (uint32_t i = 0; i < n_threads; i++) {
        st_cpu_iter *it;
        int rc = st_cpu_iter_open(&it, r, st_reader_thread(r, i)->id, INT64_MIN, INT64_MAX);
        if (rc != ST_OK) return stp_set_error(rc, "cannot read the CPU capture"), -1;
        st_cpu_row row;
        while ((rc = st_cpu_iter_next(it, &row)) == 1) {
            if (row.kind != kind) continue;
            if (g->n == g->cap && growbuf_grow(g)) break;
            py_cpu_sample *o = (py_cpu_sample *)g->data + g->n++;
            memset(o, 0, sizeof *o);
            o->ts_ns = row.ts_ns;
            o->stack = row.stack;
            o->thread = row.thread;
            o->stage = row.stage;
#ifdef ST_HAVE_GIL_PROBE
            o->gil = (int8_t)row.gil;
#else
            o->gil = -1;
#endif
            PyObject *key = PyLong_FromUnsignedLongLong(row.stack);
            if (!key) break;
            int have = PyDict_Contains(stacks, key);
            if (have == 0) {
                const uint64_t *frames;
                uint32_t n;
                int src = st_reader_cpu_stack(r, row.stack, &frames, &n);
                PyObject *t = src == ST_OK ? PyTuple_New(n) : NULL;
                if (src != ST_OK) stp_set_error(src, "cannot read a CPU stack");
                for (uint32_t k = 0; t && k < n; k++) {
                    PyObject *label = frame_label(r, row.stack, frames[k]);
                    if (!label) {
                        Py_CLEAR(t);
                        break;
                    }
                    PyTuple_SetItem(t, k, label);
                }
                if (!t || PyDict_SetItem(stacks, key, t)) have = -1;
                Py_XDECREF(t);
            }
            Py_DECREF(key);
            if (have < 0) break;
        }
        st_cpu_iter_close(it);
        if (PyErr_Occurred()) return -1;
        if (rc < 0) return stp_set_error(rc, "cannot read the CPU capture"), -1;
    }
    return growbuf_finish(g);
}

static PyObject *read_small(st_reader *r, PyObject *out)
{
    /* threads, stages, counter names, steps */
    uint32_t n = st_reader_n_threads(r);
    PyObject *l = PyList_New(n);
    if (!l || PyDict_SetItemString(out, "threads", l)) return Py_XDECREF(l), NULL;
    Py_DECREF(l);
    for (uint32_t i = 0; i < n; i++) {
        const st_thread_info *t = st_reader_thread(r, i);
        PyObject *d = Py_BuildValue("{s:I,s:L,s:s,s:s,s:i,s:i,s:K}", "id", t->id, "os_tid",
                                    (long long)t->os_tid, "name", t->name, "role", t->role, "device",
                                    t->device, "rank", t->rank, "dropped",
                                    (unsigned long long)t->dropped);
        if (!d) return NULL;
        PyList_SetItem(l, i, d);
    }
    n = st_reader_n_stages(r);
    l = PyList_New(n);
    if (!l || PyDict_SetItemString(out, "stages", l)) return Py_XDECREF(l), NULL;
    Py_DECREF(l);
    for (uint32_t i = 0; i < n; i++) {
        const st_stage_info *s = st_reader_stage(r, i);
        PyObject *d = Py_BuildValue("{s:I,s:s,s:s}", "id", s->id, "name", s->name ? s->name : "",
                                    "kind", st_kind_name(s->kind));
        if (!d) return NULL;
        PyList_SetItem(l, i, d);
    }
    n = st_reader_n_counters(r);
    l = PyList_New(n);
    if (!l || PyDict_SetItemString(out, "counter_names", l)) return Py_XDECREF(l), NULL;
    Py_DECREF(l);
    for (uint32_t i = 0; i < n; i++) {
        const st_counter_info *c = st_reader_counter(r, i);
        PyObject *d = c ? Py_BuildValue("{s:I,s:s,s:s}", "id", c->id, "name", c->name, "unit",
                                        c->unit ? c->unit : "")
                        : Py_BuildValue("{s:I,s:s,s:s}", "id", i, "name", "", "unit", "");
        if (!d) return NULL;
        PyList_SetItem(l, i, d);
    }
    n = st_reader_n_steps(r);
    PyObject *b = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)(n * sizeof(py_step)));
    if (!b || PyDict_SetItemString(out, "steps", b)) return Py_XDECREF(b), NULL;
    Py_DECREF(b);
    py_step *st = (py_step *)PyByteArray_AsString(b);
    for (uint32_t i = 0; i < n; i++) {
        const st_step_info *s = st_reader_step(r, i);
        st[i].step = s->step;
        st[i].ts_ns = s->ts_ns;
        st[i].tokens = s->tokens;
    }
    /* meta and marks: small plain tables, read with SQL on the reader's
     * read-only connection. */
    PyObject *meta = PyDict_New();
    if (!meta || PyDict_SetItemString(out, "meta", meta)) return Py_XDECREF(meta), NULL;
    Py_DECREF(meta);
    sqlite3_stmt *stmt = NULL;
    if (sqlite3_prepare_v2(st_reader_db(r), "SELECT key, value FROM meta", -1, &stmt, NULL) == SQLITE_OK) {
        while (sqlite3_step(stmt) == SQLITE_ROW) {
            const char *k = (const char *)sqlite3_column_text(stmt, 0);
            const char *v = (const char *)sqlite3_column_text(stmt, 1);
            if (!k || !v) continue;
            PyObject *vs = PyUnicode_DecodeUTF8(v, (Py_ssize_t)strlen(v), "replace");
            if (!vs || PyDict_SetItemString(meta, k, vs)) {
                Py_XDECREF(vs);
                sqlite3_finalize(stmt);
                return NULL;
            }
            Py_DECREF(vs);
        }
    }
    sqlite3_finalize(stmt);
    PyObject *marks = PyList_New(0);
    if (!marks || PyDict_SetItemString(out, "marks", marks)) return Py_XDECREF(marks), NULL;
    Py_DECREF(marks);
    stmt = NULL;
    if (sqlite3_prepare_v2(st_reader_db(r),
                           "SELECT m.thread, m.ts_ns, s.value FROM marks m LEFT JOIN strings s ON s.id = m.string "
                           "ORDER BY m.ts_ns, m.thread",
                           -1, &stmt, NULL) == SQLITE_OK) {
        while (sqlite3_step(stmt) == SQLITE_ROW) {
            const char *v = (const char *)sqlite3_column_text(stmt, 2);
            PyObject *row = Py_BuildValue("(LLs)", (long long)sqlite3_column_int64(stmt, 0),
                                          (long long)sqlite3_column_int64(stmt, 1), v ? v : "");
            if (!row || PyList_Append(marks, row)) {
                Py_XDECREF(row);
                sqlite3_finalize(stmt);
                return NULL;
            }
            Py_DECREF(row);
        }
    }
    sqlite3_finalize(stmt);
    return out;
}

PyObject *stp_read_trace(PyObject *m, PyObject *args)
{
    PyObject *path_obj, *path_bytes = NULL;
    int want_ranges = 1, want_counters = 1, want_gpu = 1, want_cpu = 1;
    if (!PyArg_ParseTuple(args, "O|pppp", &path_obj, &want_ranges, &want_counters, &want_gpu, &want_cpu))
        return NULL;
    if (!PyUnicode_FSConverter(path_obj, &path_bytes)) return NULL;
    st_reader *r = NULL;
    int rc;
    const char *path = PyBytes_AsString(path_bytes);
    Py_BEGIN_ALLOW_THREADS
    rc = st_reader_open(&r, path);
    Py_END_ALLOW_THREADS
    if (rc != ST_OK) {
        PyErr_Format(stp_error, "%s", st_last_error());
        Py_DECREF(path_bytes);
        return NULL;
    }
    Py_DECREF(path_bytes);
    PyObject *out = PyDict_New();
    growbuf gr = {0}, gc = {0}, gg = {0}, gu = {0}, gp = {0};
    PyObject *names = PyDict_New(), *stacks = PyDict_New(), *tnames = PyDict_New();
    if (!out || !names || !stacks || !tnames || !read_small(r, out)) goto fail;
    if (want_ranges && read_ranges(r, &gr)) goto fail;
    if (want_counters && read_samples(r, &gc)) goto fail;
    if (want_gpu && read_gpu(r, &gg, names, tnames)) goto fail;
    if (want_cpu && read_cpu(r, &gu, stacks, ST_CPU_ROW_SAMPLE)) goto fail;
    if (want_cpu && read_cpu(r, &gp, stacks, ST_CPU_ROW_PY_SAMPLE)) goto fail;
    if (gr.buf && PyDict_SetItemString(out, "ranges", gr.buf)) goto fail;
    if (gc.buf && PyDict_SetItemString(out, "counters", gc.buf)) goto fail;
    if (gg.buf && PyDict_SetItemString(out, "gpu", gg.buf)) goto fail;
    if (gu.buf && PyDict_SetItemString(out, "cpu", gu.buf)) goto fail;
    if (gp.buf && PyDict_SetItemString(out, "cpu_python", gp.buf)) goto fail;
    if (PyDict_SetItemString(out, "gpu_names", names)) goto fail;
    if (PyDict_SetItemString(out, "gpu_threads", tnames)) goto fail;
    if (PyDict_SetItemString(out, "cpu_stacks", stacks)) goto fail;
    st_reader_close(r);
    Py_XDECREF(gr.buf);
    Py_XDECREF(gc.buf);
    Py_XDECREF(gg.buf);
    Py_XDECREF(gu.buf);
    Py_XDECREF(gp.buf);
    Py_DECREF(names);
    Py_DECREF(stacks);
    Py_DECREF(tnames);
    return out;
fail:
    st_reader_close(r);
    Py_XDECREF(gr.buf);
    Py_XDECREF(gc.buf);
    Py_XDECREF(gg.buf);
    Py_XDECREF(gu.buf);
    Py_XDECREF(gp.buf);
    Py_XDECREF(names);
    Py_XDECREF(stacks);
    Py_XDECREF(tnames);
    Py_XDECREF(out);
    return NULL;
}

PyObject *stp_read_layouts(PyObject *m, PyObject *unused)
{
    return Py_BuildValue("{s:n,s:n,s:n,s:n,s:n}", "ranges", (Py_ssize_t)sizeof(py_range), "counters",
                         (Py_ssize_t)sizeof(py_sample), "steps", (Py_ssize_t)sizeof(py_step), "gpu",
                         (Py_ssize_t)sizeof(py_gpu), "cpu", (Py_ssize_t)sizeof(py_cpu_sample));
}
