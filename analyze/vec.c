/* vec.c: a growable array of fixed-size items (an_vec, analyze.h), for the
 * per-thread lists the CPU analyses build while they read records (switches,
 * self-time pieces, name indices). Doubling growth from 256 items. */
#include <stdlib.h>

#include "analyze.h"

void *an_vec_push(an_vec *x, size_t size)
{
    if (x->n == x->cap) {
        size_t cap = x->cap ? x->cap * 2 : 256;
        void *v = realloc(x->v, cap * size);
        if (!v) return NULL;
        x->v = v;
        x->cap = cap;
    }
    return (char *)x->v + size * x->n++;
}
