/* cpu_lines.c: the source lines and inline chains of the CPU samples'
 * frames (cpu_lines, docs/trace-format.md), resolved by the process itself
 * at close (and at an interrupted flush), beside the names of
 * cpu_symbols.c, so that a trace read elsewhere still has them. elfutils
 * libdw does the DWARF: libdwfl reports the process's modules from
 * /proc/self/maps, a module's line table gives an address's file and line,
 * and its scopes (dwarf_getscopes) the functions inlined at the address,
 * innermost first, each with the place it was inlined at. Only the frames
 * of stored stacks are looked up, within a time budget. Debug information
 * comes from the file itself or from a separate file found by build-id
 * under /usr/lib/debug; debuginfod is never asked (it would reach the
 * network at close). Built without libdw (make found none, or NO_LIBDW=1),
 * it stores meta cpu_lines 'none' and no rows. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "st_cpurec.h"

#ifdef ST_HAVE_LIBDW
#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#endif

static void meta_text(st_store *store, const char *key, const char *value)
{
    st_val v[2] = {ST_VTEXT(key), ST_VTEXT(value)};
    st_store_row(store, ST_S_META, 2, v);
}

#ifdef ST_HAVE_LIBDW

static void meta_count(st_store *store, const char *key, uint64_t n)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%llu", (unsigned long long)n);
    meta_text(store, key, buf);
}

/* An inline chain deeper than this is cut (its outer rows left out). */
#define LINES_MAX_DEPTH 64

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int u64_cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* A function's name as the symbol table has it (the linkage name: C++
 * names mangled), else its DWARF name; through DW_AT_abstract_origin for
 * an inlined instance. */
static const char *die_function(Dwarf_Die *die)
{
    Dwarf_Attribute a;
    const char *s = dwarf_formstring(dwarf_attr_integrate(die, DW_AT_linkage_name, &a));
    if (!s) s = dwarf_formstring(dwarf_attr_integrate(die, DW_AT_MIPS_linkage_name, &a));
    if (!s) s = dwarf_formstring(dwarf_attr_integrate(die, DW_AT_name, &a));
    return s ? s : "";
}

static int is_function(Dwarf_Die *die)
{
    int tag = dwarf_tag(die);
    return tag == DW_TAG_subprogram || tag == DW_TAG_inlined_subroutine;
}

static int64_t die_udata(Dwarf_Die *die, unsigned name)
{
    Dwarf_Attribute a;
    Dwarf_Word w;
    if (!dwarf_attr(die, name, &a) || dwarf_formudata(&a, &w) != 0) return 0;
    return (int64_t)w;
}

/* A file name of the line table relative to the unit's directory is
 * made absolute with it. */
static void line_row(st_store *store, uint64_t addr, int depth, const char *function, const char *file,
                     const char *comp_dir, int64_t line, int64_t col)
{
    char path[4096];
    if (!file) file = "";
    if (file[0] && file[0] != '/' && comp_dir && comp_dir[0] == '/') {
        size_t k = strlen(comp_dir);
        snprintf(path, sizeof path, "%s%s%s", comp_dir, k && comp_dir[k - 1] == '/' ? "" : "/", file);
        file = path;
    }
    st_val v[6] = {ST_VINT(addr), ST_VINT(depth), ST_VTEXT(function), ST_VTEXT(file),
                   ST_VINT(line < 0 ? 0 : line), ST_VINT(col < 0 ? 0 : col)};
    st_store_row(store, ST_S_CPU_LINE, 6, v);
}

/* The rows of one address, looked up at pc: 1 when it has any. */
static int lines_of(st_store *store, Dwfl *dwfl, uint64_t addr, Dwarf_Addr pc)
{
    Dwfl_Module *mod = dwfl_addrmodule(dwfl, pc);
    if (!mod) return 0;
    const char *file = NULL;
    int line = 0, col = 0;
    Dwfl_Line *ln = dwfl_module_getsrc(mod, pc);
    if (ln) file = dwfl_lineinfo(ln, NULL, &line, &col, NULL, NULL);
    Dwarf_Addr bias = 0;
    Dwarf_Die *cu = dwfl_module_addrdie(mod, pc, &bias);
    /* dwarf_getscopes gives the innermost scope holding pc (its chain
     * above skips the function an instance was inlined into); the DIE
     * tree from that scope up to the unit has them all. */
    Dwarf_Die *scopes = NULL, *found = NULL;
    int n = cu ? dwarf_getscopes(cu, pc - bias, &found) : 0;
    if (n > 0) n = dwarf_getscopes_die(&found[0], &scopes);
    free(found);
    if (n < 0) n = 0;
    const char *comp_dir = cu ? dwarf_formstring(dwarf_attr(cu, DW_AT_comp_dir, &(Dwarf_Attribute){0})) : NULL;
    Dwarf_Files *files = NULL;
    size_t n_files = 0;
    if (cu && dwarf_getsrcfiles(cu, &files, &n_files) != 0) files = NULL;
    /* scopes[i], innermost first: each inlined instance is followed
     * (further out) by the function it was inlined into; the out-of-line
     * function (DW_TAG_subprogram) ends the chain. */
    int depth = 0, i = 0;
    while (i < n && !is_function(&scopes[i])) i++;
    if (i >= n) {
        if (file && line > 0) line_row(store, addr, 0, "", file, comp_dir, line, col);
        free(scopes);
        return file && line > 0;
    }
    line_row(store, addr, depth++, die_function(&scopes[i]), file, comp_dir, line, col);
    while (i < n && dwarf_tag(&scopes[i]) == DW_TAG_inlined_subroutine && depth < LINES_MAX_DEPTH) {
        Dwarf_Die *inl = &scopes[i];
        int j = i + 1;
        while (j < n && !is_function(&scopes[j])) j++;
        if (j >= n) break;
        int64_t call_file = die_udata(inl, DW_AT_call_file);
        const char *cf = files && call_file >= 0 && (size_t)call_file < n_files
                             ? dwarf_filesrc(files, (size_t)call_file, NULL, NULL)
                             : NULL;
        line_row(store, addr, depth++, die_function(&scopes[j]), cf, comp_dir, die_udata(inl, DW_AT_call_line),
                 die_udata(inl, DW_AT_call_column));
        i = j;
    }
    free(scopes);
    return 1;
}

void st_cpulines_store(st_store *store, const uint64_t *addrs, size_t addrs_cap, const uint64_t *ips, size_t ips_cap,
                       int64_t budget_ns)
{
    int64_t t0 = now_ns();
    st_store_exec(store, "DELETE FROM cpu_lines;");
    static char *debuginfo_path = NULL; /* the default: /usr/lib/debug */
    static const Dwfl_Callbacks callbacks = {
        .find_elf = dwfl_linux_proc_find_elf,
        .find_debuginfo = dwfl_build_id_find_debuginfo,
        .debuginfo_path = &debuginfo_path,
    };
    Dwfl *dwfl = dwfl_begin(&callbacks);
    if (!dwfl) {
        char why[256];
        snprintf(why, sizeof why, "dwfl_begin: %s", dwfl_errmsg(-1));
        meta_text(store, "cpu_lines", "none");
        meta_text(store, "cpu_lines_reason", why);
        return;
    }
    dwfl_report_begin(dwfl);
    int rc = dwfl_linux_proc_report(dwfl, getpid());
    dwfl_report_end(dwfl, NULL, NULL);
    if (rc != 0) {
        char why[256];
        snprintf(why, sizeof why, "dwfl_linux_proc_report: %s", rc > 0 ? strerror(rc) : dwfl_errmsg(-1));
        dwfl_end(dwfl);
        meta_text(store, "cpu_lines", "none");
        meta_text(store, "cpu_lines_reason", why);
        return;
    }
    /* the sampled ips, sorted, to tell them from return addresses */
    size_t n_ips = 0;
    uint64_t *ip = malloc((ips_cap ? ips_cap : 1) * sizeof *ip);
    for (size_t i = 0; ip && i < ips_cap; i++)
        if (ips[i]) ip[n_ips++] = ips[i];
    if (ip) qsort(ip, n_ips, sizeof *ip, u64_cmp);
    uint64_t frames = 0, cut = 0;
    for (size_t i = 0; i < addrs_cap; i++) {
        uint64_t a = addrs[i];
        if (!a) continue;
        if (cut || now_ns() - t0 > budget_ns) {
            cut++;
            continue;
        }
        int is_ip = !ip || bsearch(&a, ip, n_ips, sizeof *ip, u64_cmp) != NULL;
        frames += (uint64_t)lines_of(store, dwfl, a, is_ip ? a : a - 1);
    }
    free(ip);
    dwfl_end(dwfl);
    meta_text(store, "cpu_lines", "libdw");
    meta_count(store, "cpu_lines_frames", frames);
    meta_count(store, "cpu_lines_cut", cut);
    meta_count(store, "cpu_lines_ns", (uint64_t)(now_ns() - t0));
}

#else

void st_cpulines_store(st_store *store, const uint64_t *addrs, size_t addrs_cap, const uint64_t *ips, size_t ips_cap,
                       int64_t budget_ns)
{
    (void)addrs, (void)addrs_cap, (void)ips, (void)ips_cap, (void)budget_ns;
    meta_text(store, "cpu_lines", "none");
    meta_text(store, "cpu_lines_reason", "the library was built without libdw (apt-get install libdw-dev, then make)");
}

#endif
