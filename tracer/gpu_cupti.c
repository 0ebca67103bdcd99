/* gpu_cupti.c: GPU activity through CUPTI's activity API (st_gpu_start).
 *
 * Built into its own archive, libstagetrace_gpu.a, so that programs that
 * never trace a GPU do not need libcupti: CUDA programs link it (and
 * -lcupti) before libstagetrace.a. Without ST_WITH_CUPTI it is a stub that
 * says so.
 *
 * CUPTI writes kernel, memcpy, memset, synchronization and runtime/driver
 * API records into buffers this file hands it; CUPTI's own thread (or the
 * thread calling st_close, at the forced flush) gives them back full. Each
 * buffer is parsed there, never on the application's threads, and the
 * records go to the writer through st_gpu_submit. Timestamps are the
 * trace's clock: CUPTI calls st_now_ns through the timestamp callback, so GPU
 * and CPU rows line up with no conversion. The API records keep the OS
 * thread id (CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM, the same id as the threads
 * table) and the call's start; the reader joins them to activity records by
 * correlation id, which gives each kernel its launching thread and stage.
 * Kernels of a CUDA graph carry the correlation id of the cudaGraphLaunch. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "st_internal.h"

#ifndef ST_WITH_CUPTI

int st_gpu_start_with(st_trace *trace, const char *records)
{
    (void)trace;
    (void)records;
    return st_set_error(ST_EINVAL, "GPU tracing needs a CUDA build with CUPTI (this stagetrace has none)");
}

int st_gpu_start(st_trace *trace) { return st_gpu_start_with(trace, NULL); }

int st_gpu_pause(st_trace *trace)
{
    (void)trace;
    return st_set_error(ST_ESTATE, "st_gpu_pause: GPU tracing is not on (this stagetrace has no CUPTI)");
}

int st_gpu_resume(st_trace *trace)
{
    (void)trace;
    return st_set_error(ST_ESTATE, "st_gpu_resume: GPU tracing is not on (this stagetrace has no CUPTI)");
}

#else

#include <cupti.h>
#include <dlfcn.h>

#ifdef ST_CUPTI_DLOPEN
/* Lazy CUPTI (the Python extension): nothing links libcupti, so importing
 * never needs it; st_gpu_start loads it with dlopen and resolves the few
 * functions used here, or says plainly that it is missing. A process that
 * has CUPTI loaded already (a framework's copy) gets that copy. */
#define ST_CUPTI_FUNCS(X)                                                                        \
    X(cuptiActivityDisable) X(cuptiActivityEnable) X(cuptiActivityFlushAll)                     \
    X(cuptiActivityFlushPeriod) X(cuptiActivityGetNextRecord) X(cuptiActivityGetNumDroppedRecords) \
    X(cuptiActivityRegisterCallbacks) X(cuptiActivityRegisterTimestampCallback)                 \
    X(cuptiGetCallbackName) X(cuptiGetResultString) X(cuptiGetTimestamp) X(cuptiSetThreadIdType)
#define ST_CUPTI_POINTER(name) static __typeof__(name) *p_##name;
ST_CUPTI_FUNCS(ST_CUPTI_POINTER)
#ifndef ST_CUPTI_LIBDIR
#define ST_CUPTI_LIBDIR ""
#endif

static void load_optional(void *self);
static int load_cupti(void)
{
    static void *lib;
    if (lib) return ST_OK;
    const char *const names[] = {"libcupti.so.13", "libcupti.so.12", "libcupti.so",
                                 ST_CUPTI_LIBDIR "/libcupti.so"};
    char why[512] = "";
    void *handle = NULL;
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !handle; i++) {
        if (names[i][0] == '/' && !ST_CUPTI_LIBDIR[0]) continue;
        handle = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (!handle && !why[0]) snprintf(why, sizeof why, "%s", dlerror());
    }
    if (!handle)
        return st_set_error(ST_EIO,
                            "GPU tracing needs CUPTI, which could not be loaded (%s): add the directory of "
                            "libcupti.so (CUDA's extras/CUPTI/lib64 or lib64) to LD_LIBRARY_PATH",
                            why);
#define ST_CUPTI_RESOLVE(name)                                                                  \
    if (!(p_##name = (__typeof__(p_##name))dlsym(handle, #name))) {                             \
        dlclose(handle);                                                                        \
        return st_set_error(ST_EIO, "the CUPTI library found lacks %s: it is too old", #name); \
    }
    ST_CUPTI_FUNCS(ST_CUPTI_RESOLVE)
    load_optional(handle);
    lib = handle;
    return ST_OK;
}
#define cuptiActivityDisable p_cuptiActivityDisable
#define cuptiActivityEnable p_cuptiActivityEnable
#define cuptiActivityFlushAll p_cuptiActivityFlushAll
#define cuptiActivityFlushPeriod p_cuptiActivityFlushPeriod
#define cuptiActivityGetNextRecord p_cuptiActivityGetNextRecord
#define cuptiActivityGetNumDroppedRecords p_cuptiActivityGetNumDroppedRecords
#define cuptiActivityRegisterCallbacks p_cuptiActivityRegisterCallbacks
#define cuptiActivityRegisterTimestampCallback p_cuptiActivityRegisterTimestampCallback
#define cuptiGetCallbackName p_cuptiGetCallbackName
#define cuptiGetResultString p_cuptiGetResultString
#define cuptiGetTimestamp p_cuptiGetTimestamp
#define cuptiSetThreadIdType p_cuptiSetThreadIdType
/* Newer functions, needed only by the record sets that use them. */
static __typeof__(cuptiActivityEnableRuntimeApi) *p_cuptiActivityEnableRuntimeApi;
static __typeof__(cuptiActivityEnableDriverApi) *p_cuptiActivityEnableDriverApi;
static __typeof__(cuptiActivitySetAttribute) *p_cuptiActivitySetAttribute;
static void load_optional(void *self)
{
    p_cuptiActivityEnableRuntimeApi = (__typeof__(p_cuptiActivityEnableRuntimeApi))dlsym(self, "cuptiActivityEnableRuntimeApi");
    p_cuptiActivityEnableDriverApi = (__typeof__(p_cuptiActivityEnableDriverApi))dlsym(self, "cuptiActivityEnableDriverApi");
    p_cuptiActivitySetAttribute = (__typeof__(p_cuptiActivitySetAttribute))dlsym(self, "cuptiActivitySetAttribute");
}
#define cuptiActivityEnableRuntimeApi p_cuptiActivityEnableRuntimeApi
#define cuptiActivityEnableDriverApi p_cuptiActivityEnableDriverApi
#define cuptiActivitySetAttribute p_cuptiActivitySetAttribute
#define HAVE_FN(p) ((p) != NULL)
#else
#define HAVE_FN(p) 1
#endif

static size_t buffer_bytes = (size_t)ST_GPU_BUFFER_KB_DEFAULT << 10;
static int buffer_zeroed;
static st_gpu_config gpu_config;
#define BATCH 1024
#define MAX_CONTEXTS 256

static st_trace *gpu_trace;
static pthread_mutex_t gpu_mutex = PTHREAD_MUTEX_INITIALIZER; /* names, contexts, dropped */
static int64_t clock_offset_ns; /* added to CUPTI's times without the timestamp callback */
static long long dropped_total;

typedef struct name_slot {
    char *value;
    uint64_t hash;
    uint32_t id;
} name_slot;
static name_slot *names;
static size_t names_cap, names_len;

/* API function names by (domain, cbid): gpu_strings id + 1, 0 not looked up
 * yet; cbids past the table go through intern() each time. */
#define API_NAME_CACHE 2048
static uint32_t api_name_ids[2][API_NAME_CACHE];

static struct {
    uint32_t context, device;
} contexts[MAX_CONTEXTS];
static size_t n_contexts;

/* Why the machine cannot be profiled, when it cannot: no CUDA driver, a driver that does not
 * start, or no device. CUPTI says only CUPTI_ERROR_UNKNOWN (or NOT_INITIALIZED, ...) then, so
 * the driver is asked directly, through dlopen: nothing here links libcuda, and a machine
 * without it must still load this file. NULL when the driver sees a device. */
static const char *cuda_unusable(char *buf, size_t size)
{
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!cuda) {
        snprintf(buf, size, "no CUDA driver (libcuda.so.1 cannot be loaded: %s)", dlerror());
        return buf;
    }
    __typeof__(cuInit) *init = (__typeof__(cuInit) *)dlsym(cuda, "cuInit");
    __typeof__(cuDeviceGetCount) *count = (__typeof__(cuDeviceGetCount) *)dlsym(cuda, "cuDeviceGetCount");
    __typeof__(cuGetErrorName) *error_name = (__typeof__(cuGetErrorName) *)dlsym(cuda, "cuGetErrorName");
    if (!init || !count) {
        snprintf(buf, size, "the CUDA driver's libcuda.so.1 lacks cuInit or cuDeviceGetCount");
        return buf;
    }
    int devices = 0;
    CUresult rc = init(0);
    const char *what = "cuInit";
    if (rc == CUDA_SUCCESS) {
        rc = count(&devices);
        what = "cuDeviceGetCount";
    }
    if (rc != CUDA_SUCCESS) {
        const char *name = "unknown error";
        if (error_name) error_name(rc, &name);
        snprintf(buf, size, "the CUDA driver does not start (%s: %s)", what, name);
        return buf; /* libcuda stays loaded: the program may use it yet */
    }
    if (devices == 0) {
        snprintf(buf, size, "the CUDA driver sees no device");
        return buf;
    }
    return NULL;
}

/* A failed CUPTI call, in words a user can act on where the machine is the cause; with the
 * call's file:line where it is not (a bug here, or CUPTI's). */
static int cupti_failure(CUptiResult r, const char *call, const char *file, int line)
{
    const char *m = "unknown error";
    cuptiGetResultString(r, &m);
    if (r == CUPTI_ERROR_INSUFFICIENT_PRIVILEGES || r == CUPTI_ERROR_VIRTUALIZED_DEVICE_INSUFFICIENT_PRIVILEGES)
        return st_set_error(ST_EIO,
                            "GPU profiling is reserved to administrators on this machine (the NVIDIA "
                            "driver's NVreg_RestrictProfilingToAdminUsers=1): run as root, or load the "
                            "driver with NVreg_RestrictProfilingToAdminUsers=0 (CUPTI: %s)",
                            m);
    char why[512];
    if (cuda_unusable(why, sizeof why))
        return st_set_error(ST_EIO, "GPU tracing needs a usable CUDA device and driver: %s (CUPTI: %s)", why, m);
    return st_set_error(ST_EIO, "%s:%d: %s: CUPTI: %s", file, line, call, m);
}

#define CUPTI_CHECK(call)                                                                  \
    do {                                                                                   \
        CUptiResult r_ = (call);                                                           \
        if (r_ != CUPTI_SUCCESS) return cupti_failure(r_, #call, __FILE__, __LINE__);      \
    } while (0)

static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

/* Under gpu_mutex: the name's gpu_strings id + 1 (0 when out of memory). */
static uint32_t intern(st_trace *t, const char *name)
{
    if (!name) return 0;
    if (names_len * 2 >= names_cap) {
        size_t cap = names_cap ? names_cap * 2 : 256;
        name_slot *tab = calloc(cap, sizeof *tab);
        if (!tab) return 0;
        for (size_t i = 0; i < names_cap; i++) {
            if (!names[i].value) continue;
            size_t h = names[i].hash & (cap - 1);
            while (tab[h].value) h = (h + 1) & (cap - 1);
            tab[h] = names[i];
        }
        free(names);
        names = tab;
        names_cap = cap;
    }
    uint64_t hash = hash_str(name);
    size_t h = hash & (names_cap - 1);
    while (names[h].value) {
        if (names[h].hash == hash && strcmp(names[h].value, name) == 0) return names[h].id + 1;
        h = (h + 1) & (names_cap - 1);
    }
    char *copy = strdup(name);
    if (!copy) return 0;
    uint32_t id = (uint32_t)names_len++;
    names[h] = (name_slot){copy, hash, id};
    st_gpu_submit_string(t, id, name);
    return id + 1;
}

static void note_context(uint32_t context, uint32_t device)
{
    for (size_t i = 0; i < n_contexts; i++)
        if (contexts[i].context == context) return;
    if (n_contexts < MAX_CONTEXTS) {
        contexts[n_contexts].context = context;
        contexts[n_contexts].device = device;
        n_contexts++;
    }
}

static int32_t device_of_context(uint32_t context)
{
    for (size_t i = 0; i < n_contexts; i++)
        if (contexts[i].context == context) return (int32_t)contexts[i].device;
    return 0;
}

static uint32_t copy_kind(uint8_t k)
{
    switch (k) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return ST_COPY_H2D;
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return ST_COPY_D2H;
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return ST_COPY_D2D;
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH: return ST_COPY_H2H;
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP: return ST_COPY_P2P;
    default: return ST_COPY_OTHER;
    }
}

static uint32_t mem_kind(uint32_t k)
{
    switch (k) {
    case CUPTI_ACTIVITY_MEMORY_KIND_UNKNOWN: return ST_MEM_UNKNOWN;
    case CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE: return ST_MEM_PAGEABLE;
    case CUPTI_ACTIVITY_MEMORY_KIND_PINNED: return ST_MEM_PINNED;
    case CUPTI_ACTIVITY_MEMORY_KIND_DEVICE:
    case CUPTI_ACTIVITY_MEMORY_KIND_DEVICE_STATIC: return ST_MEM_DEVICE;
    case CUPTI_ACTIVITY_MEMORY_KIND_MANAGED:
    case CUPTI_ACTIVITY_MEMORY_KIND_MANAGED_STATIC: return ST_MEM_MANAGED;
    default: return ST_MEM_OTHER;
    }
}

/* Under gpu_mutex: the OS threads seen making API calls, an open-addressed
 * set (0 empty), so that each one's name is read from /proc once, when its
 * first call arrives, and handed to the writer for gpu_threads: the name of
 * a launching thread the program did not register (PyTorch's autograd
 * threads, NCCL's and the CUDA runtime's own) would otherwise be lost. */
static uint32_t *seen_tids;
static size_t seen_cap, seen_len;

static void note_thread(st_trace *t, uint32_t tid)
{
    if (!tid) return;
    if (2 * (seen_len + 1) > seen_cap) {
        size_t cap = seen_cap ? seen_cap * 2 : 64;
        uint32_t *a = calloc(cap, sizeof *a);
        if (!a) return; /* the name stays unknown */
        for (size_t i = 0; i < seen_cap; i++)
            if (seen_tids[i]) {
                size_t h = (seen_tids[i] * 2654435761u) & (cap - 1);
                while (a[h]) h = (h + 1) & (cap - 1);
                a[h] = seen_tids[i];
            }
        free(seen_tids);
        seen_tids = a;
        seen_cap = cap;
    }
    size_t h = (tid * 2654435761u) & (seen_cap - 1);
    while (seen_tids[h]) {
        if (seen_tids[h] == tid) return;
        h = (h + 1) & (seen_cap - 1);
    }
    seen_tids[h] = tid;
    seen_len++;
    char path[64], name[64];
    snprintf(path, sizeof path, "/proc/self/task/%u/comm", tid);
    FILE *f = fopen(path, "re");
    if (!f) return; /* exited before its calls were flushed */
    size_t n = fread(name, 1, sizeof name - 1, f);
    fclose(f);
    while (n && (name[n - 1] == '\n' || name[n - 1] == '\0')) n--;
    name[n] = '\0';
    if (n) st_gpu_submit_thread(t, tid, name);
}

/* Under gpu_mutex: the name of a runtime (driver = 0) or driver (1) API
 * function as a gpu_strings id + 1, without CUPTI's version suffix
 * ("cudaLaunchKernel_v7000" -> "cudaLaunchKernel"); 0 when CUPTI does not
 * know the cbid. */
static uint32_t api_name(st_trace *t, int driver, uint32_t cbid)
{
    if (cbid < API_NAME_CACHE && api_name_ids[driver][cbid]) return api_name_ids[driver][cbid];
    const char *name = NULL;
    if (cuptiGetCallbackName(driver ? CUPTI_CB_DOMAIN_DRIVER_API : CUPTI_CB_DOMAIN_RUNTIME_API, cbid, &name) !=
            CUPTI_SUCCESS ||
        !name)
        return 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", name);
    char *v = strrchr(buf, '_');
    if (v && v[1] == 'v' && v[2] >= '0' && v[2] <= '9' && strspn(v + 2, "0123456789") == strlen(v + 2)) *v = '\0';
    uint32_t id = intern(t, buf);
    if (cbid < API_NAME_CACHE) api_name_ids[driver][cbid] = id;
    return id;
}

static void set_times(st_gpu_rec *r, uint64_t start, uint64_t end)
{
    r->start_ns = (int64_t)start + clock_offset_ns;
    r->dur_ns = end > start ? (int64_t)(end - start) : 0;
}

/* Under gpu_mutex: one CUPTI record as an item; 0 when it is not kept. */
static int convert(st_trace *t, const CUpti_Activity *a, st_gpu_item *it)
{
    memset(it, 0, sizeof *it);
    st_gpu_rec *r = &it->rec;
    switch (a->kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        const CUpti_ActivityKernel10 *k = (const void *)a;
        note_context(k->contextId, k->deviceId);
        it->device = (int32_t)k->deviceId;
        it->stream = k->streamId;
        r->kind = ST_GPU_KERNEL;
        r->name = intern(t, k->name);
        r->correlation = k->correlationId;
        set_times(r, k->start, k->end);
        return 1;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const CUpti_ActivityMemcpy6 *m = (const void *)a;
        note_context(m->contextId, m->deviceId);
        it->device = (int32_t)m->deviceId;
        it->stream = m->streamId;
        r->kind = ST_GPU_MEMCPY;
        r->bytes = m->bytes;
        r->copy_kind = copy_kind(m->copyKind);
        r->src_mem = mem_kind(m->srcKind);
        r->dst_mem = mem_kind(m->dstKind);
        r->correlation = m->correlationId;
        set_times(r, m->start, m->end);
        return 1;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
        const CUpti_ActivityMemset4 *m = (const void *)a;
        note_context(m->contextId, m->deviceId);
        it->device = (int32_t)m->deviceId;
        it->stream = m->streamId;
        r->kind = ST_GPU_MEMSET;
        r->bytes = m->bytes;
        r->dst_mem = mem_kind(m->memoryKind);
        r->correlation = m->correlationId;
        set_times(r, m->start, m->end);
        return 1;
    }
    case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: {
        const CUpti_ActivitySynchronization2 *s = (const void *)a;
        it->device = device_of_context(s->contextId);
        it->stream = s->streamId;
        r->kind = ST_GPU_SYNC;
        r->copy_kind = (uint32_t)s->type;
        r->correlation = s->correlationId;
        set_times(r, s->start, s->end);
        return 1;
    }
    case CUPTI_ACTIVITY_KIND_RUNTIME:
    case CUPTI_ACTIVITY_KIND_DRIVER: {
        const CUpti_ActivityAPI *api = (const void *)a;
        it->device = -1;
        it->stream = a->kind == CUPTI_ACTIVITY_KIND_RUNTIME ? 0 : 1;
        r->kind = ST_GPU_API;
        r->copy_kind = (uint32_t)api->cbid;
        r->name = api_name(t, it->stream, api->cbid);
        r->correlation = api->correlationId;
        r->os_tid = api->threadId;
        note_thread(t, api->threadId);
        set_times(r, api->start, api->end);
        return 1;
    }
    default:
        return 0;
    }
}

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
    *buffer = buffer_zeroed ? calloc(1, buffer_bytes) : aligned_alloc(8, buffer_bytes);
    *size = *buffer ? buffer_bytes : 0;
    *max_records = 0;
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream_id, uint8_t *buffer, size_t size,
                                      size_t valid)
{
    st_gpu_item batch[BATCH];
    size_t n = 0;
    pthread_mutex_lock(&gpu_mutex);
    st_trace *t = gpu_trace;
    CUpti_Activity *a = NULL;
    while (t && valid && cuptiActivityGetNextRecord(buffer, valid, &a) == CUPTI_SUCCESS) {
        if (convert(t, a, &batch[n])) n++;
        if (n == BATCH) {
            st_gpu_submit(t, batch, n);
            n = 0;
        }
    }
    if (t) {
        st_gpu_submit(t, batch, n);
        size_t dropped = 0;
        if (cuptiActivityGetNumDroppedRecords(ctx, stream_id, &dropped) == CUPTI_SUCCESS && dropped) {
            dropped_total += (long long)dropped;
        }
        atomic_store(&t->gpu_dropped, dropped_total);
    }
    pthread_mutex_unlock(&gpu_mutex);
    free(buffer);
}

static uint64_t trace_clock(void) { return (uint64_t)st_now_ns(); }

/* The activity kinds of the record set's bits, in ST_GPU_REC_* order; the
 * launch subsets enable single API functions instead (below). */
static const CUpti_ActivityKind kinds[] = {
    CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET,
    CUPTI_ACTIVITY_KIND_SYNCHRONIZATION,   CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_ACTIVITY_KIND_DRIVER,
};

/* The launch subset of one API domain: each function st_gpu_api_is_launch
 * names gets its activity records, the others none. The callback ids are
 * looked up once (by name, hundreds of calls) and kept, so that a pause, a
 * resume and the step sampler's switches cost only the enables. */
static uint32_t *launch_cbids[2];
static size_t n_launch_cbids[2];
static int launch_cbids_known[2];

static int enable_launch_api(int driver, uint8_t enable)
{
    if (!(driver ? HAVE_FN(cuptiActivityEnableDriverApi) : HAVE_FN(cuptiActivityEnableRuntimeApi)))
        return st_set_error(ST_EIO, "GPU records '%s-launch' need CUPTI 12.6 or later "
                                    "(cuptiActivityEnable%sApi); use '%s' instead",
                            driver ? "driver" : "runtime", driver ? "Driver" : "Runtime", driver ? "driver" : "runtime");
    if (!launch_cbids_known[driver]) {
        uint32_t size = driver ? CUPTI_DRIVER_TRACE_CBID_SIZE : CUPTI_RUNTIME_TRACE_CBID_SIZE;
        CUpti_CallbackDomain domain = driver ? CUPTI_CB_DOMAIN_DRIVER_API : CUPTI_CB_DOMAIN_RUNTIME_API;
        uint32_t *ids = malloc(size * sizeof *ids);
        if (!ids) return st_set_error(ST_ENOMEM, "st_gpu_start: out of memory");
        size_t n = 0;
        for (uint32_t cbid = 1; cbid < size; cbid++) {
            const char *name = NULL;
            if (cuptiGetCallbackName(domain, cbid, &name) == CUPTI_SUCCESS && st_gpu_api_is_launch(name))
                ids[n++] = cbid;
        }
        free(launch_cbids[driver]);
        launch_cbids[driver] = ids;
        n_launch_cbids[driver] = n;
        launch_cbids_known[driver] = 1;
    }
    for (size_t i = 0; i < n_launch_cbids[driver]; i++) {
        uint32_t cbid = launch_cbids[driver][i];
        if (driver)
            CUPTI_CHECK(cuptiActivityEnableDriverApi(cbid, enable));
        else
            CUPTI_CHECK(cuptiActivityEnableRuntimeApi(cbid, enable));
    }
    return ST_OK;
}

/* Turns the record set's kinds on or off: all of them at st_gpu_start and
 * the stop; with kernels_only, the kernel records alone, for a pause, a
 * resume and the step sampler. CUPTI 13 does not switch the other kinds
 * safely while other threads launch: on the H200, the trainer's threads
 * launching while the memcpy or memset kind, or the launch subsets of the
 * API, were turned off and on every other step crashed inside CUPTI (a NULL
 * dereference in cuLaunchKernel's callback, a corrupt heap in CUPTI's own
 * thread) within seconds, in every run; switching the kernel kind alone, the
 * API records on throughout, never did (bench/RESULTS.md, 2026-12-04). The
 * kernel records are the cost a pause exists to save (docs/tracer.md,
 * "Pausing"). */
static int enable_kinds(const st_gpu_config *config, int enable, int kernels_only)
{
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (config->kinds & (1u << i) && (!kernels_only || (1u << i) == ST_GPU_REC_KERNEL)) {
            if (enable)
                CUPTI_CHECK(cuptiActivityEnable(kinds[i]));
            else
                cuptiActivityDisable(kinds[i]);
        }
    if (kernels_only) return ST_OK;
    if (config->kinds & ST_GPU_REC_RUNTIME_LAUNCH) {
        int rc = enable_launch_api(0, (uint8_t)enable);
        if (rc && enable) return rc;
    }
    if (config->kinds & ST_GPU_REC_DRIVER_LAUNCH) {
        int rc = enable_launch_api(1, (uint8_t)enable);
        if (rc && enable) return rc;
    }
    return ST_OK;
}

/* Ends an open pause at `now`, for the writer's gpu_pauses (gpu_lock held). */
static int end_pause(st_trace *t, int64_t now)
{
    if (!t->gpu_paused_since) return ST_OK;
    if (t->gpu_pauses_len == t->gpu_pauses_cap) {
        size_t cap = t->gpu_pauses_cap ? t->gpu_pauses_cap * 2 : 16;
        st_gpu_pause_span *a = realloc(t->gpu_pauses, cap * sizeof *a);
        if (!a) return st_set_error(ST_ENOMEM, "st_gpu_resume: out of memory");
        t->gpu_pauses = a;
        t->gpu_pauses_cap = cap;
    }
    t->gpu_pauses[t->gpu_pauses_len++] = (st_gpu_pause_span){t->gpu_paused_since, now};
    t->gpu_paused_since = 0;
    return ST_OK;
}

/* Serializes st_gpu_pause, st_gpu_resume, the step sampler and the stop:
 * CUPTI is not called under gpu_lock, which its buffer callback takes.
 * Recording is on when neither the user (st_gpu_pause) nor the step sampler
 * (every_steps, on the writer thread at each step mark) has it off; CUPTI's
 * kinds are switched and a gpu_pauses row begun or ended only when that
 * combined state flips, so the rows never overlap. */
static pthread_mutex_t pause_mutex = PTHREAD_MUTEX_INITIALIZER;
static int user_paused;   /* under pause_mutex: st_gpu_pause without its st_gpu_resume */
static int sampler_off;   /* under pause_mutex: the step sampler is between recorded steps */

/* The combined state goes off (pause_mutex held). */
static void recording_off(st_trace *t)
{
    enable_kinds(&gpu_config, 0, 1);
    int64_t now = st_now_ns();
    pthread_mutex_lock(&t->gpu_lock);
    t->gpu_paused_since = now > 0 ? now : 1;
    pthread_mutex_unlock(&t->gpu_lock);
}

/* The combined state goes on (pause_mutex held); CUPTI's error, and then
 * the pause stays open. */
static int recording_on(st_trace *t)
{
    int rc = enable_kinds(&gpu_config, 1, 1);
    if (rc) return rc;
    int64_t now = st_now_ns();
    pthread_mutex_lock(&t->gpu_lock);
    rc = end_pause(t, now);
    pthread_mutex_unlock(&t->gpu_lock);
    return rc;
}

int st_gpu_pause(st_trace *t)
{
    pthread_mutex_lock(&pause_mutex);
    int rc = ST_OK;
    if (!t || !t->gpu_stop)
        rc = st_set_error(ST_ESTATE, "st_gpu_pause: GPU tracing is not on");
    else if (user_paused)
        rc = st_set_error(ST_ESTATE, "st_gpu_pause: GPU tracing is paused already");
    else {
        user_paused = 1;
        if (!sampler_off) recording_off(t);
    }
    pthread_mutex_unlock(&pause_mutex);
    return rc;
}

int st_gpu_resume(st_trace *t)
{
    pthread_mutex_lock(&pause_mutex);
    int rc = ST_OK;
    if (!t || !t->gpu_stop)
        rc = st_set_error(ST_ESTATE, "st_gpu_resume: GPU tracing is not on");
    else if (!user_paused)
        rc = st_set_error(ST_ESTATE, "st_gpu_resume: GPU tracing is not paused");
    else if (sampler_off)
        user_paused = 0; /* the sampler turns it on at its next recorded step */
    else if (!(rc = recording_on(t)))
        user_paused = 0;
    pthread_mutex_unlock(&pause_mutex);
    return rc;
}

/* The step sampler (every_steps > 1), called by the writer with each step
 * mark it stores: recording on from a mark k with k % every_steps == 0 to
 * the next mark. A CUPTI refusal to turn it back on leaves it off, as the
 * gpu_pauses row that stays open says. */
static void gpu_on_step(st_trace *t, uint64_t step)
{
    pthread_mutex_lock(&pause_mutex);
    if (t->gpu_stop && gpu_config.every_steps > 1) {
        int off = step % gpu_config.every_steps != 0;
        if (off != sampler_off) {
            if (!user_paused) {
                if (off)
                    recording_off(t);
                else if (recording_on(t))
                    off = 1;
            }
            sampler_off = off;
        }
    }
    pthread_mutex_unlock(&pause_mutex);
}

static void gpu_stop(st_trace *t)
{
    atomic_store(&t->gpu_on_step, NULL);
    pthread_mutex_lock(&pause_mutex);
    pthread_mutex_lock(&t->gpu_lock);
    end_pause(t, st_now_ns());
    pthread_mutex_unlock(&t->gpu_lock);
    cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    enable_kinds(&gpu_config, 0, 0);
    cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    pthread_mutex_lock(&gpu_mutex);
    atomic_store(&t->gpu_dropped, dropped_total);
    gpu_trace = NULL;
    for (size_t i = 0; i < names_cap; i++) free(names[i].value);
    free(names);
    names = NULL;
    names_cap = names_len = 0;
    memset(api_name_ids, 0, sizeof api_name_ids);
    n_contexts = 0;
    free(seen_tids);
    seen_tids = NULL;
    seen_cap = seen_len = 0;
    pthread_mutex_unlock(&gpu_mutex);
    t->gpu_stop = NULL;
    user_paused = sampler_off = 0;
    pthread_mutex_unlock(&pause_mutex);
}

int st_gpu_start(st_trace *t) { return st_gpu_start_with(t, NULL); }

int st_gpu_start_with(st_trace *t, const char *records)
{
    if (!t || !t->opt.enabled) return st_set_error(ST_ESTATE, "st_gpu_start: no trace is being written");
    if (t->gpu_stop || gpu_trace) return st_set_error(ST_ESTATE, "st_gpu_start: GPU tracing is already on");
    const char *given = records ? records : t->opt.gpu_records;
    const char *spec = given ? given : getenv("STAGETRACE_GPU_RECORDS");
    char err[400];
    st_gpu_config config;
    if (st_gpu_config_parse(spec && spec[0] ? spec : NULL, &config, err, sizeof err) != 0)
        return st_set_error(ST_EINVAL, "%s%s", given ? "" : "STAGETRACE_GPU_RECORDS: ", err);
#ifdef ST_CUPTI_DLOPEN
    int loaded = load_cupti();
    if (loaded) return loaded;
#endif
    gpu_config = config;
    buffer_bytes = (size_t)config.buffer_kb << 10;
    buffer_zeroed = 0;
    if (config.zeroed) {
        uint8_t one = 1;
        size_t one_size = sizeof one;
        if (!HAVE_FN(cuptiActivitySetAttribute) ||
            cuptiActivitySetAttribute(CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_BUFFER, &one_size, &one) != CUPTI_SUCCESS)
            return st_set_error(ST_EIO, "GPU records 'zeroed': this CUPTI does not take zeroed buffers");
        buffer_zeroed = 1;
    }
    CUPTI_CHECK(cuptiSetThreadIdType(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM));
    if (cuptiActivityRegisterTimestampCallback(trace_clock) != CUPTI_SUCCESS) {
        /* Older CUPTI: measure the offset between the two clocks once,
         * bracketing CUPTI's reading by two of ours. */
        uint64_t cupti_ns = 0;
        int64_t a = st_now_ns();
        CUPTI_CHECK(cuptiGetTimestamp(&cupti_ns));
        int64_t b = st_now_ns();
        clock_offset_ns = a + (b - a) / 2 - (int64_t)cupti_ns;
    } else {
        clock_offset_ns = 0;
    }
    pthread_mutex_lock(&gpu_mutex);
    gpu_trace = t;
    dropped_total = 0;
    pthread_mutex_unlock(&gpu_mutex);
    atomic_store(&t->gpu_dropped, 0);
    CUPTI_CHECK(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed));
    int rc = enable_kinds(&config, 1, 0);
    if (rc) return rc;
    pthread_mutex_lock(&t->gpu_lock);
    t->gpu_paused_since = 0;
    pthread_mutex_unlock(&t->gpu_lock);
    if (config.flush_ms) CUPTI_CHECK(cuptiActivityFlushPeriod(config.flush_ms));
    pthread_mutex_lock(&t->gpu_lock);
    st_gpu_config_format(&config, t->gpu_records, sizeof t->gpu_records);
    t->gpu_every_steps = config.every_steps;
    pthread_mutex_unlock(&t->gpu_lock);
    pthread_mutex_lock(&pause_mutex);
    user_paused = sampler_off = 0;
    t->gpu_stop = gpu_stop;
    pthread_mutex_unlock(&pause_mutex);
    if (config.every_steps > 1) atomic_store(&t->gpu_on_step, gpu_on_step);
    return ST_OK;
}

#endif
