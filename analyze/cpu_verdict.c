/* cpu_verdict.c: a role's work judged by where its time went on the CPU
 * (cpu_verdict.h): on a core, waiting for one, or off it by its own doing;
 * and its sync stages judged spinning or not. Figures come from cpu.c's
 * self-time cells, summed per role.
 */
#include <string.h>

#include "cpu_verdict.h"

an_cpu_work_verdict an_cpu_judge_work(int64_t wall_ns, int64_t on_ns, int64_t preempted_ns, int64_t blocked_ns)
{
    (void)on_ns;
    if (wall_ns <= 0) return AN_CPU_NO_WORK;
    double off = (double)preempted_ns + (double)blocked_ns;
    if (100.0 * off <= AN_CPU_OFF_PCT * (double)wall_ns) return AN_CPU_COMPUTE;
    return preempted_ns >= blocked_ns ? AN_CPU_STARVED : AN_CPU_BLOCKED;
}

an_cpu_work_verdict an_cpu_judge_work_locks(int64_t wall_ns, int64_t on_ns, int64_t preempted_ns,
                                            int64_t blocked_ns, int64_t futex_ns)
{
    an_cpu_work_verdict v = an_cpu_judge_work(wall_ns, on_ns, preempted_ns, blocked_ns);
    if (v == AN_CPU_BLOCKED && 100.0 * (double)futex_ns > AN_CPU_LOCK_PCT * (double)blocked_ns) return AN_CPU_LOCK_BOUND;
    return v;
}

int an_cpu_spins(int64_t wall_ns, int64_t on_ns)
{
    return wall_ns > 0 && 100.0 * (double)on_ns > AN_CPU_SPIN_PCT * (double)wall_ns;
}

const char *an_cpu_verdict_name(an_cpu_work_verdict v)
{
    switch (v) {
    case AN_CPU_COMPUTE: return "compute-bound";
    case AN_CPU_STARVED: return "CPU-starved";
    case AN_CPU_BLOCKED: return "blocked";
    case AN_CPU_LOCK_BOUND: return "lock-bound";
    default: return NULL;
    }
}

void an_cpu_roles(const an_pipe *p, const an_cpu_result *res, an_cpu_role *out)
{
    st_reader *r = p->trace->r;
    memset(out, 0, p->n_roles * sizeof *out);
    for (uint32_t k = 0; k < p->n_roles; k++) {
        out[k].threads = p->role_threads[k];
        out[k].spin_stage = -1;
    }
    uint32_t ns = res->n_stages;
    for (uint32_t s = 0; s < ns; s++) {
        st_kind kind = st_reader_stage(r, s)->kind;
        if (kind != ST_WORK && kind != ST_SYNC) continue;
        for (uint32_t k = 0; k < p->n_roles; k++) {
            int64_t wall = 0, on = 0, pre = 0, blk = 0, futex = 0;
            for (uint32_t i = 0; i < res->n_threads; i++) {
                const an_cpu_thread *th = &res->threads[i];
                if (th->thread >= p->n_threads || p->thread_role[th->thread] != k) continue;
                if (!th->has_switches) continue;
                const an_cpu_cell *c = &th->cells[s + 1];
                wall += c->wall_ns;
                on += c->on_ns;
                pre += c->preempted_ns;
                blk += c->blocked_ns;
                for (uint32_t j = 0; j < c->n_reasons; j++)
                    if (c->reasons[j].reason < res->n_reasons &&
                        strncmp(res->reasons[c->reasons[j].reason], "futex:", 6) == 0)
                        futex += c->reasons[j].ns;
            }
            an_cpu_role *o = &out[k];
            if (kind == ST_WORK) {
                o->work_wall_ns += wall;
                o->work_on_ns += on;
                o->work_preempted_ns += pre;
                o->work_blocked_ns += blk;
                o->work_futex_ns += futex;
            } else {
                o->sync_wall_ns += wall;
                o->sync_on_ns += on;
                if (an_cpu_spins(wall, on) && (o->spin_stage < 0 || on > o->spin_on_ns)) {
                    o->spin_stage = (int32_t)s;
                    o->spin_wall_ns = wall;
                    o->spin_on_ns = on;
                }
            }
        }
    }
    for (uint32_t i = 0; i < res->n_threads; i++) {
        const an_cpu_thread *th = &res->threads[i];
        if (th->thread < p->n_threads && p->thread_role[th->thread] < p->n_roles &&
            th->has_switches)
            out[p->thread_role[th->thread]].threads_known++;
    }
    for (uint32_t k = 0; k < p->n_roles; k++)
        out[k].verdict = an_cpu_judge_work_locks(out[k].work_wall_ns, out[k].work_on_ns, out[k].work_preempted_ns,
                                                 out[k].work_blocked_ns, out[k].work_futex_ns);
}
