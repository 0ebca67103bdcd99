/* rng.h: the trainer's deterministic random numbers (splitmix64). Weights, synthetic data and
 * anchor positions all derive from --seed through these, so a run is reproducible. */
#ifndef TR_RNG_H
#define TR_RNG_H

#include <math.h>
#include <stdint.h>

static inline uint64_t tr_rng_next(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* A state derived from a seed and a stream label, so that streams do not overlap. */
static inline uint64_t tr_rng_stream(uint64_t seed, uint64_t label)
{
    uint64_t s = seed ^ (label * 0xD1B54A32D192ED03ull);
    return tr_rng_next(&s);
}

/* Uniform in [0, 1). */
static inline double tr_rng_uniform(uint64_t *state)
{
    return (double)(tr_rng_next(state) >> 11) * (1.0 / 9007199254740992.0);
}

/* Uniform integer in [0, n). */
static inline uint32_t tr_rng_below(uint64_t *state, uint32_t n)
{
    return (uint32_t)(((tr_rng_next(state) >> 32) * (uint64_t)n) >> 32);
}

/* Standard normal (Box-Muller). */
static inline float tr_rng_normal(uint64_t *state)
{
    double u1 = tr_rng_uniform(state), u2 = tr_rng_uniform(state);
    if (u1 < 1e-300)
        u1 = 1e-300;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

#endif
