/* demangle.c: an_demangle (demangle.h), over libstdc++'s __cxa_demangle
 * (the C++ ABI's demangler, which c++filt also uses), with a cache: a
 * trace names a few hundred kernels and functions, printed millions of
 * times (every kernel record of export --chrome), so each distinct name is
 * demangled once. The cache is an open-addressing table of (raw, readable)
 * pairs keyed by the raw string's content, under one mutex; it only grows,
 * bounded by the distinct names of the traces read.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "analyze.h"
#include "demangle.h"

/* libstdc++ (cxxabi.h, extern "C"): a malloc'd readable name, or NULL with
 * *status -1 (out of memory), -2 (not a mangled name), -3 (bad argument). */
char *__cxa_demangle(const char *mangled, char *buf, size_t *len, int *status);

typedef struct entry {
    char *raw;
    char *readable; /* NULL: the name does not demangle (shown as it is) */
} entry;

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static entry *cache;
static size_t cache_cap, cache_len;

int an_demangle_is_mangled(const char *name) { return name && name[0] == '_' && name[1] == 'Z'; }

static int cache_grow(void)
{
    size_t cap = cache_cap ? cache_cap * 2 : 256;
    entry *t = calloc(cap, sizeof *t);
    if (!t) return -1;
    for (size_t i = 0; i < cache_cap; i++) {
        if (!cache[i].raw) continue;
        size_t h = an_hash_name(cache[i].raw) & (cap - 1);
        while (t[h].raw) h = (h + 1) & (cap - 1);
        t[h] = cache[i];
    }
    free(cache);
    cache = t;
    cache_cap = cap;
    return 0;
}

const char *an_demangle(const char *name)
{
    if (!an_demangle_is_mangled(name)) return name;
    const char *out = name;
    pthread_mutex_lock(&cache_lock);
    if (cache_len * 2 >= cache_cap && cache_grow() != 0) goto done; /* no memory: the raw name */
    size_t h = an_hash_name(name) & (cache_cap - 1);
    while (cache[h].raw && strcmp(cache[h].raw, name) != 0) h = (h + 1) & (cache_cap - 1);
    if (!cache[h].raw) {
        int status = 0;
        char *readable = __cxa_demangle(name, NULL, NULL, &status);
        char *raw = strdup(name);
        if (!raw) {
            free(readable);
            goto done;
        }
        cache[h] = (entry){raw, status == 0 ? readable : NULL};
        if (status != 0) free(readable);
        cache_len++;
    }
    if (cache[h].readable) out = cache[h].readable;
done:
    pthread_mutex_unlock(&cache_lock);
    return out;
}

void an_demangle_reset(void)
{
    pthread_mutex_lock(&cache_lock);
    for (size_t i = 0; i < cache_cap; i++) {
        free(cache[i].raw);
        free(cache[i].readable);
    }
    free(cache);
    cache = NULL;
    cache_cap = cache_len = 0;
    pthread_mutex_unlock(&cache_lock);
}
