/* nvtx_inject.c: a test NVTX tool (build/tests/libnvtx_inject.so). A process
 * started with NVTX_INJECTION64_PATH naming this library loads it on its
 * first NVTX call; InitializeInjectionNvtx2 then installs the functions below
 * in the process's NVTX function tables (modules CORE, CORE2 and CUDART),
 * so the tool sees every NVTX call the tracer makes, with no GPU and no
 * Nsight. Each call is appended, with the calling thread's id, to an
 * in-memory log guarded by a mutex; the log is written to the file named by
 * NVTX_INJECT_LOG when the process exits and whenever nvtx_inject_flush() is
 * called (the file is replaced as a whole, through a rename, so a reader
 * never sees half of it).
 * tests/test_nvtx.c reads it back. The tool hands out its own domain and
 * string handles (small integers) and resolves them to names itself.
 *
 * Log format, version 2: a first line "# nvtx_inject log v2", then one line
 * per call, in the order the calls took the mutex, fields separated by one
 * space. <tid> is the caller's gettid(). String fields are percent-encoded:
 * bytes outside 0x21..0x7e and '%' become %XX; a string that is exactly "-"
 * or "*" has that byte encoded; the empty string is a lone "%"; an absent
 * (NULL) string is "-". A <domain> field is the domain's name, "-" for the
 * default domain (non-domain calls, or a NULL handle), "*" for a handle the
 * tool never handed out or has destroyed.
 *
 *   init <tid>                                     InitializeInjectionNvtx2 ran
 *   initialize <tid>                               nvtxInitialize
 *   domain_create <tid> <handle> <name>
 *   domain_destroy <tid> <handle> <name>           name "*" when unknown
 *   register_string <tid> <domain> <handle> <string>
 *   name_category <tid> <domain> <category> <name>
 *   name_thread <tid> <os-tid-argument> <name>
 *   name_cuda_stream <tid> <stream> <name>         stream: the handle in hex, 0x0 for NULL
 *   name_cuda_event <tid> <event> <name>
 *   name_cuda_device <tid> <device> <name>
 *   push <tid> <domain> <level> <category> <color> <msgkind> <message> <payload>
 *   pop <tid> <domain> <level>
 *   mark <tid> <domain> <category> <color> <msgkind> <message> <payload>
 *   start <tid> <domain> <range-id> <category> <color> <msgkind> <message> <payload>
 *   end <tid> <domain> <range-id>
 *
 * <level> is the nesting level, per thread and domain, of the range pushed
 * or popped (0 = outermost); a pop with nothing open logs -1. <color> is
 * eight hex digits (AARRGGBB) for NVTX_COLOR_ARGB, "-" when no colour is
 * given, "t<type>:<hex>" for any other colour type. <msgkind> says how the
 * message came: "reg" (a registered string handle, resolved to its text),
 * "ascii", "wide" (converted to UTF-8), "none" (no message), "badreg" (a
 * string handle the tool never handed out; message "-"), "badattr" (NULL
 * attributes, or a size or version the tool does not know; then category
 * 0, colour "-", message "-"). <payload> is "-" when none is given (and for
 * the calls without attributes), else "<type>:<value>": "u64", "i64",
 * "u32", "i32" with the value in decimal, "f64", "f32" with it as %.17g,
 * "t<type>:<hex>" (the 64 payload bits) for a type the tool does not know.
 * (Version 1 had no <payload> field.)
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <wchar.h>

#define NVTX_INJECT_EXPORT __attribute__((visibility("default")))

NVTX_INJECT_EXPORT int nvtx_inject_flush(void);

#ifdef ST_HAVE_NVTX
/* Types and declarations only: a tool must not carry its own NVTX instance. */
#define NVTX_NO_IMPL
#include <nvtx3/nvToolsExt.h>

/* ---- the log ---- */

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static char **log_lines;
static size_t log_count, log_cap;

static unsigned long current_tid(void) { return (unsigned long)syscall(SYS_gettid); }

/* Appends one formatted line. Out of memory loses the line but keeps going:
 * the test then fails on a missing call, which is the honest outcome. */
static void log_append_locked(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void log_append_locked(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *line = NULL;
    int n = vasprintf(&line, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if (log_count == log_cap) {
        size_t cap = log_cap ? log_cap * 2 : 256;
        char **grown = realloc(log_lines, cap * sizeof *grown);
        if (!grown) {
            free(line);
            return;
        }
        log_lines = grown;
        log_cap = cap;
    }
    log_lines[log_count++] = line;
}

/* Percent-encodes s into out (see the format above). */
static void encode(char *out, size_t out_size, const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    if (!s) {
        snprintf(out, out_size, "-");
        return;
    }
    if (!*s) {
        snprintf(out, out_size, "%%");
        return;
    }
    int whole_is_special = (s[0] == '-' || s[0] == '*') && s[1] == 0;
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p && o + 4 < out_size; p++) {
        if (*p < 0x21 || *p > 0x7e || *p == '%' || whole_is_special) {
            out[o++] = '%';
            out[o++] = hex[*p >> 4];
            out[o++] = hex[*p & 15];
        } else {
            out[o++] = (char)*p;
        }
    }
    out[o] = 0;
}

/* Wide strings (UTF-32 on Linux) to UTF-8, for the W entry points. */
static char *wide_to_utf8(const wchar_t *w)
{
    if (!w) return NULL;
    size_t n = wcslen(w);
    char *out = malloc(n * 4 + 1), *o = out;
    if (!out) return NULL;
    for (size_t i = 0; i < n; i++) {
        uint32_t c = (uint32_t)w[i];
        if (c > 0x10FFFF) c = 0xFFFD;
        if (c < 0x80) {
            *o++ = (char)c;
        } else if (c < 0x800) {
            *o++ = (char)(0xC0 | (c >> 6));
            *o++ = (char)(0x80 | (c & 0x3F));
        } else if (c < 0x10000) {
            *o++ = (char)(0xE0 | (c >> 12));
            *o++ = (char)(0x80 | ((c >> 6) & 0x3F));
            *o++ = (char)(0x80 | (c & 0x3F));
        } else {
            *o++ = (char)(0xF0 | (c >> 18));
            *o++ = (char)(0x80 | ((c >> 12) & 0x3F));
            *o++ = (char)(0x80 | ((c >> 6) & 0x3F));
            *o++ = (char)(0x80 | (c & 0x3F));
        }
    }
    *o = 0;
    return out;
}

/* ---- handles the tool hands out ---- */

#define MAX_DOMAINS 256
#define ENC_MAX 4096 /* an encoded string field; longer ones are cut */

typedef struct domain_entry {
    char *name;
    int alive;
} domain_entry;

static domain_entry domains[MAX_DOMAINS]; /* handle k is domains[k - 1] */
static size_t n_domains;

typedef struct string_entry {
    char *text;
    uintptr_t domain; /* 0: default domain */
} string_entry;

static string_entry *strings; /* handle k is strings[k - 1] */
static size_t n_strings, cap_strings;

/* Nesting levels of push/pop per (thread, domain). */
typedef struct depth_entry {
    unsigned long tid;
    uintptr_t domain;
    int depth;
} depth_entry;

static depth_entry *depths;
static size_t n_depths, cap_depths;

static uint64_t next_range_id = 1;

/* The domain field for a handle, encoded into out (lock held). */
static void domain_field_locked(char *out, size_t out_size, nvtxDomainHandle_t handle)
{
    uintptr_t k = (uintptr_t)handle;
    if (k == 0) {
        snprintf(out, out_size, "-");
    } else if (k > n_domains || !domains[k - 1].alive) {
        snprintf(out, out_size, "*");
    } else {
        encode(out, out_size, domains[k - 1].name);
    }
}

static int *depth_slot_locked(unsigned long tid, uintptr_t domain)
{
    for (size_t i = 0; i < n_depths; i++)
        if (depths[i].tid == tid && depths[i].domain == domain) return &depths[i].depth;
    if (n_depths == cap_depths) {
        size_t cap = cap_depths ? cap_depths * 2 : 16;
        depth_entry *grown = realloc(depths, cap * sizeof *grown);
        if (!grown) return NULL;
        depths = grown;
        cap_depths = cap;
    }
    depths[n_depths] = (depth_entry){.tid = tid, .domain = domain, .depth = 0};
    return &depths[n_depths++].depth;
}

/* category, colour, message kind and message of an attribute struct, as
 * the log's fields (lock held). */
static void attr_fields_locked(char *out, size_t out_size, const nvtxEventAttributes_t *a)
{
    if (!a || a->size < NVTX_EVENT_ATTRIB_STRUCT_SIZE || a->version < 2 || a->version > NVTX_VERSION) {
        snprintf(out, out_size, "0 - badattr - -");
        return;
    }
    char color[32];
    if (a->colorType == NVTX_COLOR_UNKNOWN)
        snprintf(color, sizeof color, "-");
    else if (a->colorType == NVTX_COLOR_ARGB)
        snprintf(color, sizeof color, "%08x", (unsigned)a->color);
    else
        snprintf(color, sizeof color, "t%d:%08x", (int)a->colorType, (unsigned)a->color);

    static char message[ENC_MAX];
    const char *kind = "none";
    message[0] = '-';
    message[1] = 0;
    switch (a->messageType) {
    case NVTX_MESSAGE_TYPE_ASCII:
        kind = "ascii";
        encode(message, sizeof message, a->message.ascii);
        break;
    case NVTX_MESSAGE_TYPE_UNICODE: {
        kind = "wide";
        char *utf8 = wide_to_utf8(a->message.unicode);
        encode(message, sizeof message, utf8);
        free(utf8);
        break;
    }
    case NVTX_MESSAGE_TYPE_REGISTERED: {
        uintptr_t k = (uintptr_t)a->message.registered;
        if (k == 0 || k > n_strings) {
            kind = "badreg";
        } else {
            kind = "reg";
            encode(message, sizeof message, strings[k - 1].text);
        }
        break;
    }
    default:
        break;
    }
    char payload[64];
    switch (a->payloadType) {
    case NVTX_PAYLOAD_UNKNOWN: snprintf(payload, sizeof payload, "-"); break;
    case NVTX_PAYLOAD_TYPE_UNSIGNED_INT64:
        snprintf(payload, sizeof payload, "u64:%llu", (unsigned long long)a->payload.ullValue);
        break;
    case NVTX_PAYLOAD_TYPE_INT64: snprintf(payload, sizeof payload, "i64:%lld", (long long)a->payload.llValue); break;
    case NVTX_PAYLOAD_TYPE_UNSIGNED_INT32: snprintf(payload, sizeof payload, "u32:%u", (unsigned)a->payload.uiValue); break;
    case NVTX_PAYLOAD_TYPE_INT32: snprintf(payload, sizeof payload, "i32:%d", (int)a->payload.iValue); break;
    case NVTX_PAYLOAD_TYPE_DOUBLE: snprintf(payload, sizeof payload, "f64:%.17g", a->payload.dValue); break;
    case NVTX_PAYLOAD_TYPE_FLOAT: snprintf(payload, sizeof payload, "f32:%.17g", (double)a->payload.fValue); break;
    default:
        snprintf(payload, sizeof payload, "t%d:%016llx", (int)a->payloadType,
                 (unsigned long long)a->payload.ullValue);
        break;
    }
    snprintf(out, out_size, "%u %s %s %s %s", (unsigned)a->category, color, kind, message, payload);
}

/* ---- the NVTX entry points the tool implements ---- */

static char field_a[ENC_MAX], field_b[ENC_MAX + 128]; /* used under log_lock */

static void log_push(nvtxDomainHandle_t domain, const nvtxEventAttributes_t *a, const char *kind_override,
                     const char *text)
{
    unsigned long tid = current_tid();
    pthread_mutex_lock(&log_lock);
    int *depth = depth_slot_locked(tid, (uintptr_t)domain);
    int level = depth ? (*depth)++ : -2;
    domain_field_locked(field_a, sizeof field_a, domain);
    if (kind_override) {
        char enc[ENC_MAX];
        encode(enc, sizeof enc, text);
        snprintf(field_b, sizeof field_b, "0 - %s %s -", kind_override, enc);
    } else {
        attr_fields_locked(field_b, sizeof field_b, a);
    }
    log_append_locked("push %lu %s %d %s", tid, field_a, level, field_b);
    pthread_mutex_unlock(&log_lock);
}

static int log_pop(nvtxDomainHandle_t domain)
{
    unsigned long tid = current_tid();
    pthread_mutex_lock(&log_lock);
    int *depth = depth_slot_locked(tid, (uintptr_t)domain);
    int level = -1;
    if (depth && *depth > 0) level = --*depth;
    domain_field_locked(field_a, sizeof field_a, domain);
    log_append_locked("pop %lu %s %d", tid, field_a, level);
    pthread_mutex_unlock(&log_lock);
    return level < 0 ? -1 : level;
}

static void log_mark(nvtxDomainHandle_t domain, const nvtxEventAttributes_t *a, const char *kind_override,
                     const char *text)
{
    unsigned long tid = current_tid();
    pthread_mutex_lock(&log_lock);
    domain_field_locked(field_a, sizeof field_a, domain);
    if (kind_override) {
        char enc[ENC_MAX];
        encode(enc, sizeof enc, text);
        snprintf(field_b, sizeof field_b, "0 - %s %s -", kind_override, enc);
    } else {
        attr_fields_locked(field_b, sizeof field_b, a);
    }
    log_append_locked("mark %lu %s %s", tid, field_a, field_b);
    pthread_mutex_unlock(&log_lock);
}

static nvtxRangeId_t log_start(nvtxDomainHandle_t domain, const nvtxEventAttributes_t *a,
                               const char *kind_override, const char *text)
{
    unsigned long tid = current_tid();
    pthread_mutex_lock(&log_lock);
    uint64_t id = next_range_id++;
    domain_field_locked(field_a, sizeof field_a, domain);
    if (kind_override) {
        char enc[ENC_MAX];
        encode(enc, sizeof enc, text);
        snprintf(field_b, sizeof field_b, "0 - %s %s -", kind_override, enc);
    } else {
        attr_fields_locked(field_b, sizeof field_b, a);
    }
    log_append_locked("start %lu %s %llu %s", tid, field_a, (unsigned long long)id, field_b);
    pthread_mutex_unlock(&log_lock);
    return id;
}

static void log_end(nvtxDomainHandle_t domain, nvtxRangeId_t id)
{
    unsigned long tid = current_tid();
    pthread_mutex_lock(&log_lock);
    domain_field_locked(field_a, sizeof field_a, domain);
    log_append_locked("end %lu %s %llu", tid, field_a, (unsigned long long)id);
    pthread_mutex_unlock(&log_lock);
}

static nvtxDomainHandle_t domain_create(const char *name)
{
    unsigned long tid = current_tid();
    pthread_mutex_lock(&log_lock);
    uintptr_t handle = 0;
    if (n_domains < MAX_DOMAINS) {
        domains[n_domains].name = strdup(name ? name : "");
        domains[n_domains].alive = 1;
        handle = ++n_domains;
    }
    encode(field_a, sizeof field_a, name);
    log_append_locked("domain_create %lu %lu %s", tid, (unsigned long)handle, field_a);
    pthread_mutex_unlock(&log_lock);
    return (nvtxDomainHandle_t)handle;
}

static void domain_name_category(nvtxDomainHandle_t domain, uint32_t category, const char *name)
{
    unsigned long tid = current_tid();
    pthread_mutex_lock(&log_lock);
    domain_field_locked(field_a, sizeof field_a, domain);
    encode(field_b, sizeof field_b, name);
    log_append_locked("name_category %lu %s %u %s", tid, field_a, (unsigned)category, field_b);
    pthread_mutex_unlock(&log_lock);
}

static nvtxStringHandle_t register_string(nvtxDomainHandle_t domain, const char *text)
{
    unsigned long tid = current_tid();
    pthread_mutex_lock(&log_lock);
    uintptr_t handle = 0;
    if (n_strings == cap_strings) {
        size_t cap = cap_strings ? cap_strings * 2 : 64;
        string_entry *grown = realloc(strings, cap * sizeof *grown);
        if (grown) {
            strings = grown;
            cap_strings = cap;
        }
    }
    if (n_strings < cap_strings) {
        strings[n_strings].text = strdup(text ? text : "");
        strings[n_strings].domain = (uintptr_t)domain;
        handle = ++n_strings;
    }
    domain_field_locked(field_a, sizeof field_a, domain);
    encode(field_b, sizeof field_b, text);
    log_append_locked("register_string %lu %s %lu %s", tid, field_a, (unsigned long)handle, field_b);
    pthread_mutex_unlock(&log_lock);
    return (nvtxStringHandle_t)handle;
}

static void name_os_thread(uint32_t os_tid, const char *name)
{
    unsigned long tid = current_tid();
    pthread_mutex_lock(&log_lock);
    encode(field_a, sizeof field_a, name);
    log_append_locked("name_thread %lu %u %s", tid, (unsigned)os_tid, field_a);
    pthread_mutex_unlock(&log_lock);
}

static void name_cuda_object(const char *what, const char *handle, const char *name)
{
    unsigned long tid = current_tid();
    pthread_mutex_lock(&log_lock);
    encode(field_a, sizeof field_a, name);
    log_append_locked("name_cuda_%s %lu %s %s", what, tid, handle, field_a);
    pthread_mutex_unlock(&log_lock);
}

static void name_cuda_handle(const char *what, const void *handle, const char *name)
{
    char hex[32];
    snprintf(hex, sizeof hex, "0x%lx", (unsigned long)(uintptr_t)handle);
    name_cuda_object(what, hex, name);
}

/* CORE module */
static void NVTX_API tool_MarkEx(const nvtxEventAttributes_t *a) { log_mark(NULL, a, NULL, NULL); }
static void NVTX_API tool_MarkA(const char *m) { log_mark(NULL, NULL, "ascii", m); }
static void NVTX_API tool_MarkW(const wchar_t *m)
{
    char *s = wide_to_utf8(m);
    log_mark(NULL, NULL, "wide", s);
    free(s);
}
static nvtxRangeId_t NVTX_API tool_RangeStartEx(const nvtxEventAttributes_t *a)
{
    return log_start(NULL, a, NULL, NULL);
}
static nvtxRangeId_t NVTX_API tool_RangeStartA(const char *m) { return log_start(NULL, NULL, "ascii", m); }
static nvtxRangeId_t NVTX_API tool_RangeStartW(const wchar_t *m)
{
    char *s = wide_to_utf8(m);
    nvtxRangeId_t id = log_start(NULL, NULL, "wide", s);
    free(s);
    return id;
}
static void NVTX_API tool_RangeEnd(nvtxRangeId_t id) { log_end(NULL, id); }
static int NVTX_API tool_RangePushEx(const nvtxEventAttributes_t *a)
{
    log_push(NULL, a, NULL, NULL);
    return 0;
}
static int NVTX_API tool_RangePushA(const char *m)
{
    log_push(NULL, NULL, "ascii", m);
    return 0;
}
static int NVTX_API tool_RangePushW(const wchar_t *m)
{
    char *s = wide_to_utf8(m);
    log_push(NULL, NULL, "wide", s);
    free(s);
    return 0;
}
static int NVTX_API tool_RangePop(void) { return log_pop(NULL); }
static void NVTX_API tool_NameCategoryA(uint32_t category, const char *name)
{
    domain_name_category(NULL, category, name);
}
static void NVTX_API tool_NameCategoryW(uint32_t category, const wchar_t *name)
{
    char *s = wide_to_utf8(name);
    domain_name_category(NULL, category, s);
    free(s);
}
static void NVTX_API tool_NameOsThreadA(uint32_t os_tid, const char *name) { name_os_thread(os_tid, name); }
static void NVTX_API tool_NameOsThreadW(uint32_t os_tid, const wchar_t *name)
{
    char *s = wide_to_utf8(name);
    name_os_thread(os_tid, s);
    free(s);
}

/* CORE2 module */
static void NVTX_API tool_DomainMarkEx(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a)
{
    log_mark(d, a, NULL, NULL);
}
static nvtxRangeId_t NVTX_API tool_DomainRangeStartEx(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a)
{
    return log_start(d, a, NULL, NULL);
}
static void NVTX_API tool_DomainRangeEnd(nvtxDomainHandle_t d, nvtxRangeId_t id) { log_end(d, id); }
static int NVTX_API tool_DomainRangePushEx(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a)
{
    log_push(d, a, NULL, NULL);
    return 0;
}
static int NVTX_API tool_DomainRangePop(nvtxDomainHandle_t d) { return log_pop(d); }
static void NVTX_API tool_DomainNameCategoryA(nvtxDomainHandle_t d, uint32_t category, const char *name)
{
    domain_name_category(d, category, name);
}
static void NVTX_API tool_DomainNameCategoryW(nvtxDomainHandle_t d, uint32_t category, const wchar_t *name)
{
    char *s = wide_to_utf8(name);
    domain_name_category(d, category, s);
    free(s);
}
static nvtxStringHandle_t NVTX_API tool_DomainRegisterStringA(nvtxDomainHandle_t d, const char *text)
{
    return register_string(d, text);
}
static nvtxStringHandle_t NVTX_API tool_DomainRegisterStringW(nvtxDomainHandle_t d, const wchar_t *text)
{
    char *s = wide_to_utf8(text);
    nvtxStringHandle_t h = register_string(d, s);
    free(s);
    return h;
}
static nvtxDomainHandle_t NVTX_API tool_DomainCreateA(const char *name) { return domain_create(name); }
static nvtxDomainHandle_t NVTX_API tool_DomainCreateW(const wchar_t *name)
{
    char *s = wide_to_utf8(name);
    nvtxDomainHandle_t h = domain_create(s);
    free(s);
    return h;
}
static void NVTX_API tool_DomainDestroy(nvtxDomainHandle_t d)
{
    unsigned long tid = current_tid();
    pthread_mutex_lock(&log_lock);
    domain_field_locked(field_a, sizeof field_a, d);
    uintptr_t k = (uintptr_t)d;
    if (k >= 1 && k <= n_domains) domains[k - 1].alive = 0;
    log_append_locked("domain_destroy %lu %lu %s", tid, (unsigned long)k, field_a);
    pthread_mutex_unlock(&log_lock);
}
static void NVTX_API tool_Initialize(const void *reserved)
{
    (void)reserved;
    pthread_mutex_lock(&log_lock);
    log_append_locked("initialize %lu", current_tid());
    pthread_mutex_unlock(&log_lock);
}

/* CUDART module, with NVTX's stand-in types (no CUDA headers needed) */
static void NVTX_API tool_NameCudaDeviceA(int device, const char *name)
{
    char dev[16];
    snprintf(dev, sizeof dev, "%d", device);
    name_cuda_object("device", dev, name);
}
static void NVTX_API tool_NameCudaDeviceW(int device, const wchar_t *name)
{
    char *s = wide_to_utf8(name);
    tool_NameCudaDeviceA(device, s);
    free(s);
}
static void NVTX_API tool_NameCudaStreamA(nvtx_cudaStream_t stream, const char *name)
{
    name_cuda_handle("stream", stream, name);
}
static void NVTX_API tool_NameCudaStreamW(nvtx_cudaStream_t stream, const wchar_t *name)
{
    char *s = wide_to_utf8(name);
    name_cuda_handle("stream", stream, s);
    free(s);
}
static void NVTX_API tool_NameCudaEventA(nvtx_cudaEvent_t event, const char *name)
{
    name_cuda_handle("event", event, name);
}
static void NVTX_API tool_NameCudaEventW(nvtx_cudaEvent_t event, const wchar_t *name)
{
    char *s = wide_to_utf8(name);
    name_cuda_handle("event", event, s);
    free(s);
}

/* ---- attaching to the process's NVTX instance ---- */

typedef struct slot {
    unsigned id;
    NvtxFunctionPointer fn;
} slot;

#define SLOT(cbid, f) {cbid, (NvtxFunctionPointer)(f)}

static const slot core_slots[] = {
    SLOT(NVTX_CBID_CORE_MarkEx, tool_MarkEx),
    SLOT(NVTX_CBID_CORE_MarkA, tool_MarkA),
    SLOT(NVTX_CBID_CORE_MarkW, tool_MarkW),
    SLOT(NVTX_CBID_CORE_RangeStartEx, tool_RangeStartEx),
    SLOT(NVTX_CBID_CORE_RangeStartA, tool_RangeStartA),
    SLOT(NVTX_CBID_CORE_RangeStartW, tool_RangeStartW),
    SLOT(NVTX_CBID_CORE_RangeEnd, tool_RangeEnd),
    SLOT(NVTX_CBID_CORE_RangePushEx, tool_RangePushEx),
    SLOT(NVTX_CBID_CORE_RangePushA, tool_RangePushA),
    SLOT(NVTX_CBID_CORE_RangePushW, tool_RangePushW),
    SLOT(NVTX_CBID_CORE_RangePop, tool_RangePop),
    SLOT(NVTX_CBID_CORE_NameCategoryA, tool_NameCategoryA),
    SLOT(NVTX_CBID_CORE_NameCategoryW, tool_NameCategoryW),
    SLOT(NVTX_CBID_CORE_NameOsThreadA, tool_NameOsThreadA),
    SLOT(NVTX_CBID_CORE_NameOsThreadW, tool_NameOsThreadW),
};

static const slot core2_slots[] = {
    SLOT(NVTX_CBID_CORE2_DomainMarkEx, tool_DomainMarkEx),
    SLOT(NVTX_CBID_CORE2_DomainRangeStartEx, tool_DomainRangeStartEx),
    SLOT(NVTX_CBID_CORE2_DomainRangeEnd, tool_DomainRangeEnd),
    SLOT(NVTX_CBID_CORE2_DomainRangePushEx, tool_DomainRangePushEx),
    SLOT(NVTX_CBID_CORE2_DomainRangePop, tool_DomainRangePop),
    SLOT(NVTX_CBID_CORE2_DomainNameCategoryA, tool_DomainNameCategoryA),
    SLOT(NVTX_CBID_CORE2_DomainNameCategoryW, tool_DomainNameCategoryW),
    SLOT(NVTX_CBID_CORE2_DomainRegisterStringA, tool_DomainRegisterStringA),
    SLOT(NVTX_CBID_CORE2_DomainRegisterStringW, tool_DomainRegisterStringW),
    SLOT(NVTX_CBID_CORE2_DomainCreateA, tool_DomainCreateA),
    SLOT(NVTX_CBID_CORE2_DomainCreateW, tool_DomainCreateW),
    SLOT(NVTX_CBID_CORE2_DomainDestroy, tool_DomainDestroy),
    SLOT(NVTX_CBID_CORE2_Initialize, tool_Initialize),
};

static const slot cudart_slots[] = {
    SLOT(NVTX_CBID_CUDART_NameCudaDeviceA, tool_NameCudaDeviceA),
    SLOT(NVTX_CBID_CUDART_NameCudaDeviceW, tool_NameCudaDeviceW),
    SLOT(NVTX_CBID_CUDART_NameCudaStreamA, tool_NameCudaStreamA),
    SLOT(NVTX_CBID_CUDART_NameCudaStreamW, tool_NameCudaStreamW),
    SLOT(NVTX_CBID_CUDART_NameCudaEventA, tool_NameCudaEventA),
    SLOT(NVTX_CBID_CUDART_NameCudaEventW, tool_NameCudaEventW),
};

/* Writes each slot's function into the module's table. The table is an
 * array of pointers to the instance's function-pointer variables; out_size
 * counts its entries after the unused entry 0. */
static int install(const NvtxExportTableCallbacks *etbl, NvtxCallbackModule module, const slot *slots,
                   size_t n_slots)
{
    NvtxFunctionTable table = NULL;
    unsigned int size = 0;
    if (!etbl->GetModuleFunctionTable(module, &table, &size) || !table) return 0;
    for (size_t i = 0; i < n_slots; i++) {
        if (slots[i].id >= size || !table[slots[i].id]) return 0;
        *table[slots[i].id] = slots[i].fn;
    }
    return 1;
}

NVTX_INJECT_EXPORT int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_export_table)
{
    if (!get_export_table) return 0;
    const NvtxExportTableCallbacks *etbl = get_export_table(NVTX_ETID_CALLBACKS);
    if (!etbl || etbl->struct_size < sizeof(NvtxExportTableCallbacks) || !etbl->GetModuleFunctionTable)
        return 0;
    if (!install(etbl, NVTX_CB_MODULE_CORE, core_slots, sizeof core_slots / sizeof core_slots[0]) ||
        !install(etbl, NVTX_CB_MODULE_CORE2, core2_slots, sizeof core2_slots / sizeof core2_slots[0]) ||
        !install(etbl, NVTX_CB_MODULE_CUDART, cudart_slots, sizeof cudart_slots / sizeof cudart_slots[0]))
        return 0;
    pthread_mutex_lock(&log_lock);
    log_append_locked("init %lu", current_tid());
    pthread_mutex_unlock(&log_lock);
    return 1;
}

/* ---- writing the log ---- */

int nvtx_inject_flush(void)
{
    const char *path = getenv("NVTX_INJECT_LOG");
    if (!path || !*path) return 0;
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp) return -1;
    FILE *f = fopen(tmp, "w");
    if (!f) return -1;
    pthread_mutex_lock(&log_lock);
    int bad = fputs("# nvtx_inject log v2\n", f) < 0;
    for (size_t i = 0; i < log_count && !bad; i++) bad = fprintf(f, "%s\n", log_lines[i]) < 0;
    pthread_mutex_unlock(&log_lock);
    if (fclose(f) != 0) bad = 1;
    if (bad || rename(tmp, path) != 0) {
        unlink(tmp);
        return -1;
    }
    return 0;
}

__attribute__((destructor)) static void write_log_at_exit(void)
{
    int saved = errno;
    if (nvtx_inject_flush() != 0) fprintf(stderr, "nvtx_inject: cannot write %s\n", getenv("NVTX_INJECT_LOG"));
    errno = saved;
}

#else /* built without the NVTX headers: nothing to attach to */

int nvtx_inject_flush(void) { return 0; }

#endif
