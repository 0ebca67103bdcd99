/* cpu_account.c: a range's on-CPU, preempted and blocked time from its
 * thread's context switches (stagetrace_reader.h, "CPU time of ranges"):
 * the off-CPU intervals of a switch sequence, and each range's overlap
 * with them. Pure functions, shared by the capture's tests and `analyze
 * cpu`, so that both split time the same way (docs/analyze.md, "cpu").
 */
#include <stddef.h>
#include <stdint.h>

#include "stagetrace_reader.h"

size_t st_cpu_off_intervals(const st_cpu_switch *sw, size_t n, int64_t start_ns,
                            int64_t now_ns, st_cpu_off *out)
{
    size_t k = 0;
    int off = 0, seen = 0;
    st_cpu_off cur = {0, 0, 0};
    for (size_t i = 0; i < n; i++) {
        if (sw[i].out) {
            if (!off) {
                cur.t0_ns = sw[i].t_ns;
                cur.preempted = sw[i].preempted;
                off = 1;
            }
        } else if (off) {
            cur.t1_ns = sw[i].t_ns;
            if (cur.t1_ns > cur.t0_ns) out[k++] = cur;
            off = 0;
        } else if (!seen && sw[i].t_ns > start_ns) {
            out[k++] = (st_cpu_off){start_ns, sw[i].t_ns, 0};
        }
        seen = 1;
    }
    if (off && now_ns > cur.t0_ns) {
        cur.t1_ns = now_ns;
        out[k++] = cur;
    }
    return k;
}

/* The first interval that ends after t. */
static size_t first_ending_after(const st_cpu_off *off, size_t n, int64_t t)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (off[mid].t1_ns <= t) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

void st_cpu_account(const st_cpu_off *off, size_t n_off, const st_cpu_range *r, size_t n_r,
                    st_cpu_share *out)
{
    for (size_t i = 0; i < n_r; i++) {
        st_cpu_share s = {0, 0, 0};
        int64_t t0 = r[i].t0_ns, t1 = r[i].t1_ns;
        if (t1 > t0) {
            for (size_t j = first_ending_after(off, n_off, t0); j < n_off && off[j].t0_ns < t1; j++) {
                int64_t a = off[j].t0_ns > t0 ? off[j].t0_ns : t0;
                int64_t b = off[j].t1_ns < t1 ? off[j].t1_ns : t1;
                if (b <= a) continue;
                if (off[j].preempted) s.preempted_ns += b - a;
                else s.blocked_ns += b - a;
            }
            s.on_ns = (t1 - t0) - s.preempted_ns - s.blocked_ns;
        }
        out[i] = s;
    }
}

