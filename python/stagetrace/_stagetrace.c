/* _stagetrace.c: the C half of the stagetrace Python package, over
 * libstagetrace (compiled into this extension), on the stable ABI (abi3,
 * Python 3.9 and later). The Python half (stagetrace/__init__.py) adds the
 * argparse helper, the launcher environment, signals and the NumPy views.
 *
 * The hot path is here: Stage.__enter__/__exit__ call st_begin/st_end
 * directly (inline, from stagetrace.h), after one thread-local compare that
 * says whether the calling thread is registered with the stage's open trace.
 * That compare is what keeps Python's freedom safe for the C library, whose
 * rule is that a thread's ring pointer is valid only while its trace is
 * open:
 *  - each open trace (enabled or not) gets a new generation number; a
 *    thread registered through this module remembers it (tls_gen);
 *  - a stage records only when tls_gen equals its trace's generation, and
 *    a closed trace's generation is set to a value no thread holds, so a
 *    stage of a closed trace never reaches the library (it raises instead);
 *  - a thread whose trace was closed while it was still registered has a
 *    stale ring pointer: the first call that notices (registration, a stage
 *    of another trace, close) clears it without touching the freed ring.
 *
 * Profile windows reach Python through st_options.on_window, on the writer
 * thread, with the GIL taken by PyGILState_Ensure; st_close and st_flush
 * release the GIL while they wait for the writer. No callback runs after
 * the package's atexit hook has closed the trace (it refuses new opens).
 */
#define Py_LIMITED_API 0x03090000
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sqlite3.h>

#include "stagetrace.h"
#include "stagetrace_reader.h"

/* METH_FASTCALL has meant the same thing to every CPython since 3.7; the
 * limited API names it from 3.10 on. __exit__ and the hot methods use it so
 * that no argument tuple is built per call. */
#ifndef METH_FASTCALL
#define METH_FASTCALL 0x0080
#endif

#define LIKELY(x) __builtin_expect(!!(x), 1)
#define UNLIKELY(x) __builtin_expect(!!(x), 0)
#define GEN_CLOSED UINT64_MAX

static PyObject *Error;
static PyTypeObject *TraceType, *StageType, *ThreadType, *NoOpType;

/* The one trace open in this process (enabled or disabled), or none. */
static struct trace_object *open_trace;
static uint64_t open_gen, next_gen = 1;
static __thread uint64_t tls_gen __attribute__((tls_model("initial-exec")));
/* 1 while this thread runs a window or log callback for the writer. */
static __thread int tls_in_callback __attribute__((tls_model("initial-exec")));
static atomic_int shutting_down;

typedef struct trace_object {
    PyObject_HEAD
    st_trace *trace;     /* NULL when disabled or closed */
    uint64_t gen;        /* GEN_CLOSED once closed */
    int closed, disabled;
    PyObject *path;      /* str, or None for a disabled trace */
    PyObject *on_window; /* callable(dict) or NULL */
    PyObject *on_log;    /* callable(level, msg) or NULL */
    PyObject *stages;    /* name -> Stage */
    PyObject *counters;  /* name -> int id */
    PyObject *marks;     /* text -> bytes: st_mark's names must outlive the trace */
    char **argv;
    int argc, rank;
} trace_object;

typedef struct {
    PyObject_HEAD
    trace_object *trace;
    st_stage id;
    int kind;
    PyObject *name;
} stage_object;

typedef struct {
    PyObject_HEAD
    trace_object *trace;
    uint64_t gen;
    unsigned long ident; /* PyThread_get_thread_ident of the registering thread */
    int id, active;
} thread_object;

/* UTF-8 of a str as a new bytes object (PyUnicode_AsUTF8AndSize is in the
 * limited API from 3.10 only); NULL with an exception when not a str. */
static PyObject *utf8_bytes(PyObject *o, const char *what)
{
    if (!PyUnicode_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s must be a str", what);
        return NULL;
    }
    return PyUnicode_AsUTF8String(o);
}

static PyObject *set_error(int rc, const char *what)
{
    PyErr_Format(Error, "%s: %s", what, st_last_error());
    (void)rc;
    return NULL;
}

/* A thread still registered with a trace that has since closed: its ring
 * is freed; forget it without touching it. */
static void drop_stale_ring(void)
{
    if (tls_gen != 0 && tls_gen != open_gen) {
        st__thread_ring = NULL;
        st__thread_hot = NULL;
        tls_gen = 0;
    }
}

static PyObject *closed_error(trace_object *t)
{
    if (t->path && t->path != Py_None)
        PyErr_Format(Error, "trace '%U' is closed", t->path);
    else
        PyErr_SetString(Error, "the (disabled) trace is closed");
    return NULL;
}

/* ---- callbacks from the writer thread ------------------------------------ */

static PyObject *window_dict(const st_window *w)
{
    PyObject *d = PyDict_New(), *v;
    if (!d) return NULL;
#define PUT(key, expr)                                                  \
    do {                                                                \
        v = (expr);                                                     \
        if (!v || PyDict_SetItemString(d, key, v)) goto fail;           \
        Py_DECREF(v);                                                   \
    } while (0)
    v = NULL;
    PUT("index", PyLong_FromUnsignedLongLong(w->index));
    PUT("step_first", PyLong_FromUnsignedLongLong(w->step_first));
    PUT("step_last", PyLong_FromUnsignedLongLong(w->step_last));
    PUT("t0_ns", PyLong_FromLongLong(w->t0_ns));
    PUT("t1_ns", PyLong_FromLongLong(w->t1_ns));
    PUT("tokens", PyLong_FromUnsignedLongLong(w->tokens));
    PyObject *names = PyList_New(w->n_stages), *kinds = PyList_New(w->n_stages);
    if (!names || !kinds) {
        Py_XDECREF(names);
        Py_XDECREF(kinds);
        goto fail_nov;
    }
    for (uint32_t i = 0; i < w->n_stages; i++) {
        PyList_SetItem(names, i, PyUnicode_FromString(w->stage_names[i] ? w->stage_names[i] : ""));
        PyList_SetItem(kinds, i, PyUnicode_FromString(st_kind_name((st_kind)w->stage_kinds[i])));
    }
    if (PyErr_Occurred()) {
        Py_DECREF(names);
        Py_DECREF(kinds);
        goto fail_nov;
    }
    PUT("stages", names);
    PUT("kinds", kinds);
    PyObject *threads = PyList_New(w->n_threads);
    if (!threads) goto fail_nov;
    for (uint32_t i = 0; i < w->n_threads; i++) {
        const st_window_thread *wt = &w->threads[i];
        PyObject *td = Py_BuildValue("{s:I,s:s,s:s,s:L}", "thread", wt->thread, "name", wt->name,
                                     "role", wt->role, "idle_ns", (long long)wt->idle_ns);
        PyObject *ns = PyDict_New(), *count = PyDict_New();
        if (!td || !ns || !count) {
            Py_XDECREF(td); Py_XDECREF(ns); Py_XDECREF(count);
            Py_DECREF(threads);
            goto fail_nov;
        }
        for (uint32_t s = 0; s < w->n_stages; s++) {
            if (!wt->stage_ns[s] && !wt->stage_count[s]) continue;
            const char *name = w->stage_names[s] ? w->stage_names[s] : "";
            PyObject *a = PyLong_FromLongLong(wt->stage_ns[s]);
            PyObject *b = PyLong_FromUnsignedLongLong(wt->stage_count[s]);
            if (!a || !b || PyDict_SetItemString(ns, name, a) || PyDict_SetItemString(count, name, b)) {
                Py_XDECREF(a); Py_XDECREF(b);
                Py_DECREF(td); Py_DECREF(ns); Py_DECREF(count); Py_DECREF(threads);
                goto fail_nov;
            }
            Py_DECREF(a);
            Py_DECREF(b);
        }
        PyDict_SetItemString(td, "stage_ns", ns);
        PyDict_SetItemString(td, "stage_count", count);
        Py_DECREF(ns);
        Py_DECREF(count);
        PyList_SetItem(threads, i, td);
    }
    PUT("threads", threads);
    size_t need = st_window_format(w, NULL, 0);
    char *text = malloc(need + 1);
    if (!text) {
        PyErr_NoMemory();
        goto fail_nov;
    }
    st_window_format(w, text, need + 1);
    v = PyUnicode_FromStringAndSize(text, (Py_ssize_t)need);
    free(text);
    if (!v || PyDict_SetItemString(d, "text", v)) goto fail;
    Py_DECREF(v);
    return d;
#undef PUT
fail:
    Py_XDECREF(v);
fail_nov:
    Py_DECREF(d);
    return NULL;
}

static void on_window_cb(const st_window *w, void *arg)
{
    trace_object *t = arg;
    if (atomic_load(&shutting_down) > 1) return;
    PyGILState_STATE g = PyGILState_Ensure();
    tls_in_callback = 1;
    PyObject *fn = t->on_window;
    if (fn) {
        Py_INCREF(fn);
        PyObject *d = window_dict(w);
        PyObject *res = d ? PyObject_CallFunctionObjArgs(fn, d, NULL) : NULL;
        if (!res) PyErr_WriteUnraisable(fn);
        Py_XDECREF(res);
        Py_XDECREF(d);
        Py_DECREF(fn);
    }
    tls_in_callback = 0;
    PyGILState_Release(g);
}

static void on_log_cb(int level, const char *msg, void *arg)
{
    trace_object *t = arg;
    if (atomic_load(&shutting_down) > 1) return;
    PyGILState_STATE g = PyGILState_Ensure();
    int was = tls_in_callback;
    tls_in_callback = 1;
    PyObject *fn = t->on_log;
    if (fn) {
        /* A log call may come from a hot-path call with an exception set. */
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        Py_INCREF(fn);
        PyObject *res = PyObject_CallFunction(fn, "is", level, msg);
        if (!res) PyErr_WriteUnraisable(fn);
        Py_XDECREF(res);
        Py_DECREF(fn);
        PyErr_Restore(et, ev, tb);
    }
    tls_in_callback = was;
    PyGILState_Release(g);
}

/* ---- Trace ---------------------------------------------------------------- */

static int trace_init(trace_object *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"path", "program", "profile_interval", "on_window", "on_log",
                             "overwrite", "enabled", "rank", "world_size", "local_rank",
                             "device", "run_id", "ring_records", "block_when_full",
                             "commit_ms", "nvtx", "argv", "main_thread", NULL};
    PyObject *path = Py_None, *on_window = Py_None, *on_log = Py_None, *argv = Py_None;
    const char *program = "python", *run_id = NULL, *main_thread = "main";
    unsigned int profile_interval = 0, ring_records = 0, commit_ms = 0;
    int overwrite = 0, enabled = 1, rank = 0, world_size = 1, local_rank = 0, device = -1;
    int block_when_full = 0, nvtx = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|OsIOOppiiiizIpIiOz", kwlist, &path, &program,
                                     &profile_interval, &on_window, &on_log, &overwrite, &enabled,
                                     &rank, &world_size, &local_rank, &device, &run_id,
                                     &ring_records, &block_when_full, &commit_ms, &nvtx, &argv,
                                     &main_thread))
        return -1;
    if (self->gen) {
        PyErr_SetString(Error, "Trace.__init__ called twice");
        return -1;
    }
    if (atomic_load(&shutting_down)) {
        PyErr_SetString(Error, "cannot open a trace: the interpreter is shutting down");
        return -1;
    }
    if (open_trace) {
        if (open_trace->path != Py_None)
            PyErr_Format(Error, "a trace is already open ('%U'): close it first", open_trace->path);
        else
            PyErr_SetString(Error, "a (disabled) trace is already open: close it first");
        return -1;
    }
    if (on_window != Py_None && !PyCallable_Check(on_window)) {
        PyErr_SetString(PyExc_TypeError, "on_window must be callable");
        return -1;
    }
    if (on_log != Py_None && !PyCallable_Check(on_log)) {
        PyErr_SetString(PyExc_TypeError, "on_log must be callable");
        return -1;
    }
    self->stages = PyDict_New();
    self->counters = PyDict_New();
    self->marks = PyDict_New();
    if (!self->stages || !self->counters || !self->marks) return -1;
    Py_INCREF(path);
    self->path = path;
    drop_stale_ring();

    if (!enabled) {
        self->disabled = 1;
    } else {
        if (path == Py_None) {
            PyErr_SetString(PyExc_ValueError, "an enabled trace needs a path");
            return -1;
        }
        PyObject *path_bytes = NULL;
        if (!PyUnicode_FSConverter(path, &path_bytes)) return -1;
        if (argv != Py_None) {
            PyObject *seq = PySequence_Fast(argv, "argv must be a sequence of str");
            if (!seq) {
                Py_DECREF(path_bytes);
                return -1;
            }
            Py_ssize_t n = PySequence_Size(seq);
            self->argv = calloc((size_t)n + 1, sizeof(char *));
            for (Py_ssize_t i = 0; self->argv && i < n; i++) {
                PyObject *s = PySequence_GetItem(seq, i);
                PyObject *b = s ? utf8_bytes(s, "argv item") : NULL;
                Py_XDECREF(s);
                if (!b) {
                    Py_DECREF(seq);
                    Py_DECREF(path_bytes);
                    return -1;
                }
                self->argv[i] = strdup(PyBytes_AsString(b));
                Py_DECREF(b);
                self->argc = (int)i + 1;
            }
            Py_DECREF(seq);
        }
        Py_XINCREF(on_window != Py_None ? on_window : NULL);
        self->on_window = on_window != Py_None ? on_window : NULL;
        Py_XINCREF(on_log != Py_None ? on_log : NULL);
        self->on_log = on_log != Py_None ? on_log : NULL;

        st_options opt;
        st_options_init(&opt);
        opt.path = PyBytes_AsString(path_bytes);
        opt.overwrite = overwrite;
        opt.program = program;
        opt.argc = self->argc;
        opt.argv = self->argv;
        opt.rank = rank;
        opt.world_size = world_size;
        opt.local_rank = local_rank;
        opt.device = device;
        opt.run_id = run_id;
        if (ring_records) opt.ring_records = ring_records;
        opt.block_when_full = block_when_full;
        if (commit_ms) opt.commit_ms = commit_ms;
        opt.nvtx = nvtx;
        opt.profile_interval = profile_interval;
        if (self->on_window && profile_interval > 0) {
            opt.on_window = on_window_cb;
            opt.on_window_arg = self;
        }
        if (self->on_log) {
            opt.log = on_log_cb;
            opt.log_arg = self;
        }
        st_trace *tr = NULL;
        int rc;
        Py_BEGIN_ALLOW_THREADS
        rc = st_open(&tr, &opt);
        Py_END_ALLOW_THREADS
        Py_DECREF(path_bytes);
        if (rc != ST_OK) {
            PyErr_Format(Error, "cannot open the trace: %s", st_last_error());
            return -1;
        }
        self->trace = tr;
        /* st_rank_path may have chosen another file: report the real one. */
        const char *real = st_path(tr);
        if (real && *real) {
            PyObject *p = PyUnicode_DecodeFSDefault(real);
            if (p) {
                Py_DECREF(self->path);
                self->path = p;
            } else {
                PyErr_Clear();
            }
        }
    }
    self->rank = rank;
    self->gen = next_gen++;
    open_gen = self->gen;
    open_trace = self;
    if (main_thread && *main_thread) {
        if (self->trace) {
            int rc = st_thread_register(self->trace, main_thread, "main", -1, rank);
            if (rc < 0) {
                set_error(rc, "cannot register the main thread");
                PyObject *et, *ev, *tb;
                PyErr_Fetch(&et, &ev, &tb);
                st_close(self->trace);
                self->trace = NULL;
                self->closed = 1;
                self->gen = GEN_CLOSED;
                open_trace = NULL;
                open_gen = 0;
                PyErr_Restore(et, ev, tb);
                return -1;
            }
        }
        tls_gen = self->gen;
    }
    return 0;
}

static int trace_do_close(trace_object *t)
{
    if (tls_in_callback) {
        PyErr_SetString(Error, "close() cannot be called from a window or log callback");
        return -1;
    }
    if (t->closed) return 0;
    drop_stale_ring();
    int registered_here = tls_gen == t->gen;
    t->closed = 1;
    t->gen = GEN_CLOSED;
    if (open_trace == t) {
        open_trace = NULL;
        open_gen = 0;
    }
    int rc = ST_OK;
    if (t->trace) {
        st_trace *tr = t->trace;
        t->trace = NULL;
        /* st_close unregisters the calling thread: only when it is this
         * trace's (drop_stale_ring cleared any other). */
        if (!registered_here && st__thread_ring) {
            st__thread_ring = NULL;
            st__thread_hot = NULL;
        }
        Py_BEGIN_ALLOW_THREADS
        rc = st_close(tr);
        Py_END_ALLOW_THREADS
    }
    if (registered_here) tls_gen = 0;
    /* No callback runs any more: let go of what may point back at us. */
    PyDict_Clear(t->marks);
    PyDict_Clear(t->stages);
    PyObject *w = t->on_window, *l = t->on_log;
    t->on_window = t->on_log = NULL;
    Py_XDECREF(w);
    Py_XDECREF(l);
    if (rc != ST_OK) {
        set_error(rc, "closing the trace failed");
        return -1;
    }
    return 0;
}

static PyObject *trace_close(trace_object *self, PyObject *unused)
{
    if (trace_do_close(self)) return NULL;
    Py_RETURN_NONE;
}

static PyObject *trace_enter(trace_object *self, PyObject *unused)
{
    if (self->closed) return closed_error(self);
    Py_INCREF(self);
    return (PyObject *)self;
}

static PyObject *trace_exit(trace_object *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (trace_do_close(self)) return NULL;
    Py_RETURN_FALSE;
}

static PyObject *trace_flush(trace_object *self, PyObject *unused)
{
    if (tls_in_callback) {
        PyErr_SetString(Error, "flush() cannot be called from a window or log callback");
        return NULL;
    }
    if (self->closed) return closed_error(self);
    if (!self->trace) Py_RETURN_NONE;
    int rc;
    st_trace *tr = self->trace;
    Py_BEGIN_ALLOW_THREADS
    rc = st_flush(tr);
    Py_END_ALLOW_THREADS
    if (rc != ST_OK) return set_error(rc, "flush failed");
    Py_RETURN_NONE;
}

static PyObject *trace_stage(trace_object *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"name", "kind", NULL};
    PyObject *name;
    const char *kind_name = "work";
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "U|s", kwlist, &name, &kind_name)) return NULL;
    if (self->closed) return closed_error(self);
    int kind = st_kind_parse(kind_name);
    if (kind < 0) {
        PyErr_Format(PyExc_ValueError,
                     "unknown stage kind '%s' (work, wait_input, wait_output, sync, comm, copy)",
                     kind_name);
        return NULL;
    }
    PyObject *known = PyDict_GetItemWithError(self->stages, name);
    if (known) {
        if (((stage_object *)known)->kind != kind) {
            PyErr_Format(PyExc_ValueError, "stage '%U' is already registered with kind %s", name,
                         st_kind_name((st_kind)((stage_object *)known)->kind));
            return NULL;
        }
        Py_INCREF(known);
        return known;
    }
    if (PyErr_Occurred()) return NULL;
    int id = 0;
    if (self->trace) {
        PyObject *b = utf8_bytes(name, "stage name");
        if (!b) return NULL;
        id = st_stage_register(self->trace, PyBytes_AsString(b), (st_kind)kind);
        Py_DECREF(b);
        if (id < 0) return set_error(id, "cannot register the stage");
    }
    stage_object *s = PyObject_New(stage_object, StageType);
    if (!s) return NULL;
    Py_INCREF(self);
    s->trace = self;
    s->id = (st_stage)id;
    s->kind = kind;
    Py_INCREF(name);
    s->name = name;
    if (PyDict_SetItem(self->stages, name, (PyObject *)s)) {
        Py_DECREF(s);
        return NULL;
    }
    return (PyObject *)s;
}

static int as_u64(PyObject *o, uint64_t *out, const char *what)
{
    unsigned long long v = PyLong_AsUnsignedLongLong(o);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) {
        if (PyErr_ExceptionMatches(PyExc_OverflowError) || PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError, "%s must be an int in 0..2**64-1", what);
        }
        return -1;
    }
    *out = v;
    return 0;
}

static PyObject *trace_step(trace_object *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "step(step, tokens=0) takes one or two arguments");
        return NULL;
    }
    uint64_t step = 0, tokens = 0;
    if (as_u64(args[0], &step, "step")) return NULL;
    if (nargs == 2 && as_u64(args[1], &tokens, "tokens")) return NULL;
    if (UNLIKELY(self->closed)) return closed_error(self);
    if (self->disabled) Py_RETURN_NONE;
    drop_stale_ring();
    st_step(step, tokens);
    Py_RETURN_NONE;
}

static PyObject *trace_counter(trace_object *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 2 || nargs > 3) {
        PyErr_SetString(PyExc_TypeError, "counter(name, value, unit='') takes two or three arguments");
        return NULL;
    }
    double value = PyFloat_AsDouble(args[1]);
    if (value == -1.0 && PyErr_Occurred()) return NULL;
    if (UNLIKELY(self->closed)) return closed_error(self);
    if (self->disabled) Py_RETURN_NONE;
    PyObject *id_obj = PyDict_GetItemWithError(self->counters, args[0]);
    long id;
    if (LIKELY(id_obj != NULL)) {
        id = PyLong_AsLong(id_obj);
    } else {
        if (PyErr_Occurred()) return NULL;
        PyObject *name = utf8_bytes(args[0], "counter name"), *unit = NULL;
        if (!name) return NULL;
        if (nargs == 3 && args[2] != Py_None && !(unit = utf8_bytes(args[2], "counter unit"))) {
            Py_DECREF(name);
            return NULL;
        }
        int rc = st_counter_register(self->trace, PyBytes_AsString(name), unit ? PyBytes_AsString(unit) : "");
        Py_DECREF(name);
        Py_XDECREF(unit);
        if (rc < 0) return set_error(rc, "cannot register the counter");
        id = rc;
        PyObject *o = PyLong_FromLong(id);
        if (!o || PyDict_SetItem(self->counters, args[0], o)) {
            Py_XDECREF(o);
            return NULL;
        }
        Py_DECREF(o);
    }
    if (LIKELY(tls_gen == self->gen)) {
        st_counter_set((st_counter)id, value);
    } else {
        drop_stale_ring();
        st_counter_set((st_counter)id, value);
    }
    Py_RETURN_NONE;
}

static PyObject *trace_mark(trace_object *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 1 || !PyUnicode_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "mark(text) takes one str");
        return NULL;
    }
    if (self->closed) return closed_error(self);
    if (self->disabled) Py_RETURN_NONE;
    PyObject *b = PyDict_GetItemWithError(self->marks, args[0]);
    if (!b) {
        if (PyErr_Occurred()) return NULL;
        b = PyUnicode_AsUTF8String(args[0]);
        if (!b) return NULL;
        int rc = PyDict_SetItem(self->marks, args[0], b);
        Py_DECREF(b); /* the dict holds it until close */
        if (rc) return NULL;
    }
    drop_stale_ring();
    st_mark(PyBytes_AsString(b));
    Py_RETURN_NONE;
}

static PyObject *trace_gpu_start(trace_object *self, PyObject *unused)
{
    if (self->closed) return closed_error(self);
#ifdef STP_HAVE_CUPTI
    if (!self->trace) Py_RETURN_NONE;
    int rc = st_gpu_start(self->trace);
    if (rc != ST_OK) return set_error(rc, "cannot record GPU activity");
    Py_RETURN_NONE;
#else
    PyErr_SetString(Error, "GPU recording is not available in this build: the extension was built "
                           "without CUPTI (build it with `make python` or `pip install ./python` on a "
                           "machine with the CUDA toolkit and CUPTI)");
    return NULL;
#endif
}

static PyObject *thread_new_for(trace_object *t, const char *name, const char *role, int device,
                                int rank);

static PyObject *trace_thread(trace_object *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"name", "role", "device", "rank", NULL};
    const char *name, *role = "other";
    int device = -1;
    PyObject *rank_obj = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "s|siO", kwlist, &name, &role, &device, &rank_obj))
        return NULL;
    int rank = self->rank;
    if (rank_obj != Py_None) {
        rank = (int)PyLong_AsLong(rank_obj);
        if (rank == -1 && PyErr_Occurred()) return NULL;
    }
    return thread_new_for(self, name, role, device, rank);
}

static PyObject *trace_get_path(trace_object *self, void *unused)
{
    Py_INCREF(self->path);
    return self->path;
}
static PyObject *trace_get_enabled(trace_object *self, void *unused)
{
    return PyBool_FromLong(!self->disabled);
}
static PyObject *trace_get_closed(trace_object *self, void *unused)
{
    return PyBool_FromLong(self->closed);
}
static PyObject *trace_get_dropped(trace_object *self, void *unused)
{
    return PyLong_FromUnsignedLongLong(self->trace ? st_dropped(self->trace) : 0);
}

static PyObject *trace_repr(trace_object *self)
{
    if (self->disabled) return PyUnicode_FromFormat("<stagetrace.Trace disabled%s>", self->closed ? " closed" : "");
    return PyUnicode_FromFormat("<stagetrace.Trace '%U'%s>", self->path, self->closed ? " closed" : "");
}

static void trace_dealloc(trace_object *self)
{
    if (!self->closed && self->gen && self->gen != GEN_CLOSED) {
        if (trace_do_close(self)) PyErr_WriteUnraisable((PyObject *)self);
    }
    Py_XDECREF(self->path);
    Py_XDECREF(self->on_window);
    Py_XDECREF(self->on_log);
    Py_XDECREF(self->stages);
    Py_XDECREF(self->counters);
    Py_XDECREF(self->marks);
    for (int i = 0; self->argv && i < self->argc; i++) free(self->argv[i]);
    free(self->argv);
    PyTypeObject *tp = Py_TYPE(self);
    freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    f(self);
    Py_DECREF(tp);
}

static PyMethodDef trace_methods[] = {
    {"stage", (PyCFunction)(void (*)(void))trace_stage, METH_VARARGS | METH_KEYWORDS,
     "stage(name, kind='work'): the Stage of that name, registered once"},
    {"step", (PyCFunction)(void (*)(void))trace_step, METH_FASTCALL,
     "step(step, tokens=0): step `step` ended now, having processed `tokens` tokens"},
    {"counter", (PyCFunction)(void (*)(void))trace_counter, METH_FASTCALL,
     "counter(name, value, unit=''): a counter sample (registered at first use)"},
    {"mark", (PyCFunction)(void (*)(void))trace_mark, METH_FASTCALL, "mark(text): an instant mark"},
    {"thread", (PyCFunction)(void (*)(void))trace_thread, METH_VARARGS | METH_KEYWORDS,
     "thread(name, role='other', device=-1, rank=0): registers the calling thread"},
    {"flush", (PyCFunction)trace_flush, METH_NOARGS, "waits until everything recorded is committed"},
    {"close", (PyCFunction)trace_close, METH_NOARGS, "closes the trace (again: nothing)"},
    {"gpu_start", (PyCFunction)trace_gpu_start, METH_NOARGS, "records GPU activity (CUPTI builds)"},
    {"__enter__", (PyCFunction)trace_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)(void (*)(void))trace_exit, METH_FASTCALL, NULL},
    {NULL}};

static PyGetSetDef trace_getset[] = {
    {"path", (getter)trace_get_path, NULL, "the file written (None when disabled)", NULL},
    {"enabled", (getter)trace_get_enabled, NULL, "False for a disabled trace", NULL},
    {"closed", (getter)trace_get_closed, NULL, "True once closed", NULL},
    {"dropped", (getter)trace_get_dropped, NULL, "events dropped so far (full rings)", NULL},
    {NULL}};

static PyType_Slot trace_slots[] = {
    {Py_tp_init, trace_init},
    {Py_tp_dealloc, trace_dealloc},
    {Py_tp_methods, trace_methods},
    {Py_tp_getset, trace_getset},
    {Py_tp_repr, trace_repr},
    {Py_tp_doc, "An open trace (stagetrace.open)."},
    {0, NULL}};
static PyType_Spec trace_spec = {"stagetrace._stagetrace.Trace", sizeof(trace_object), 0,
                                 Py_TPFLAGS_DEFAULT, trace_slots};

/* ---- Stage: the hot path ---------------------------------------------------- */

static PyObject *stage_enter_slow(stage_object *s)
{
    trace_object *t = s->trace;
    if (t->closed) {
        if (t->path != Py_None)
            PyErr_Format(Error, "stage '%U': trace '%U' is closed", s->name, t->path);
        else
            PyErr_Format(Error, "stage '%U': the (disabled) trace is closed", s->name);
        return NULL;
    }
    if (t->disabled) Py_RETURN_NONE;
    drop_stale_ring();
    st_begin(s->id); /* an unregistered thread: the library reports it once */
    Py_RETURN_NONE;
}

static PyObject *stage_enter(stage_object *s, PyObject *unused)
{
    if (LIKELY(tls_gen == s->trace->gen)) {
        st_begin(s->id);
        Py_RETURN_NONE;
    }
    return stage_enter_slow(s);
}

static PyObject *stage_exit(stage_object *s, PyObject *const *args, Py_ssize_t nargs)
{
    if (LIKELY(tls_gen == s->trace->gen)) st_end(s->id);
    Py_RETURN_NONE;
}

/* stage(func): the decorator, built by the package's Python half (it keeps
 * the function's name, docstring and signature). */
static PyObject *decorate_fn;
static PyObject *no_new(PyTypeObject *tp, PyObject *args, PyObject *kwds);
static PyObject *stage_call(stage_object *s, PyObject *args, PyObject *kwds)
{
    if (kwds && PyDict_Size(kwds)) {
        PyErr_SetString(PyExc_TypeError, "a Stage used as a decorator takes one function");
        return NULL;
    }
    if (PyTuple_Size(args) != 1 || !PyCallable_Check(PyTuple_GetItem(args, 0))) {
        PyErr_SetString(PyExc_TypeError, "a Stage used as a decorator takes one function");
        return NULL;
    }
    if (!decorate_fn) {
        PyErr_SetString(Error, "stagetrace is not initialised (import stagetrace, not _stagetrace)");
        return NULL;
    }
    return PyObject_CallFunctionObjArgs(decorate_fn, (PyObject *)s, PyTuple_GetItem(args, 0), NULL);
}

static PyObject *stage_get_name(stage_object *s, void *unused)
{
    Py_INCREF(s->name);
    return s->name;
}
static PyObject *stage_get_kind(stage_object *s, void *unused)
{
    return PyUnicode_FromString(st_kind_name((st_kind)s->kind));
}
static PyObject *stage_get_id(stage_object *s, void *unused) { return PyLong_FromLong(s->id); }
static PyObject *stage_get_trace(stage_object *s, void *unused)
{
    Py_INCREF(s->trace);
    return (PyObject *)s->trace;
}
static PyObject *stage_repr(stage_object *s)
{
    return PyUnicode_FromFormat("<stagetrace.Stage '%U' %s id %d>", s->name,
                                st_kind_name((st_kind)s->kind), (int)s->id);
}
static void stage_dealloc(stage_object *s)
{
    Py_XDECREF(s->trace);
    Py_XDECREF(s->name);
    PyTypeObject *tp = Py_TYPE(s);
    ((freefunc)PyType_GetSlot(tp, Py_tp_free))(s);
    Py_DECREF(tp);
}
static PyMethodDef stage_methods[] = {
    {"__enter__", (PyCFunction)stage_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)(void (*)(void))stage_exit, METH_FASTCALL, NULL},
    {NULL}};
static PyGetSetDef stage_getset[] = {
    {"name", (getter)stage_get_name, NULL, NULL, NULL},
    {"kind", (getter)stage_get_kind, NULL, NULL, NULL},
    {"id", (getter)stage_get_id, NULL, NULL, NULL},
    {"trace", (getter)stage_get_trace, NULL, NULL, NULL},
    {NULL}};
static PyType_Slot stage_slots[] = {
    {Py_tp_dealloc, stage_dealloc},
    {Py_tp_methods, stage_methods},
    {Py_tp_getset, stage_getset},
    {Py_tp_call, stage_call},
    {Py_tp_new, no_new},
    {Py_tp_repr, stage_repr},
    {Py_tp_doc, "A registered stage: `with stage:` or `@stage` records one range."},
    {0, NULL}};
static PyType_Spec stage_spec = {"stagetrace._stagetrace.Stage", sizeof(stage_object), 0,
                                 Py_TPFLAGS_DEFAULT, stage_slots};

static PyObject *no_new(PyTypeObject *tp, PyObject *args, PyObject *kwds)
{
    PyErr_Format(PyExc_TypeError, "stagetrace objects of this type come from a Trace (trace.stage, stagetrace.thread)");
    return NULL;
}

/* ---- NoOp: a context manager that does nothing, in C (for comparisons) ---- */

static PyObject *noop_enter(PyObject *self, PyObject *unused) { Py_RETURN_NONE; }
static PyObject *noop_exit(PyObject *self, PyObject *const *args, Py_ssize_t nargs) { Py_RETURN_NONE; }
static PyMethodDef noop_methods[] = {
    {"__enter__", (PyCFunction)noop_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)(void (*)(void))noop_exit, METH_FASTCALL, NULL},
    {NULL}};
static PyType_Slot noop_slots[] = {
    {Py_tp_methods, noop_methods},
    {Py_tp_doc, "A context manager written in C that does nothing (benchmarks)."},
    {0, NULL}};
static PyType_Spec noop_spec = {"stagetrace._stagetrace.NoOp", sizeof(PyObject), 0,
                                Py_TPFLAGS_DEFAULT, noop_slots};

/* ---- Thread registration ----------------------------------------------------- */

static PyObject *thread_new_for(trace_object *t, const char *name, const char *role, int device,
                                int rank)
{
    if (t->closed) return closed_error(t);
    drop_stale_ring();
    if (tls_gen == t->gen) {
        PyErr_SetString(Error, "this thread is already registered with the trace");
        return NULL;
    }
    int id = 0;
    if (t->trace) {
        id = st_thread_register(t->trace, name, role, device, rank);
        if (id < 0) return set_error(id, "cannot register the thread");
    } else if (!name || !*name || strlen(name) > ST_NAME_MAX || strlen(role) > ST_NAME_MAX) {
        PyErr_Format(Error, "cannot register the thread: empty name, or a name or role longer than %d bytes",
                     ST_NAME_MAX);
        return NULL;
    }
    thread_object *o = PyObject_New(thread_object, ThreadType);
    if (!o) {
        if (t->trace) st_thread_unregister();
        return NULL;
    }
    Py_INCREF(t);
    o->trace = t;
    o->gen = t->gen;
    o->ident = PyThread_get_thread_ident();
    o->id = id;
    o->active = 1;
    tls_gen = t->gen;
    return (PyObject *)o;
}

static PyObject *thread_unregister(thread_object *o, PyObject *unused)
{
    if (!o->active) Py_RETURN_NONE;
    if (PyThread_get_thread_ident() != o->ident) {
        PyErr_SetString(Error, "a thread is unregistered on the thread that registered it");
        return NULL;
    }
    o->active = 0;
    if (tls_gen == o->gen && o->trace->gen == o->gen) {
        st_thread_unregister();
        tls_gen = 0;
    } else {
        drop_stale_ring();
    }
    Py_RETURN_NONE;
}
static PyObject *thread_enter(thread_object *o, PyObject *unused)
{
    Py_INCREF(o);
    return (PyObject *)o;
}
static PyObject *thread_exit(thread_object *o, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *r = thread_unregister(o, NULL);
    if (!r) return NULL;
    Py_DECREF(r);
    Py_RETURN_FALSE;
}
static PyObject *thread_get_id(thread_object *o, void *unused) { return PyLong_FromLong(o->id); }
static PyObject *thread_get_registered(thread_object *o, void *unused)
{
    return PyBool_FromLong(o->active && o->trace->gen == o->gen);
}
static void thread_dealloc(thread_object *o)
{
    Py_XDECREF(o->trace);
    PyTypeObject *tp = Py_TYPE(o);
    ((freefunc)PyType_GetSlot(tp, Py_tp_free))(o);
    Py_DECREF(tp);
}
static PyMethodDef thread_methods[] = {
    {"unregister", (PyCFunction)thread_unregister, METH_NOARGS,
     "ends the registration (on the registering thread; again: nothing)"},
    {"__enter__", (PyCFunction)thread_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)(void (*)(void))thread_exit, METH_FASTCALL, NULL},
    {NULL}};
static PyGetSetDef thread_getset[] = {
    {"id", (getter)thread_get_id, NULL, "the thread's id in the trace", NULL},
    {"registered", (getter)thread_get_registered, NULL, NULL, NULL},
    {NULL}};
static PyType_Slot thread_slots[] = {
    {Py_tp_dealloc, thread_dealloc},
    {Py_tp_new, no_new},
    {Py_tp_methods, thread_methods},
    {Py_tp_getset, thread_getset},
    {Py_tp_doc, "A registered thread (stagetrace.thread); `with` unregisters it at exit."},
    {0, NULL}};
static PyType_Spec thread_spec = {"stagetrace._stagetrace.Thread", sizeof(thread_object), 0,
                                  Py_TPFLAGS_DEFAULT, thread_slots};

/* ---- module functions ---------------------------------------------------------- */

static PyObject *mod_current(PyObject *m, PyObject *unused)
{
    if (!open_trace) Py_RETURN_NONE;
    Py_INCREF(open_trace);
    return (PyObject *)open_trace;
}

static PyObject *mod_set_decorator(PyObject *m, PyObject *fn)
{
    PyObject *old = decorate_fn;
    Py_INCREF(fn);
    decorate_fn = fn;
    Py_XDECREF(old);
    Py_RETURN_NONE;
}

/* atexit: close the open trace while the interpreter still runs, then let
 * no callback in again. */
static PyObject *mod_shutdown(PyObject *m, PyObject *unused)
{
    atomic_store(&shutting_down, 1);
    int rc = 0;
    if (open_trace) rc = trace_do_close(open_trace);
    atomic_store(&shutting_down, 2);
    if (rc) return NULL;
    Py_RETURN_NONE;
}

static PyObject *mod_signal_flush(PyObject *m, PyObject *arg)
{
    int timeout_ms = (int)PyLong_AsLong(arg);
    if (timeout_ms == -1 && PyErr_Occurred()) return NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = st_signal_flush(timeout_ms);
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(rc);
}

static PyObject *mod_gpu_available(PyObject *m, PyObject *unused)
{
#ifdef STP_HAVE_CUPTI
    Py_RETURN_TRUE;
#else
    Py_RETURN_FALSE;
#endif
}

/* ---- reading ------------------------------------------------------------------- */

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
} py_gpu;

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
    if (st_range_iter_open(&it, r, -1, INT64_MIN, INT64_MAX) != ST_OK) return set_error(0, "cannot read ranges"), -1;
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
    if (rc < 0) return set_error(rc, "cannot read ranges"), -1;
    return growbuf_finish(g);
}

static int read_samples(st_reader *r, growbuf *g)
{
    st_chunk_totals tot;
    double hint = st_reader_chunk_totals(r, &tot) == ST_OK ? tot.n_samples : 0;
    if (growbuf_init(g, sizeof(py_sample), hint)) return -1;
    st_sample_iter *it;
    if (st_sample_iter_open(&it, r, -1, INT64_MIN, INT64_MAX) != ST_OK)
        return set_error(0, "cannot read counters"), -1;
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
    if (rc < 0) return set_error(rc, "cannot read counters"), -1;
    return growbuf_finish(g);
}

/* GPU records with the GIL held (they are few next to ranges); names go
 * into `names` (gpu_strings id + 1 -> str). */
static int read_gpu(st_reader *r, growbuf *g, PyObject *names)
{
    st_gpu_headers span;
    double hint = st_reader_gpu_span(r, &span) == ST_OK && span.has ? (double)span.n_records : 0;
    if (growbuf_init(g, sizeof(py_gpu), hint)) return -1;
    int has = st_reader_has_gpu(r);
    if (has < 0) return set_error(has, "cannot read GPU records"), -1;
    if (!has) return growbuf_finish(g);
    st_gpu_iter *it;
    if (st_gpu_iter_open(&it, r, -1, INT64_MIN, INT64_MAX) != ST_OK)
        return set_error(0, "cannot read GPU records"), -1;
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
        if (row.name) {
            PyObject *key = PyLong_FromUnsignedLong(row.rec.name);
            if (!key) break;
            int have = PyDict_Contains(names, key);
            if (have == 0) {
                PyObject *v = PyUnicode_DecodeUTF8(row.name, (Py_ssize_t)strlen(row.name), "replace");
                if (!v || PyDict_SetItem(names, key, v)) have = -1;
                Py_XDECREF(v);
            }
            Py_DECREF(key);
            if (have < 0) break;
        }
    }
    st_gpu_iter_close(it);
    if (PyErr_Occurred()) return -1;
    if (rc < 0) return set_error(rc, "cannot read GPU records"), -1;
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

static PyObject *mod_read(PyObject *m, PyObject *args)
{
    PyObject *path_obj, *path_bytes = NULL;
    int want_ranges = 1, want_counters = 1, want_gpu = 1;
    if (!PyArg_ParseTuple(args, "O|ppp", &path_obj, &want_ranges, &want_counters, &want_gpu)) return NULL;
    if (!PyUnicode_FSConverter(path_obj, &path_bytes)) return NULL;
    st_reader *r = NULL;
    int rc;
    const char *path = PyBytes_AsString(path_bytes);
    Py_BEGIN_ALLOW_THREADS
    rc = st_reader_open(&r, path);
    Py_END_ALLOW_THREADS
    if (rc != ST_OK) {
        PyErr_Format(Error, "%s", st_last_error());
        Py_DECREF(path_bytes);
        return NULL;
    }
    Py_DECREF(path_bytes);
    PyObject *out = PyDict_New();
    growbuf gr = {0}, gc = {0}, gg = {0};
    PyObject *names = PyDict_New();
    if (!out || !names || !read_small(r, out)) goto fail;
    if (want_ranges && read_ranges(r, &gr)) goto fail;
    if (want_counters && read_samples(r, &gc)) goto fail;
    if (want_gpu && read_gpu(r, &gg, names)) goto fail;
    if (gr.buf && PyDict_SetItemString(out, "ranges", gr.buf)) goto fail;
    if (gc.buf && PyDict_SetItemString(out, "counters", gc.buf)) goto fail;
    if (gg.buf && PyDict_SetItemString(out, "gpu", gg.buf)) goto fail;
    if (PyDict_SetItemString(out, "gpu_names", names)) goto fail;
    st_reader_close(r);
    Py_XDECREF(gr.buf);
    Py_XDECREF(gc.buf);
    Py_XDECREF(gg.buf);
    Py_DECREF(names);
    return out;
fail:
    st_reader_close(r);
    Py_XDECREF(gr.buf);
    Py_XDECREF(gc.buf);
    Py_XDECREF(gg.buf);
    Py_XDECREF(names);
    Py_XDECREF(out);
    return NULL;
}

static PyObject *mod_layouts(PyObject *m, PyObject *unused)
{
    return Py_BuildValue("{s:n,s:n,s:n,s:n}", "ranges", (Py_ssize_t)sizeof(py_range), "counters",
                         (Py_ssize_t)sizeof(py_sample), "steps", (Py_ssize_t)sizeof(py_step), "gpu",
                         (Py_ssize_t)sizeof(py_gpu));
}

static PyMethodDef module_methods[] = {
    {"_current", mod_current, METH_NOARGS, "the open trace, or None"},
    {"_set_decorator", mod_set_decorator, METH_O, NULL},
    {"_shutdown", mod_shutdown, METH_NOARGS, "closes the open trace; no callback runs after it"},
    {"_signal_flush", mod_signal_flush, METH_O, "st_signal_flush(timeout_ms)"},
    {"_read", mod_read, METH_VARARGS, "_read(path, ranges=True, counters=True, gpu=True)"},
    {"_layouts", mod_layouts, METH_NOARGS, "row sizes of the arrays _read returns"},
    {"gpu_available", mod_gpu_available, METH_NOARGS,
     "True when this build can record GPU activity (CUPTI)"},
    {NULL}};

static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_stagetrace",
                                        "libstagetrace bindings (see the stagetrace package)", -1,
                                        module_methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__stagetrace(void)
{
    PyObject *m = PyModule_Create(&module_def);
    if (!m) return NULL;
    Error = PyErr_NewExceptionWithDoc("stagetrace.Error", "A stagetrace call failed; the message says why.",
                                      PyExc_RuntimeError, NULL);
    TraceType = (PyTypeObject *)PyType_FromSpec(&trace_spec);
    StageType = (PyTypeObject *)PyType_FromSpec(&stage_spec);
    ThreadType = (PyTypeObject *)PyType_FromSpec(&thread_spec);
    NoOpType = (PyTypeObject *)PyType_FromSpec(&noop_spec);
    if (!Error || !TraceType || !StageType || !ThreadType || !NoOpType) goto fail;
    Py_INCREF(Error);
    if (PyModule_AddObject(m, "Error", Error)) goto fail;
    Py_INCREF(TraceType);
    if (PyModule_AddObject(m, "Trace", (PyObject *)TraceType)) goto fail;
    Py_INCREF(StageType);
    if (PyModule_AddObject(m, "Stage", (PyObject *)StageType)) goto fail;
    Py_INCREF(ThreadType);
    if (PyModule_AddObject(m, "Thread", (PyObject *)ThreadType)) goto fail;
    Py_INCREF(NoOpType);
    if (PyModule_AddObject(m, "NoOp", (PyObject *)NoOpType)) goto fail;
    if (PyModule_AddStringConstant(m, "library_version", ST_VERSION_STRING)) goto fail;
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
