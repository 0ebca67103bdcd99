/* arena.c: a bump allocator over one caller-owned buffer. The trainer carves activations,
 * gradients and scratch for one step out of it and resets to a mark afterwards, so the kernels
 * themselves never allocate. */
#include <stdint.h>
#include <string.h>

#include "kernels.h"

#define K_ARENA_ALIGN 64u

void k_arena_init(k_arena *arena, void *buffer, size_t capacity_bytes)
{
    arena->base = buffer;
    arena->capacity_bytes = buffer ? capacity_bytes : 0;
    arena->used_bytes = 0;
}

void *k_arena_alloc(k_arena *arena, size_t bytes)
{
    if (!arena || !arena->base)
        return NULL;
    uintptr_t at = (uintptr_t)(arena->base + arena->used_bytes);
    size_t pad = (size_t)((K_ARENA_ALIGN - at % K_ARENA_ALIGN) % K_ARENA_ALIGN);
    size_t left = arena->capacity_bytes - arena->used_bytes;
    if (pad > left || bytes > left - pad)
        return NULL;
    void *p = arena->base + arena->used_bytes + pad;
    arena->used_bytes += pad + bytes;
    return p;
}

float *k_arena_floats_zeroed(k_arena *arena, size_t count)
{
    if (count > SIZE_MAX / sizeof(float))
        return NULL;
    float *p = k_arena_alloc(arena, count * sizeof(float));
    if (p && count)
        memset(p, 0, count * sizeof(float));
    return p;
}

size_t k_arena_mark(const k_arena *arena)
{
    return arena->used_bytes;
}

void k_arena_reset(k_arena *arena, size_t mark)
{
    if (mark <= arena->used_bytes)
        arena->used_bytes = mark;
}
