/* cpu_symbols.c: the names of the CPU samples' frames, resolved while the
 * process is still there (st_cpurec.h, "mappings and symbols"), so that a
 * trace read on another host, or after the container is gone, has them.
 * At close (and at an interrupted flush) the writer stores the process's
 * executable mappings from /proc/self/maps, each with the GNU build-id of
 * its file, and one row per distinct frame address with the function that
 * holds it, from the file's ELF symbol table (.symtab, else .dynsym). Each
 * mapped file is mapped read-only once per process (cached across calls)
 * for its segments and build-id (its first pages); its symbol table is read
 * only when some frame points into it. Plain <elf.h>, 64-bit ELF only,
 * every offset checked against the file's size. Frames in executable
 * memory without a file (a JIT's code, CPython's perf trampolines) are
 * named from the process's perf map, /tmp/perf-PID.map (cpu_perfmap.c),
 * read once per store. Kernel frames (the sched_switch tracepoint's stacks,
 * cpu_sched.c) are named from /proc/kallsyms, under one cpu_maps row whose
 * path is "[kernel.kallsyms]". */
#include <elf.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "st_cpurec.h"
#include "st_cpusched.h"

typedef struct sym {
    uint64_t lo, hi; /* [lo, hi) in the file's virtual addresses */
    const char *name; /* in the file's string table (the mapping stays), or "[plt]" */
    uint64_t cap;    /* a symbol without a size: the end of its section (0: unknown) */
} sym;

typedef struct load {
    uint64_t offset, filesz, vaddr;
} load;

typedef struct elf_file {
    char *path;
    int opened, tried;
    void *map;
    size_t size;
    char build_id[2 * 64 + 1];
    sym *syms;
    size_t n_syms;
    load loads[16];
    int n_loads;
} elf_file;

struct st_cpusym {
    elf_file *files;
    size_t n_files, cap_files;
};

typedef struct exec_map {
    uint64_t lo, hi, offset;
    char path[512];
    long file; /* index in the cache's files, -1: none */
    elf_file *f; /* set once every file is in the cache */
} exec_map;

static int in_file(const elf_file *f, uint64_t off, uint64_t len)
{
    return off <= f->size && len <= f->size - off;
}

static int sym_cmp(const void *a, const void *b)
{
    const sym *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

static void read_build_id(elf_file *f, const unsigned char *p, uint64_t off, uint64_t len)
{
    uint64_t at = off, end = off + len;
    while (at + sizeof(Elf64_Nhdr) <= end) {
        Elf64_Nhdr nh;
        memcpy(&nh, p + at, sizeof nh);
        uint64_t name_at = at + sizeof nh, desc_at = name_at + ((nh.n_namesz + 3u) & ~3u);
        uint64_t next = desc_at + ((nh.n_descsz + 3u) & ~3u);
        if (next > end || next <= at) return;
        if (nh.n_type == NT_GNU_BUILD_ID && nh.n_namesz == 4 && memcmp(p + name_at, "GNU", 4) == 0 &&
            nh.n_descsz <= 64) {
            for (uint32_t i = 0; i < nh.n_descsz; i++)
                snprintf(f->build_id + 2 * i, 3, "%02x", p[desc_at + i]);
            return;
        }
        at = next;
    }
}

/* The section's name when section q is one of the PLT's (.plt, .plt.sec, .plt.got, .iplt)
 * with addresses and a size, else NULL. */
static const char *plt_section(const elf_file *f, const Elf64_Ehdr *eh, const Elf64_Shdr *sh, uint32_t q)
{
    if (eh->e_shstrndx == SHN_UNDEF || eh->e_shstrndx >= eh->e_shnum) return NULL;
    const Elf64_Shdr *names = &sh[eh->e_shstrndx];
    if (!in_file(f, names->sh_offset, names->sh_size) || sh[q].sh_name >= names->sh_size ||
        sh[q].sh_type != SHT_PROGBITS || !sh[q].sh_addr || !sh[q].sh_size)
        return NULL;
    const char *name = (const char *)f->map + names->sh_offset + sh[q].sh_name;
    size_t room = names->sh_size - sh[q].sh_name;
    static const char *const plts[] = {".plt", ".plt.sec", ".plt.got", ".iplt"};
    for (size_t i = 0; i < sizeof plts / sizeof plts[0]; i++) {
        size_t len = strlen(plts[i]) + 1;
        if (len <= room && memcmp(name, plts[i], len) == 0) return plts[i];
    }
    return NULL;
}

/* Loads the symbol table of type `type` (SHT_SYMTAB or SHT_DYNSYM): 0 when
 * it holds function symbols. */
static int load_syms(elf_file *f, const Elf64_Ehdr *eh, const Elf64_Shdr *sh, uint32_t type)
{
    const unsigned char *p = f->map;
    for (uint32_t i = 0; i < eh->e_shnum; i++) {
        if (sh[i].sh_type != type || sh[i].sh_entsize != sizeof(Elf64_Sym) || sh[i].sh_link >= eh->e_shnum)
            continue;
        const Elf64_Shdr *str = &sh[sh[i].sh_link];
        if (!in_file(f, sh[i].sh_offset, sh[i].sh_size) || !in_file(f, str->sh_offset, str->sh_size) ||
            str->sh_size == 0)
            continue;
        const char *strtab = (const char *)p + str->sh_offset;
        if (strtab[str->sh_size - 1] != '\0') continue;
        size_t n = sh[i].sh_size / sizeof(Elf64_Sym);
        sym *v = malloc((n ? n : 1) * sizeof *v);
        if (!v) return -1;
        /* room for the PLT sections' stubs too (below) */
        size_t n_plt = 0;
        for (uint32_t q = 0; q < eh->e_shnum; q++) n_plt += plt_section(f, eh, sh, q) != NULL;
        sym *w = realloc(v, (n + n_plt ? n + n_plt : 1) * sizeof *v);
        if (!w) {
            free(v);
            return -1;
        }
        v = w;
        size_t k = 0;
        for (size_t j = 0; j < n; j++) {
            Elf64_Sym s;
            memcpy(&s, p + sh[i].sh_offset + j * sizeof s, sizeof s);
            int t = ELF64_ST_TYPE(s.st_info);
            if ((t != STT_FUNC && t != STT_GNU_IFUNC) || s.st_shndx == SHN_UNDEF || s.st_value == 0 ||
                s.st_name >= str->sh_size)
                continue;
            /* a symbol without a size reaches the next one (below), but never past its own
             * section's end (crti's _init, size 0, would otherwise name the PLT after .init) */
            uint64_t cap = 0;
            if (!s.st_size && s.st_shndx < eh->e_shnum && sh[s.st_shndx].sh_addr <= s.st_value &&
                s.st_value - sh[s.st_shndx].sh_addr < sh[s.st_shndx].sh_size)
                cap = sh[s.st_shndx].sh_addr + sh[s.st_shndx].sh_size;
            v[k++] = (sym){s.st_value, s.st_value + s.st_size, strtab + s.st_name, cap};
        }
        if (!k) {
            free(v);
            continue;
        }
        /* The PLT's stubs have no symbols: a frame there (a call through the PLT, sampled in
         * its jump) is named "[plt]", not after whatever symbol lies before the section. */
        for (uint32_t q = 0; q < eh->e_shnum; q++)
            if (plt_section(f, eh, sh, q))
                v[k++] = (sym){sh[q].sh_addr, sh[q].sh_addr + sh[q].sh_size, "[plt]", 0};
        qsort(v, k, sizeof *v, sym_cmp);
        for (size_t j = 0; j < k; j++)
            if (v[j].hi == v[j].lo) {
                v[j].hi = j + 1 < k ? v[j + 1].lo : v[j].lo + 1;
                if (v[j].cap > v[j].lo && v[j].hi > v[j].cap) v[j].hi = v[j].cap;
            }
        f->syms = v;
        f->n_syms = k;
        return 0;
    }
    return -1;
}

/* Maps the file and reads its segments and build-id (the first pages
 * only); the symbols wait for elf_load_syms. */
static void elf_open(elf_file *f)
{
    f->opened = 1;
    int fd = open(f->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size < (off_t)sizeof(Elf64_Ehdr)) {
        close(fd);
        return;
    }
    void *m = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (m == MAP_FAILED) return;
    f->map = m;
    f->size = (size_t)sb.st_size;
    const unsigned char *p = m;
    Elf64_Ehdr eh;
    memcpy(&eh, p, sizeof eh);
    if (memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64) return;
    if (eh.e_phentsize == sizeof(Elf64_Phdr) && in_file(f, eh.e_phoff, (uint64_t)eh.e_phnum * sizeof(Elf64_Phdr))) {
        for (uint32_t i = 0; i < eh.e_phnum; i++) {
            Elf64_Phdr ph;
            memcpy(&ph, p + eh.e_phoff + i * sizeof ph, sizeof ph);
            if (ph.p_type == PT_LOAD && f->n_loads < 16)
                f->loads[f->n_loads++] = (load){ph.p_offset, ph.p_filesz, ph.p_vaddr};
            if (ph.p_type == PT_NOTE && !f->build_id[0] && in_file(f, ph.p_offset, ph.p_filesz))
                read_build_id(f, p, ph.p_offset, ph.p_filesz);
        }
    }
}

/* Reads the symbol table, for a file that some frame points into. */
static void elf_load_syms(elf_file *f)
{
    f->tried = 1;
    if (!f->map) return;
    const unsigned char *p = f->map;
    Elf64_Ehdr eh;
    memcpy(&eh, p, sizeof eh);
    if (memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64) return;
    if (eh.e_shentsize != sizeof(Elf64_Shdr) || !in_file(f, eh.e_shoff, (uint64_t)eh.e_shnum * sizeof(Elf64_Shdr)) ||
        eh.e_shoff % 8)
        return;
    const Elf64_Shdr *sh = (const Elf64_Shdr *)(p + eh.e_shoff);
    if (load_syms(f, &eh, sh, SHT_SYMTAB) != 0) load_syms(f, &eh, sh, SHT_DYNSYM);
}

static elf_file *file_of(st_cpusym *c, const char *path)
{
    for (size_t i = 0; i < c->n_files; i++)
        if (strcmp(c->files[i].path, path) == 0) return &c->files[i];
    if (c->n_files == c->cap_files) {
        size_t cap = c->cap_files ? c->cap_files * 2 : 32;
        elf_file *a = realloc(c->files, cap * sizeof *a);
        if (!a) return NULL;
        c->files = a;
        c->cap_files = cap;
    }
    elf_file *f = &c->files[c->n_files];
    memset(f, 0, sizeof *f);
    f->path = strdup(path);
    if (!f->path) return NULL;
    c->n_files++;
    return f;
}

/* The executable mappings of /proc/self/maps, in address order. */
static size_t read_maps(exec_map **out)
{
    *out = NULL;
    FILE *fp = fopen("/proc/self/maps", "r");
    if (!fp) return 0;
    exec_map *v = NULL;
    size_t n = 0, cap = 0;
    char line[1024];
    while (fgets(line, sizeof line, fp)) {
        unsigned long long lo, hi, off;
        char perms[8];
        int pos = 0;
        if (sscanf(line, "%llx-%llx %7s %llx %*s %*s%n", &lo, &hi, perms, &off, &pos) < 4) continue;
        if (!strchr(perms, 'x')) continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            exec_map *a = realloc(v, cap * sizeof *a);
            if (!a) break;
            v = a;
        }
        exec_map *m = &v[n++];
        memset(m, 0, sizeof *m);
        m->file = -1;
        m->lo = lo;
        m->hi = hi;
        m->offset = off;
        const char *path = line + pos;
        while (*path == ' ' || *path == '\t') path++;
        snprintf(m->path, sizeof m->path, "%s", path);
        m->path[strcspn(m->path, "\n")] = '\0';
    }
    fclose(fp);
    *out = v;
    return n;
}

static const exec_map *map_of(const exec_map *v, size_t n, uint64_t a)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (v[mid].hi < a) lo = mid + 1;
        else hi = mid;
    }
    /* a return address may equal a mapping's end (st_cpu_maps_contains) */
    return lo < n && v[lo].lo <= a && a <= v[lo].hi ? &v[lo] : NULL;
}

/* Executable memory that no file backs: anonymous (''), named anonymous
 * ("[anon:...]", Linux 5.17 and later) or a memfd ("/memfd:..."). */
static int map_is_anonymous(const exec_map *m)
{
    return m->path[0] == '\0' || strncmp(m->path, "[anon:", 6) == 0 || strncmp(m->path, "/memfd:", 7) == 0;
}

/* Reads the perf map and says in meta what came of it: cpu_perf_map
 * "used", or "ignored: <why>" (absent when there is no such file). */
static void perfmap_open(st_perfmap *pm, st_store *store)
{
    char path[64];
    snprintf(path, sizeof path, "/tmp/perf-%ld.map", (long)getpid());
    int rc = st_perfmap_load(pm, path);
    char line[192];
    if (rc == 1) snprintf(line, sizeof line, "ignored: %s", pm->refused);
    else if (rc == 0 && pm->found) snprintf(line, sizeof line, "used");
    else return;
    st_val v[2] = {ST_VTEXT("cpu_perf_map"), ST_VTEXT(line)};
    st_store_row(store, ST_S_META, 2, v);
}

static void meta_count(st_store *store, const char *key, uint64_t n)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%llu", (unsigned long long)n);
    st_val v[2] = {ST_VTEXT(key), ST_VTEXT(buf)};
    st_store_row(store, ST_S_META, 2, v);
}

static const sym *sym_of(const elf_file *f, uint64_t vaddr)
{
    size_t lo = 0, hi = f->n_syms;
    while (lo < hi) { /* the last symbol starting at or before vaddr */
        size_t mid = (lo + hi) / 2;
        if (f->syms[mid].lo <= vaddr) lo = mid + 1;
        else hi = mid;
    }
    for (size_t k = lo; k > 0 && k + 8 > lo; k--) /* nested or overlapping symbols: a few back */
        if (f->syms[k - 1].lo <= vaddr && vaddr < f->syms[k - 1].hi) return &f->syms[k - 1];
    return NULL;
}

/* The ELF virtual address of a file offset, through the PT_LOAD segments. */
static int file_vaddr(const elf_file *f, uint64_t off, uint64_t *vaddr)
{
    for (int i = 0; i < f->n_loads; i++) {
        const load *l = &f->loads[i];
        if (off >= l->offset && off < l->offset + l->filesz + 1) {
            *vaddr = off - l->offset + l->vaddr;
            return 0;
        }
    }
    return -1;
}

void st_cpusym_store(st_cpusym **cache, st_store *store, const uint64_t *addrs, size_t n_addrs)
{
    if (!*cache && !(*cache = calloc(1, sizeof **cache))) return;
    st_cpusym *c = *cache;
    exec_map *maps;
    size_t n_maps = read_maps(&maps);
    st_store_exec(store, "DELETE FROM cpu_maps; DELETE FROM cpu_symbols;");
    for (size_t i = 0; i < n_maps; i++) {
        exec_map *m = &maps[i];
        elf_file *f = m->path[0] == '/' ? file_of(c, m->path) : NULL;
        if (f) m->file = (long)(f - c->files);
    }
    for (size_t i = 0; i < n_maps; i++) {
        maps[i].f = maps[i].file >= 0 ? &c->files[maps[i].file] : NULL;
        if (maps[i].f && !maps[i].f->opened) elf_open(maps[i].f);
    }
    /* Files are read only when a frame points into them. */
    for (size_t i = 0; i < n_addrs; i++) {
        if (!addrs[i]) continue;
        const exec_map *m = map_of(maps, n_maps, addrs[i]);
        if (m && m->f && !m->f->tried) elf_load_syms(m->f);
    }
    for (size_t i = 0; i < n_maps; i++) {
        const exec_map *m = &maps[i];
        st_val v[6] = {ST_VINT(i), ST_VINT(m->lo), ST_VINT(m->hi), ST_VINT(m->offset), ST_VTEXT(m->path),
                       ST_VTEXT(m->f ? m->f->build_id : "")};
        st_store_row(store, ST_S_CPU_MAP, 6, v);
    }
    /* Kernel frames: one more mapping, the kernel's text as kallsyms spans it. */
    st_ksyms *ks = NULL;
    int64_t kmap = -1;
    size_t n_kernel = 0;
    for (size_t i = 0; i < n_addrs; i++) n_kernel += addrs[i] && st_cpusched_is_kernel(addrs[i]);
    if (n_kernel) {
        char why[200];
        ks = st_ksyms_load(NULL, why, sizeof why);
        if (ks) {
            uint64_t lo, hi;
            st_ksyms_span(ks, &lo, &hi);
            kmap = (int64_t)n_maps;
            st_val v[6] = {ST_VINT(kmap), ST_VINT(lo), ST_VINT(hi), ST_VINT(0), ST_VTEXT("[kernel.kallsyms]"),
                           ST_VTEXT("")};
            st_store_row(store, ST_S_CPU_MAP, 6, v);
        }
        st_val k[2] = {ST_VTEXT("cpu_kernel_symbols"), ST_VTEXT(ks ? "kallsyms" : why)};
        st_store_row(store, ST_S_META, 2, k);
    }
    /* Read even when no frame lies in such memory: meta then says that the
     * map was there (a perf trampoline on) but no stack reached it. */
    st_perfmap pm = {0};
    perfmap_open(&pm, store);
    uint64_t pm_frames = 0;
    for (size_t i = 0; i < n_addrs; i++) {
        uint64_t a = addrs[i];
        if (!a) continue;
        const exec_map *m = map_of(maps, n_maps, a);
        int64_t map_id = m ? (int64_t)(m - maps) : -1;
        uint64_t file_off = m ? a - m->lo + m->offset : 0;
        const char *name = "";
        int64_t sym_off = 0;
        uint64_t va;
        if (m && m->f && m->f->n_syms && file_vaddr(m->f, file_off, &va) == 0) {
            /* A return address may be just past its function (a call as the
             * function's last instruction): then the byte before names it. */
            const sym *s = sym_of(m->f, va);
            if (!s && va) s = sym_of(m->f, va - 1);
            if (s) {
                name = s->name;
                sym_off = (int64_t)(va - s->lo);
            }
        }
        if (!m && ks && st_cpusched_is_kernel(a)) {
            uint64_t off;
            const char *kn = st_ksyms_find(ks, a, &off);
            uint64_t lo, hi;
            st_ksyms_span(ks, &lo, &hi);
            if (a >= lo && a <= hi) {
                map_id = kmap;
                file_off = a - lo;
            }
            if (kn) {
                name = kn;
                sym_off = (int64_t)off;
            }
        }
        if (m && map_is_anonymous(m) && pm.n) {
            /* a return address just past its entry belongs to it, as above */
            const st_perfmap_entry *e = st_perfmap_find(&pm, a);
            if (!e) e = st_perfmap_find(&pm, a - 1);
            if (e) {
                name = e->name;
                sym_off = (int64_t)(a - e->start);
                pm_frames++;
            }
        }
        st_val v[5] = {ST_VINT(a), ST_VINT(map_id), ST_VINT(file_off), ST_VTEXT(name), ST_VINT(sym_off)};
        st_store_row(store, ST_S_CPU_SYMBOL, 5, v);
    }
    if (pm.found) {
        meta_count(store, "cpu_perf_map_entries", pm.n);
        meta_count(store, "cpu_perf_map_ignored_lines", pm.n_bad);
        meta_count(store, "cpu_perf_map_frames", pm_frames);
    }
    st_perfmap_free(&pm);
    st_ksyms_free(ks);
    free(maps);
}

void st_cpusym_free(st_cpusym *c)
{
    if (!c) return;
    for (size_t i = 0; i < c->n_files; i++) {
        elf_file *f = &c->files[i];
        free(f->syms);
        if (f->map) munmap(f->map, f->size);
        free(f->path);
    }
    free(c->files);
    free(c);
}
