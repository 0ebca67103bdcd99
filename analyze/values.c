/* values.c: decimal numbers as commands and traces give them, and the hash of
 * names for the analyzer's tables: the leaf that options (args.c),
 * selections (select.c), inputs (inputs.c) and traces (trace.c) share, so
 * that none of them calls another for a number.
 */
#include <errno.h>
#include <stdlib.h>

#include "analyze.h"

uint64_t an_hash_name(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

int an_parse_u64(const char *s, uint64_t *out)
{
    if (!s || *s < '0' || *s > '9') return -1;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end) return -1;
    *out = v;
    return 0;
}

/* As meta holds them: strtoll's syntax, the whole string. */
int an_parse_i64(const char *s, int64_t *out)
{
    if (!s || !*s) return -1;
    errno = 0;
    char *end;
    long long v = strtoll(s, &end, 10);
    if (errno || *end) return -1;
    *out = v;
    return 0;
}
