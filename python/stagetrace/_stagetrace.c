/* _stagetrace.c: the C half of the stagetrace Python package, over
 * libstagetrace (compiled into this extension), on the stable ABI (abi3,
 * Python 3.9 and later). The Python half (stagetrace/__init__.py) adds the
 * argparse helper, the launcher environment, signals and the NumPy views.
 * This file is the module and the recording side; reading a trace for the
 * NumPy views (_read, _layouts) is _reader.c, and _stagetrace.h what the
 * two share.
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
#include "_stagetrace.h" /* first: Python.h on the limited API */
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "stagetrace.h"

/* METH_FASTCALL has meant the same thing to every CPython since 3.7; the
 * limited API names it from 3.10 on. __exit__ and the hot methods use it so
 * that no argument tuple is built per call. */
#ifndef METH_FASTCALL
#define METH_FASTCALL 0x0080
#endif

#define LIKELY(x) __builtin_expect(!!(x), 1)
#define UNLIKELY(x) __builtin_expect(!!(x), 0)
#define GEN_CLOSED UINT64_MAX

PyObject *stp_error; /* stagetrace.Error */
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
    int owns_trampoline; /* 1: open() turned the perf trampoline on; close turns it off */
    int gil_probe;       /* 1: this trace registered the GIL probe */
    PyObject *on_close;  /* callable() run once before st_close (sync_clocks at close), or NULL */
    PyObject *on_close_sampler; /* callable() run first at close: stops the Python-frames sampler, or NULL */
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

PyObject *stp_set_error(int rc, const char *what)
{
    PyErr_Format(stp_error, "%s: %s", what, st_last_error());
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
        PyErr_Format(stp_error, "trace '%U' is closed", t->path);
    else
        PyErr_SetString(stp_error, "the (disabled) trace is closed");
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

/* ---- the GIL probe of the CPU capture ---------------------------------------
 * With cpu=True, the library's CPU sampler asks, on the sampled thread and
 * from its signal handler, whether that thread holds the GIL: 1 yes, 0 no,
 * -1 unknown (st_cpu_set_gil_probe, where this build of the library has
 * it: ST_HAVE_GIL_PROBE). The probe is CPython's PyGILState_Check, which
 * takes no lock and allocates nothing: on 3.8-3.11 it compares two thread
 * states, the one holding the GIL (an atomic load of
 * _PyRuntime.gilstate.tstate_current) and the calling thread's own (its
 * pthread_getspecific slot, a plain read of the thread's descriptor in
 * glibc); on 3.12 and 3.13 the calling thread's current thread state (a
 * __thread variable of libpython, in the static TLS block that the
 * interpreter got at startup, so reading it allocates nothing) against
 * that same slot. A thread that released the GIL, waits for it, or never
 * had a thread state gives 0. It answers 1 whenever the interpreter has
 * turned its checks off (subinterpreters before 3.12, and check_enabled
 * 0): docs/cpu.md says so. It is not in the limited API, so it is looked
 * up once, with dlsym, when a trace opens; it is in every CPython since
 * 3.4. */
#ifdef ST_HAVE_GIL_PROBE
typedef int (*gil_check_fn)(void);
static gil_check_fn gil_check;
static int gil_probe(void)
{
    return gil_check ? gil_check() : -1;
}
#endif

/* Registers the probe for trace t when the CPU capture is on, and says in
 * meta python_gil_probe what came of it. */
static void gil_probe_start(trace_object *t)
{
#ifdef ST_HAVE_GIL_PROBE
    if (!gil_check) gil_check = (gil_check_fn)dlsym(RTLD_DEFAULT, "PyGILState_Check");
    if (gil_check) {
        st_cpu_set_gil_probe(gil_probe);
        t->gil_probe = 1;
        st_meta_set(t->trace, "python_gil_probe", "PyGILState_Check");
    } else {
        st_meta_set(t->trace, "python_gil_probe", "none: PyGILState_Check not found in this process");
    }
#else
    st_meta_set(t->trace, "python_gil_probe", "none: this build of libstagetrace has no GIL probe");
#endif
}

static void gil_probe_stop(trace_object *t)
{
#ifdef ST_HAVE_GIL_PROBE
    if (t->gil_probe) st_cpu_set_gil_probe(NULL);
#endif
    t->gil_probe = 0;
}

/* ---- Trace ---------------------------------------------------------------- */

static int trace_init(trace_object *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"path", "program", "profile_interval", "on_window", "on_log",
                             "overwrite", "enabled", "rank", "world_size", "local_rank",
                             "device", "run_id", "ring_records", "block_when_full",
                             "commit_ms", "nvtx", "argv", "main_thread", "cpu", "cpu_period_ns",
                             "cpu_user_stack", NULL};
    PyObject *path = Py_None, *on_window = Py_None, *on_log = Py_None, *argv = Py_None;
    const char *program = "python", *run_id = NULL, *main_thread = "main";
    unsigned int profile_interval = 0, ring_records = 0, commit_ms = 0;
    int overwrite = 0, enabled = 1, rank = 0, world_size = 1, local_rank = 0, device = -1;
    int block_when_full = 0, nvtx = -1, cpu = 0;
    unsigned long long cpu_period_ns = 0;
    unsigned int cpu_user_stack = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|OsIOOppiiiizIpIiOzpKI", kwlist, &path, &program,
                                     &profile_interval, &on_window, &on_log, &overwrite, &enabled,
                                     &rank, &world_size, &local_rank, &device, &run_id,
                                     &ring_records, &block_when_full, &commit_ms, &nvtx, &argv,
                                     &main_thread, &cpu, &cpu_period_ns, &cpu_user_stack))
        return -1;
    if (self->gen) {
        PyErr_SetString(stp_error, "Trace.__init__ called twice");
        return -1;
    }
    if (atomic_load(&shutting_down)) {
        PyErr_SetString(stp_error, "cannot open a trace: the interpreter is shutting down");
        return -1;
    }
    if (open_trace) {
        if (open_trace->path != Py_None)
            PyErr_Format(stp_error, "a trace is already open ('%U'): close it first", open_trace->path);
        else
            PyErr_SetString(stp_error, "a (disabled) trace is already open: close it first");
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
        opt.cpu = cpu;
        opt.cpu_period_ns = cpu_period_ns;
        opt.cpu_user_stack = cpu_user_stack;
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
            PyErr_Format(stp_error, "cannot open the trace: %s", st_last_error());
            return -1;
        }
        self->trace = tr;
        if (cpu) gil_probe_start(self);
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
                stp_set_error(rc, "cannot register the main thread");
                PyObject *et, *ev, *tb;
                PyErr_Fetch(&et, &ev, &tb);
                st_close(self->trace);
                gil_probe_stop(self);
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

/* Runs a close callback once (the slot is cleared first), its error
 * reported as unraisable, the caller's pending exception kept. */
static void run_close_callback(PyObject **slot)
{
    PyObject *fn = *slot;
    *slot = NULL;
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    PyObject *res = PyObject_CallObject(fn, NULL);
    if (!res) PyErr_WriteUnraisable(fn);
    Py_XDECREF(res);
    Py_DECREF(fn);
    PyErr_Restore(et, ev, tb);
}

static int trace_do_close(trace_object *t)
{
    if (tls_in_callback) {
        PyErr_SetString(stp_error, "close() cannot be called from a window or log callback");
        return -1;
    }
    if (t->closed) return 0;
    /* the Python-frames sampler stops (and stores its rate) first, while
     * the trace is open */
    if (t->on_close_sampler) run_close_callback(&t->on_close_sampler);
    /* the close-time clock measurement, while the trace is still open; its
     * failures are its own to report (it never stops the close) */
    if (t->on_close && t->trace) run_close_callback(&t->on_close);
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
        gil_probe_stop(t);
    }
    if (registered_here) tls_gen = 0;
    /* The perf map's names were read by st_close: the trampoline that
     * open() turned on can go (its code stays mapped until the interpreter
     * ends, so frames still running through it are safe). */
    if (t->owns_trampoline) {
        t->owns_trampoline = 0;
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        PyObject *sys = PyImport_ImportModule("sys");
        PyObject *res = sys ? PyObject_CallMethod(sys, "deactivate_stack_trampoline", NULL) : NULL;
        if (!res) PyErr_Clear();
        Py_XDECREF(res);
        Py_XDECREF(sys);
        PyErr_Restore(et, ev, tb);
    }
    /* No callback runs any more: let go of what may point back at us. */
    PyDict_Clear(t->marks);
    PyDict_Clear(t->stages);
    PyObject *w = t->on_window, *l = t->on_log;
    t->on_window = t->on_log = NULL;
    Py_XDECREF(w);
    Py_XDECREF(l);
    if (rc != ST_OK) {
        stp_set_error(rc, "closing the trace failed");
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
        PyErr_SetString(stp_error, "flush() cannot be called from a window or log callback");
        return NULL;
    }
    if (self->closed) return closed_error(self);
    if (!self->trace) Py_RETURN_NONE;
    int rc;
    st_trace *tr = self->trace;
    Py_BEGIN_ALLOW_THREADS
    rc = st_flush(tr);
    Py_END_ALLOW_THREADS
    if (rc != ST_OK) return stp_set_error(rc, "flush failed");
    Py_RETURN_NONE;
}

/* _meta_set(key, value): st_meta_set, for what the package knows of the
 * run (python_stacks, ...). */
static PyObject *trace_meta_set(trace_object *self, PyObject *args)
{
    const char *key, *value;
    if (!PyArg_ParseTuple(args, "ss", &key, &value)) return NULL;
    if (self->closed) return closed_error(self);
    if (!self->trace) Py_RETURN_NONE;
    int rc = st_meta_set(self->trace, key, value);
    if (rc != ST_OK) return stp_set_error(rc, "cannot store the meta key");
    Py_RETURN_NONE;
}

/* A trace's callback slot: fn (a callable) or None, for the setters below. */
static PyObject *set_callback(PyObject **slot, PyObject *fn, const char *setter)
{
    if (fn != Py_None && !PyCallable_Check(fn)) {
        PyErr_Format(PyExc_TypeError, "%s expects a callable or None", setter);
        return NULL;
    }
    Py_XDECREF(*slot);
    *slot = fn == Py_None ? NULL : fn;
    Py_XINCREF(*slot);
    Py_RETURN_NONE;
}

/* _set_on_close_sampler(fn or None): fn() runs once when the trace closes,
 * before everything else (the Python-frames sampler's stop). */
static PyObject *trace_set_on_close_sampler(trace_object *self, PyObject *fn)
{
    return set_callback(&self->on_close_sampler, fn, "_set_on_close_sampler");
}

/* _cpu_sample(native_id, frames): one Python-frames sample of the thread
 * with that native id (st_cpu_sample_add, stamped as the call enters):
 * frames a list of (qualname bytes, file bytes, line int), innermost first
 * (the innermost ST_CPU_SAMPLE_MAX_FRAMES are passed). Returns the library's
 * code without raising (0 queued, 1 the queue was full and the sample is
 * counted lost, ST_EINVAL for a thread not registered, ST_ESTATE once the
 * trace closed): the sampler calls it for every thread at its rate. A
 * malformed frames list raises TypeError. */
static PyObject *trace_cpu_sample(trace_object *self, PyObject *args)
{
    int tid;
    PyObject *list;
    if (!PyArg_ParseTuple(args, "iO!", &tid, &PyList_Type, &list)) return NULL;
    if (self->closed || !self->trace) return PyLong_FromLong(ST_ESTATE);
    Py_ssize_t n = PyList_Size(list);
    if (n > ST_CPU_SAMPLE_MAX_FRAMES) n = ST_CPU_SAMPLE_MAX_FRAMES;
    st_py_frame frames[ST_CPU_SAMPLE_MAX_FRAMES];
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyList_GetItem(list, i);
        if (!item || !PyTuple_Check(item) || PyTuple_Size(item) != 3) {
            PyErr_SetString(PyExc_TypeError, "_cpu_sample: each frame is a tuple (qualname bytes, file bytes, line)");
            return NULL;
        }
        char *q, *f;
        Py_ssize_t ql, fl;
        if (PyBytes_AsStringAndSize(PyTuple_GetItem(item, 0), &q, &ql) ||
            PyBytes_AsStringAndSize(PyTuple_GetItem(item, 1), &f, &fl))
            return NULL;
        long line = PyLong_AsLong(PyTuple_GetItem(item, 2));
        if (line == -1 && PyErr_Occurred()) return NULL;
        frames[i] = (st_py_frame){q, f, line < 0 || line > INT32_MAX ? 0 : (int32_t)line};
    }
    return PyLong_FromLong(st_cpu_sample_add(self->trace, tid, 0, frames, (size_t)n, ST_CPU_SAMPLE_NOW));
}

/* _set_on_close(fn or None): fn() runs once when the trace closes, before
 * st_close (stagetrace.sync_clocks's close-time measurement). */
static PyObject *trace_set_on_close(trace_object *self, PyObject *fn)
{
    return set_callback(&self->on_close, fn, "_set_on_close");
}

/* _clock_record(at, probes, own, rank0): at 0 (open) or 1 (close); probes a
 * sequence of (send_ns, remote_ns, recv_ns) or None on rank 0; own and rank0
 * (error_ns, half_bracket_ns) map errors (rank0 None on rank 0). The best
 * probe gives the offset (st_clock_estimate), widened by both map errors
 * (st_clock_sync_widen), stored with this process's map error
 * (st_clock_sync_record, st_clock_map_record); rank 0 stores offset 0 and
 * uncertainty 0. Returns (offset_ns, uncertainty_ns). */
static PyObject *trace_clock_record(trace_object *self, PyObject *args)
{
    int at;
    PyObject *probes, *rank0_obj;
    long long own_e, own_h;
    if (!PyArg_ParseTuple(args, "iO(LL)O", &at, &probes, &own_e, &own_h, &rank0_obj)) return NULL;
    if (self->closed) return closed_error(self);
    if (at != ST_CLOCK_AT_OPEN && at != ST_CLOCK_AT_CLOSE) {
        PyErr_SetString(PyExc_ValueError, "_clock_record: at must be 0 (open) or 1 (close)");
        return NULL;
    }
    st_clock_map own = {own_e, own_h};
    st_clock_sync sync = {st_now_ns(), 0, 0};
    if (probes != Py_None) {
        long long r0e, r0h;
        if (!PyArg_ParseTuple(rank0_obj, "LL", &r0e, &r0h)) return NULL;
        st_clock_map rank0 = {r0e, r0h};
        Py_ssize_t n = PySequence_Size(probes);
        if (n < 0) return NULL;
        if (n < 1 || n > 4096) {
            PyErr_Format(PyExc_ValueError, "_clock_record: %zd probes (1..4096)", n);
            return NULL;
        }
        st_clock_probe *p = PyMem_Malloc((size_t)n * sizeof *p);
        if (!p) return PyErr_NoMemory();
        for (Py_ssize_t i = 0; i < n; i++) {
            long long a, b, c;
            PyObject *item = PySequence_GetItem(probes, i);
            int ok = item && PyArg_ParseTuple(item, "LLL", &a, &b, &c);
            Py_XDECREF(item);
            if (!ok) {
                PyMem_Free(p);
                return NULL;
            }
            p[i] = (st_clock_probe){a, b, c};
        }
        int rc = st_clock_estimate(p, (int)n, &sync);
        PyMem_Free(p);
        if (rc == ST_OK) rc = st_clock_sync_widen(&sync, &own, &rank0);
        if (rc != ST_OK) return stp_set_error(rc, "cannot estimate the clock offset");
    }
    if (self->trace) {
        int rc = st_clock_sync_record(self->trace, at, &sync);
        if (rc == ST_OK) rc = st_clock_map_record(self->trace, at, &own);
        if (rc != ST_OK) return stp_set_error(rc, "cannot store the clock offset");
    }
    return Py_BuildValue("(LL)", (long long)sync.offset_ns, (long long)sync.uncertainty_ns);
}

/* _own_trampoline(): open() turned the perf trampoline on for this trace,
 * and close turns it off again. */
static PyObject *trace_own_trampoline(trace_object *self, PyObject *unused)
{
    self->owns_trampoline = 1;
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
        if (id < 0) return stp_set_error(id, "cannot register the stage");
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
        if (rc < 0) return stp_set_error(rc, "cannot register the counter");
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

/* st_gpu_start_with: records is None (STAGETRACE_GPU_RECORDS or the default
 * set) or a record-set spec ("every_steps=10"). */
static PyObject *trace_gpu_start(trace_object *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"records", NULL};
    const char *records = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|z:gpu_start", kwlist, &records)) return NULL;
    if (self->closed) return closed_error(self);
#ifdef STP_HAVE_CUPTI
    if (!self->trace) Py_RETURN_NONE;
    int rc = st_gpu_start_with(self->trace, records);
    if (rc != ST_OK) return stp_set_error(rc, "cannot record GPU activity");
    Py_RETURN_NONE;
#else
    PyErr_SetString(stp_error, "GPU recording is not available in this build: the extension was built "
                           "without CUPTI (build it with `make python` or `pip install ./python` on a "
                           "machine with the CUDA toolkit and CUPTI)");
    return NULL;
#endif
}

/* st_gpu_pause / st_gpu_resume: GPU recording off and on again. */
static PyObject *gpu_toggle(trace_object *self, int resume)
{
    if (self->closed) return closed_error(self);
#ifdef STP_HAVE_CUPTI
    if (!self->trace) Py_RETURN_NONE;
    int rc = resume ? st_gpu_resume(self->trace) : st_gpu_pause(self->trace);
    if (rc != ST_OK) return stp_set_error(rc, resume ? "cannot resume GPU recording" : "cannot pause GPU recording");
    Py_RETURN_NONE;
#else
    (void)resume;
    PyErr_SetString(stp_error, "GPU recording is not available in this build: the extension was built without CUPTI");
    return NULL;
#endif
}

static PyObject *trace_gpu_pause(trace_object *self, PyObject *unused) { return gpu_toggle(self, 0); }
static PyObject *trace_gpu_resume(trace_object *self, PyObject *unused) { return gpu_toggle(self, 1); }

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
    Py_XDECREF(self->on_close);
    Py_XDECREF(self->on_close_sampler);
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
    {"gpu_start", (PyCFunction)(void (*)(void))trace_gpu_start, METH_VARARGS | METH_KEYWORDS,
     "gpu_start(records=None): records GPU activity (CUPTI builds); records: a record-set spec such as "
     "'every_steps=10', else STAGETRACE_GPU_RECORDS or the default set"},
    {"gpu_pause", (PyCFunction)trace_gpu_pause, METH_NOARGS,
     "pauses GPU recording (st_gpu_pause; the trace keeps the pause in gpu_pauses)"},
    {"gpu_resume", (PyCFunction)trace_gpu_resume, METH_NOARGS, "resumes GPU recording paused by gpu_pause"},
    {"_meta_set", (PyCFunction)trace_meta_set, METH_VARARGS, "_meta_set(key, value): st_meta_set"},
    {"_set_on_close", (PyCFunction)trace_set_on_close, METH_O, "_set_on_close(fn or None)"},
    {"_set_on_close_sampler", (PyCFunction)trace_set_on_close_sampler, METH_O, "_set_on_close_sampler(fn or None)"},
    {"_cpu_sample", (PyCFunction)trace_cpu_sample, METH_VARARGS,
     "_cpu_sample(native_id, [(qualname, file, line), ...]): st_cpu_sample_add; returns its code"},
    {"_clock_record", (PyCFunction)trace_clock_record, METH_VARARGS,
     "_clock_record(at, probes, own, rank0): the clock offset to rank 0, stored in meta"},
    {"_own_trampoline", (PyCFunction)trace_own_trampoline, METH_NOARGS,
     "close() turns the perf trampoline off (open() turned it on)"},
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
            PyErr_Format(stp_error, "stage '%U': trace '%U' is closed", s->name, t->path);
        else
            PyErr_Format(stp_error, "stage '%U': the (disabled) trace is closed", s->name);
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
        PyErr_SetString(stp_error, "stagetrace is not initialised (import stagetrace, not _stagetrace)");
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
        PyErr_SetString(stp_error, "this thread is already registered with the trace");
        return NULL;
    }
    int id = 0;
    if (t->trace) {
        id = st_thread_register(t->trace, name, role, device, rank);
        if (id < 0) return stp_set_error(id, "cannot register the thread");
    } else if (!name || !*name || strlen(name) > ST_NAME_MAX || strlen(role) > ST_NAME_MAX) {
        PyErr_Format(stp_error, "cannot register the thread: empty name, or a name or role longer than %d bytes",
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
        PyErr_SetString(stp_error, "a thread is unregistered on the thread that registered it");
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

/* _now_ns(): the trace clock (st_now_ns), as every record of the trace reads it. */
static PyObject *mod_now_ns(PyObject *m, PyObject *unused)
{
    return PyLong_FromLongLong((long long)st_now_ns());
}

/* _clock_map(): this process's trace clock against its CLOCK_MONOTONIC now,
 * (error_ns, half_bracket_ns) (st_clock_map_measure). */
static PyObject *mod_clock_map(PyObject *m, PyObject *unused)
{
    st_clock_map c = {0, 0};
    st_clock_map_measure(&c);
    return Py_BuildValue("(LL)", (long long)c.error_ns, (long long)c.half_bracket_ns);
}

static PyObject *mod_gpu_available(PyObject *m, PyObject *unused)
{
#ifdef STP_HAVE_CUPTI
    Py_RETURN_TRUE;
#else
    Py_RETURN_FALSE;
#endif
}

static PyMethodDef module_methods[] = {
    {"_current", mod_current, METH_NOARGS, "the open trace, or None"},
    {"_set_decorator", mod_set_decorator, METH_O, NULL},
    {"_shutdown", mod_shutdown, METH_NOARGS, "closes the open trace; no callback runs after it"},
    {"_signal_flush", mod_signal_flush, METH_O, "st_signal_flush(timeout_ms)"},
    {"_read", stp_read_trace, METH_VARARGS, "_read(path, ranges=True, counters=True, gpu=True, cpu=True)"},
    {"_layouts", stp_read_layouts, METH_NOARGS, "row sizes of the arrays _read returns"},
    {"_now_ns", mod_now_ns, METH_NOARGS, "the trace clock now (st_now_ns)"},
    {"_clock_map", mod_clock_map, METH_NOARGS, "(error_ns, half_bracket_ns) of the trace clock now"},
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
    stp_error = PyErr_NewExceptionWithDoc("stagetrace.Error", "A stagetrace call failed; the message says why.",
                                      PyExc_RuntimeError, NULL);
    TraceType = (PyTypeObject *)PyType_FromSpec(&trace_spec);
    StageType = (PyTypeObject *)PyType_FromSpec(&stage_spec);
    ThreadType = (PyTypeObject *)PyType_FromSpec(&thread_spec);
    NoOpType = (PyTypeObject *)PyType_FromSpec(&noop_spec);
    if (!stp_error || !TraceType || !StageType || !ThreadType || !NoOpType) goto fail;
    Py_INCREF(stp_error);
    if (PyModule_AddObject(m, "Error", stp_error)) goto fail;
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
