/* nvtx.c: the NVTX side of every range. One domain per program, one
 * registered string, category and colour per stage (attributes built once at
 * registration, so a push is one call with a prebuilt struct), OS threads
 * and CUDA streams named. Compiled to no-ops without the NVTX headers. NVTX
 * is header-only: with no tool attached each call returns at once; with
 * Nsight Systems (or any library named by NVTX_INJECTION64_PATH) attached,
 * the tool sees the same ranges as the trace, and each step mark as an NVTX
 * mark. */
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "st_internal.h"
#include "st_palette.h"

int st_nvtx_on;

#ifdef ST_HAVE_NVTX
#include <nvtx3/nvToolsExt.h>
#ifdef ST_HAVE_CUDA_HEADERS
#include <nvtx3/nvToolsExtCudaRt.h>
#endif

static nvtxDomainHandle_t domain;
static nvtxEventAttributes_t attrs[ST_MAX_STAGES];

/* Colours from the shared palette (st_palette.h): the i-th stage of a kind
 * takes the kind's i-th colour, as st_reader_stage_colours (palette.c)
 * gives them back to readers and the HTML report, so colours stay
 * stable across runs of one program. Stages register under the trace's
 * lock, so the per-kind counts need none of their own. */
static uint32_t kind_count[ST_KIND_COUNT];

void st_nvtx_init(const char *domain_name)
{
    domain = nvtxDomainCreateA(domain_name);
    memset(kind_count, 0, sizeof kind_count); /* a new trace numbers its stages from 0 */
    st_nvtx_on = 1;
}

void st_nvtx_stage(uint32_t stage, const char *name, st_kind kind)
{
    if (!st_nvtx_on || stage >= ST_MAX_STAGES) return;
    uint32_t k = (unsigned)kind < ST_KIND_COUNT ? (uint32_t)kind : 0;
    nvtxEventAttributes_t a;
    memset(&a, 0, sizeof a);
    a.version = NVTX_VERSION;
    a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    a.category = stage + 1;
    a.colorType = NVTX_COLOR_ARGB;
    a.color = 0xFF000000u | st_palette_rgb((st_kind)k, kind_count[k]++);
    a.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
    a.message.registered = nvtxDomainRegisterStringA(domain, name);
    nvtxDomainNameCategoryA(domain, stage + 1, name);
    attrs[stage] = a;
}

void st_nvtx_thread(const char *name)
{
    if (!st_nvtx_on) return;
    nvtxNameOsThreadA((uint32_t)syscall(SYS_gettid), name);
}

void st_nvtx_push(uint32_t stage, int registered)
{
    /* Unregistered ids still push (so pops balance), with empty attributes. */
    static const nvtxEventAttributes_t unknown = {
        .version = NVTX_VERSION, .size = NVTX_EVENT_ATTRIB_STRUCT_SIZE};
    nvtxDomainRangePushEx(domain, registered ? &attrs[stage] : &unknown);
}

void st_nvtx_pop(void)
{
    nvtxDomainRangePop(domain);
}

/* A step mark as an NVTX mark: message "step <step>" in decimal, written by
 * hand (no snprintf: no locale, no format parsing), the tokens as an
 * unsigned 64-bit payload; no category, no colour. Steps come once per
 * training step, so the text is built on every call, tool or no tool. */
void st_nvtx_step(uint64_t step, uint64_t tokens)
{
    char text[sizeof "step " + 20]; /* 20 digits: UINT64_MAX */
    char digits[20];
    int n = 0;
    do {
        digits[n++] = (char)('0' + step % 10);
        step /= 10;
    } while (step);
    memcpy(text, "step ", 5);
    for (int i = 0; i < n; i++) text[5 + i] = digits[n - 1 - i];
    text[5 + n] = 0;
    nvtxEventAttributes_t a;
    memset(&a, 0, sizeof a);
    a.version = NVTX_VERSION;
    a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    a.payloadType = NVTX_PAYLOAD_TYPE_UNSIGNED_INT64;
    a.payload.ullValue = tokens;
    a.messageType = NVTX_MESSAGE_TYPE_ASCII;
    a.message.ascii = text;
    nvtxDomainMarkEx(domain, &a);
}

void st_nvtx_shutdown(void)
{
    st_nvtx_on = 0;
    if (domain) nvtxDomainDestroy(domain);
    domain = NULL;
}

void st_name_stream(void *cuda_stream, const char *name)
{
#ifdef ST_HAVE_CUDA_HEADERS
    if (st_nvtx_on) nvtxNameCudaStreamA((cudaStream_t)cuda_stream, name);
#else
    (void)cuda_stream;
    (void)name;
#endif
}

#else /* no NVTX headers */

void st_nvtx_init(const char *domain_name) { (void)domain_name; }
void st_nvtx_stage(uint32_t stage, const char *name, st_kind kind) { (void)stage; (void)name; (void)kind; }
void st_nvtx_thread(const char *name) { (void)name; }
void st_nvtx_push(uint32_t stage, int registered) { (void)stage; (void)registered; }
void st_nvtx_pop(void) {}
void st_nvtx_step(uint64_t step, uint64_t tokens) { (void)step; (void)tokens; }
void st_nvtx_shutdown(void) {}
void st_name_stream(void *cuda_stream, const char *name) { (void)cuda_stream; (void)name; }

#endif
