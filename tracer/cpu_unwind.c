/* cpu_unwind.c: DWARF unwinding of the CPU samples' user stacks (st_cpu.h,
 * docs/cpu.md "DWARF unwinding"). Code built without frame pointers (the
 * PyTorch wheels, most distribution libraries' hot paths) stops the
 * kernel's frame-pointer walk, so with st_options.cpu_user_stack each
 * sample also carries the thread's ip, sp and bp and a copy of the stack
 * above sp, and the writer thread unwinds it here, after the fact, by the
 * modules' call frame information, as perf does for `--call-graph dwarf`.
 * The unwinding is in the process itself: elfutils libdwfl reports the
 * process's modules from /proc/self/maps and is attached with callbacks of
 * our own (one thread, registers from the sample, memory from the copy),
 * never with ptrace. Built without libdw (ST_HAVE_LIBDW not defined) it
 * opens nothing and says why. Nothing here runs on a thread's hot path. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "st_cpu.h"

#ifdef ST_HAVE_LIBDW
#include <elfutils/libdwfl.h>

/* x86-64 DWARF register numbers (the psABI's): rbp 6, rsp 7, and 16 the
 * return-address column, which holds the ip. */
#define DW_X86_RBP 6
#define DW_X86_RSP 7
#define DW_X86_RIP 16

struct st_cpu_unwinder {
    Dwfl *dwfl;              /* NULL until reported (and after a failed report) */
    unsigned maps_gen;       /* the maps generation it was reported at */
    pid_t pid;
    /* the sample being unwound, for the callbacks */
    const st_cpu_ustack *us;
    pid_t tid;
    uint64_t *frames;
    size_t n, max;
};

static char *debuginfo_path;
static const Dwfl_Callbacks proc_callbacks = {
    .find_elf = dwfl_linux_proc_find_elf,
    .find_debuginfo = dwfl_build_id_find_debuginfo, /* the file's own CFI, or a build-id debug file; no debuginfod */
    .debuginfo_path = &debuginfo_path,
};

/* One thread: the sample's. */
static pid_t next_thread(Dwfl *dwfl, void *dwfl_arg, void **thread_argp)
{
    (void)dwfl;
    st_cpu_unwinder *u = dwfl_arg;
    if (*thread_argp) return 0;
    *thread_argp = u;
    return u->tid;
}

static bool get_thread(Dwfl *dwfl, pid_t tid, void *dwfl_arg, void **thread_argp)
{
    (void)dwfl;
    st_cpu_unwinder *u = dwfl_arg;
    *thread_argp = u;
    return tid == u->tid;
}

/* A word of the sampled thread's memory: from the copy when it lies in
 * [sp, sp + dyn_size), the stack as it was at the sample; else from the
 * process as it is now (process_vm_readv on itself: a read of memory that
 * is not mapped, or not readable, fails instead of faulting, and the
 * unwinding ends there). */
static bool memory_read(Dwfl *dwfl, Dwarf_Addr addr, Dwarf_Word *result, void *dwfl_arg)
{
    (void)dwfl;
    st_cpu_unwinder *u = dwfl_arg;
    const st_cpu_ustack *us = u->us;
    if (addr >= us->sp && addr - us->sp <= us->dyn_size && us->dyn_size - (addr - us->sp) >= 8) {
        memcpy(result, us->data + (addr - us->sp), 8);
        return true;
    }
    uint64_t w;
    struct iovec local = {&w, 8}, remote = {(void *)(uintptr_t)addr, 8};
    if (process_vm_readv(u->pid, &local, 1, &remote, 1, 0) != 8) return false;
    *result = w;
    return true;
}

static bool set_initial_registers(Dwfl_Thread *thread, void *thread_arg)
{
    st_cpu_unwinder *u = thread_arg;
    const st_cpu_ustack *us = u->us;
    Dwarf_Word bp_sp[2] = {us->bp, us->sp}, ip = us->ip;
    if (!dwfl_thread_state_registers(thread, DW_X86_RBP, 2, bp_sp)) return false;
    if (!dwfl_thread_state_registers(thread, DW_X86_RIP, 1, &ip)) return false;
    dwfl_thread_state_register_pc(thread, ip);
    return true;
}

static const Dwfl_Thread_Callbacks thread_callbacks = {
    .next_thread = next_thread,
    .get_thread = get_thread,
    .memory_read = memory_read,
    .set_initial_registers = set_initial_registers,
};

/* Reports the process's modules anew and attaches the callbacks. */
static int report(st_cpu_unwinder *u, char *why, size_t why_size)
{
    if (u->dwfl) dwfl_end(u->dwfl);
    u->dwfl = dwfl_begin(&proc_callbacks);
    if (!u->dwfl) {
        if (why) snprintf(why, why_size, "dwfl_begin: %s", dwfl_errmsg(-1));
        return -1;
    }
    dwfl_report_begin(u->dwfl);
    int rc = dwfl_linux_proc_report(u->dwfl, u->pid);
    dwfl_report_end(u->dwfl, NULL, NULL);
    if (rc != 0 || !dwfl_attach_state(u->dwfl, NULL, u->pid, &thread_callbacks, u)) {
        if (why)
            snprintf(why, why_size, "%s: %s", rc != 0 ? "dwfl_linux_proc_report" : "dwfl_attach_state",
                     rc > 0 ? strerror(rc) : dwfl_errmsg(-1));
        dwfl_end(u->dwfl);
        u->dwfl = NULL;
        return -1;
    }
    return 0;
}

st_cpu_unwinder *st_cpu_unwind_open(char *why, size_t why_size)
{
    st_cpu_unwinder *u = calloc(1, sizeof *u);
    if (!u) {
        if (why) snprintf(why, why_size, "out of memory for the unwinder");
        return NULL;
    }
    u->pid = getpid();
    if (report(u, why, why_size) != 0) {
        free(u);
        return NULL;
    }
    return u;
}

static int on_frame(Dwfl_Frame *state, void *arg)
{
    st_cpu_unwinder *u = arg;
    Dwarf_Addr pc;
    bool activation;
    if (!dwfl_frame_pc(state, &pc, &activation) || pc == 0) return DWARF_CB_ABORT;
    /* the first frame's pc is the sampled ip; the others' are return
     * addresses, as a frame-pointer chain has them */
    u->frames[u->n++] = pc;
    return u->n < u->max ? DWARF_CB_OK : DWARF_CB_ABORT;
}

size_t st_cpu_unwind(st_cpu_unwinder *u, const st_cpu_ustack *us, pid_t tid, unsigned maps_gen, uint64_t *frames,
                     size_t max_frames)
{
    if (!u || !us || !max_frames) return 0;
    if (!u->dwfl || maps_gen != u->maps_gen) {
        /* a library loaded or unloaded since: its modules reported anew */
        u->maps_gen = maps_gen;
        if (report(u, NULL, 0) != 0) return 0;
    }
    u->us = us;
    u->tid = tid > 0 ? tid : u->pid;
    u->frames = frames;
    u->n = 0;
    u->max = max_frames;
    /* -1 with the frames so far when a frame has no CFI and the fallback
     * (the frame pointer) fails, or a read fails: the chain ends there */
    dwfl_getthread_frames(u->dwfl, u->tid, on_frame, u);
    u->us = NULL;
    return u->n;
}

void st_cpu_unwind_close(st_cpu_unwinder *u)
{
    if (!u) return;
    if (u->dwfl) dwfl_end(u->dwfl);
    free(u);
}

const char *st_cpu_unwind_missing(void) { return NULL; }

#else /* no libdw */

#define NO_LIBDW_REASON "this build of libstagetrace has no libdw (NO_LIBDW=1, or libdw missing at make)"

const char *st_cpu_unwind_missing(void) { return NO_LIBDW_REASON; }

st_cpu_unwinder *st_cpu_unwind_open(char *why, size_t why_size)
{
    if (why) snprintf(why, why_size, "%s", NO_LIBDW_REASON);
    return NULL;
}

size_t st_cpu_unwind(st_cpu_unwinder *u, const st_cpu_ustack *us, pid_t tid, unsigned maps_gen, uint64_t *frames,
                     size_t max_frames)
{
    (void)u, (void)us, (void)tid, (void)maps_gen, (void)frames, (void)max_frames;
    return 0;
}

void st_cpu_unwind_close(st_cpu_unwinder *u) { (void)u; }

#endif
