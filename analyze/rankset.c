/* rankset.c: the inputs of a command and rank sets (docs/analyze.md, "Rank
 * sets"). An argument is a trace file, a directory (its *.sqlite files) or
 * a glob pattern expanded here with glob(3); several files are the ranks of
 * one multi-process run, checked to be one (same run_id and world_size,
 * each rank once) and read as one trace on rank 0's clock through the
 * reader's rank set (st_reader_open_set). Missing ranks and ranks that did
 * not complete are reported (info) and warned about (every command): a run
 * with a killed rank stays analysable.
 */
#include <dirent.h>
#include <errno.h>
#include <glob.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "analyze.h"

void an_paths_free(char **paths, uint32_t n)
{
    for (uint32_t i = 0; paths && i < n; i++) free(paths[i]);
    free(paths);
}

static int push_path(char ***paths, uint32_t *n, const char *p)
{
    char **v = realloc(*paths, (*n + 1) * sizeof *v);
    if (!v) return -1;
    *paths = v;
    if (!(v[*n] = strdup(p))) return -1;
    (*n)++;
    return 0;
}

static int has_glob_chars(const char *s) { return strpbrk(s, "*?[") != NULL; }

int an_inputs_expand(const char *const *args, int n, char ***paths, uint32_t *n_paths)
{
    *paths = NULL;
    *n_paths = 0;
    for (int i = 0; i < n; i++) {
        const char *arg = args[i];
        struct stat sb;
        int exists = stat(arg, &sb) == 0;
        if (exists && S_ISDIR(sb.st_mode)) {
            /* a directory: its *.sqlite files (regular files), in name order */
            struct dirent **ents = NULL;
            int ne = scandir(arg, &ents, NULL, alphasort);
            if (ne < 0) {
                an_error("%s: cannot list the directory: %s", arg, strerror(errno));
                goto fail;
            }
            size_t len = strlen(arg);
            uint32_t before = *n_paths;
            int oom = 0;
            for (int k = 0; k < ne; k++) {
                const char *name = ents[k]->d_name;
                size_t nl = strlen(name);
                if (!oom && name[0] != '.' && nl > 7 && strcmp(name + nl - 7, ".sqlite") == 0) {
                    char *full = malloc(len + nl + 2);
                    if (!full) oom = 1;
                    else {
                        snprintf(full, len + nl + 2, "%s%s%s", arg, len && arg[len - 1] == '/' ? "" : "/", name);
                        struct stat fs;
                        if (stat(full, &fs) == 0 && S_ISREG(fs.st_mode) && push_path(paths, n_paths, full)) oom = 1;
                        free(full);
                    }
                }
                free(ents[k]);
            }
            free(ents);
            if (oom) goto oom;
            if (*n_paths == before) {
                an_error("%s: the directory holds no *.sqlite file", arg);
                goto fail;
            }
        } else if (!exists && has_glob_chars(arg)) {
            glob_t g;
            int grc = glob(arg, 0, NULL, &g);
            if (grc) {
                if (grc != GLOB_NOMATCH) globfree(&g);
                an_error("%s: %s", arg, grc == GLOB_NOMATCH ? "the pattern matches no file" : "cannot expand the pattern");
                goto fail;
            }
            for (size_t k = 0; k < g.gl_pathc; k++)
                if (push_path(paths, n_paths, g.gl_pathv[k])) {
                    globfree(&g);
                    goto oom;
                }
            globfree(&g);
        } else if (push_path(paths, n_paths, arg)) {
            goto oom;
        }
    }
    return AN_EXIT_OK;
fail:
    an_paths_free(*paths, *n_paths);
    *paths = NULL;
    *n_paths = 0;
    return AN_EXIT_USAGE;
oom:
    an_error("out of memory");
    an_paths_free(*paths, *n_paths);
    *paths = NULL;
    *n_paths = 0;
    return AN_EXIT_FAIL;
}

/* ---- the set -------------------------------------------------------------------------- */

static int cmp_rank(const void *a, const void *b)
{
    const an_trace *x = a, *y = b;
    int64_t rx = 0, ry = 0;
    an_trace_meta_i64(x, "rank", &rx);
    an_trace_meta_i64(y, "rank", &ry);
    return (rx > ry) - (rx < ry);
}

void an_set_close(an_trace *t)
{
    for (uint32_t i = 0; i < t->n_ranks; i++) {
        t->ranks[i].r = NULL; /* the set's */
        free((char *)t->ranks[i].path);
        an_trace_close(&t->ranks[i]);
    }
    free(t->ranks);
    t->ranks = NULL;
    t->n_ranks = 0;
    free(t->label);
    t->label = NULL;
    t->is_set = 0;
}

int an_trace_open_set(an_trace *t, char **paths, uint32_t n)
{
    memset(t, 0, sizeof *t);
    an_trace *ranks = calloc(n, sizeof *ranks);
    if (!ranks) {
        an_error("out of memory");
        return AN_EXIT_FAIL;
    }
    int rc = AN_EXIT_OK;
    uint32_t opened = 0;
    for (; opened < n && !rc; opened++) {
        rc = an_trace_open(&ranks[opened], paths[opened]);
        if (rc) break;
    }
    /* one run: run_id and world_size as the first file's; ranks in 0..world_size-1, once each */
    const char *id0 = NULL;
    int64_t ws0 = 0;
    for (uint32_t i = 0; !rc && i < n; i++) {
        an_trace *r = &ranks[i];
        const char *id = an_trace_meta(r, "run_id");
        int64_t ws, rank;
        if (!id) {
            an_error("%s: the trace has no run_id: it cannot be one rank of a set", r->path);
            rc = AN_EXIT_USAGE;
        } else if (an_trace_meta_i64(r, "world_size", &ws) || ws < 1 || ws > INT32_MAX) {
            an_error("%s: world_size '%s' is not a count of ranks (1 to %d)", r->path,
                     an_trace_meta(r, "world_size") ? an_trace_meta(r, "world_size") : "(absent)", INT32_MAX);
            rc = AN_EXIT_USAGE;
        } else if (an_trace_meta_i64(r, "rank", &rank) || rank < 0 || rank >= ws) {
            an_error("%s: rank '%s' is not in 0..%lld (world_size %lld)", r->path,
                     an_trace_meta(r, "rank") ? an_trace_meta(r, "rank") : "(absent)", (long long)ws - 1,
                     (long long)ws);
            rc = AN_EXIT_USAGE;
        } else if (i == 0) {
            id0 = id;
            ws0 = ws;
        } else if (strcmp(id, id0) != 0) {
            an_error("%s: run_id '%s' is not the run_id '%s' of %s: the files are not ranks of one run", r->path, id,
                     id0, ranks[0].path);
            rc = AN_EXIT_USAGE;
        } else if (ws != ws0) {
            an_error("%s: world_size %lld is not the world_size %lld of %s: the files are not ranks of one run",
                     r->path, (long long)ws, (long long)ws0, ranks[0].path);
            rc = AN_EXIT_USAGE;
        }
    }
    if (!rc) {
        for (uint32_t i = 0; i < n; i++) ranks[i].path = NULL; /* sort by rank with paths kept */
        char **order = malloc(n * sizeof *order);
        int64_t *rk = malloc(n * sizeof *rk);
        if (!order || !rk) {
            free(order);
            free(rk);
            an_error("out of memory");
            rc = AN_EXIT_FAIL;
        } else {
            /* stable order by rank: an insertion sort of indices */
            uint32_t *idx = (uint32_t *)(void *)order; /* enough room: n pointers */
            for (uint32_t i = 0; i < n; i++) an_trace_meta_i64(&ranks[i], "rank", &rk[i]);
            for (uint32_t i = 0; i < n; i++) {
                uint32_t j = i;
                while (j > 0 && rk[idx[j - 1]] > rk[i]) {
                    idx[j] = idx[j - 1];
                    j--;
                }
                idx[j] = i;
            }
            an_trace *sorted = malloc(n * sizeof *sorted);
            if (!sorted) {
                an_error("out of memory");
                rc = AN_EXIT_FAIL;
            } else {
                for (uint32_t i = 0; i < n; i++) {
                    sorted[i] = ranks[idx[i]];
                    sorted[i].path = strdup(paths[idx[i]]);
                }
                free(ranks);
                ranks = sorted;
                for (uint32_t i = 1; !rc && i < n; i++) {
                    int64_t a, b;
                    an_trace_meta_i64(&ranks[i - 1], "rank", &a);
                    an_trace_meta_i64(&ranks[i], "rank", &b);
                    if (a == b) {
                        an_error("%s: rank %lld is also the rank of %s (each rank once)", ranks[i].path, (long long)b,
                                 ranks[i - 1].path);
                        rc = AN_EXIT_USAGE;
                    }
                }
            }
            free(order);
            free(rk);
            if (rc) {
                for (uint32_t i = 0; i < n; i++) {
                    free((char *)ranks[i].path);
                    an_trace_close(&ranks[i]);
                }
                free(ranks);
                return rc;
            }
        }
    }
    if (rc) {
        for (uint32_t i = 0; i < opened && i < n; i++) an_trace_close(&ranks[i]);
        free(ranks);
        return rc;
    }
    (void)cmp_rank;
    st_reader **readers = malloc(n * sizeof *readers);
    int *rank_of = malloc(n * sizeof *rank_of);
    size_t label_len = strlen(id0) + 8;
    t->label = malloc(label_len);
    if (!readers || !rank_of || !t->label) {
        free(readers);
        free(rank_of);
        an_error("out of memory");
        t->ranks = ranks;
        t->n_ranks = n;
        t->is_set = 1;
        an_trace_close(t);
        return AN_EXIT_FAIL;
    }
    snprintf(t->label, label_len, "run %s", id0);
    for (uint32_t i = 0; i < n; i++) {
        int64_t v;
        an_trace_meta_i64(&ranks[i], "rank", &v);
        rank_of[i] = (int)v;
        readers[i] = ranks[i].r;
    }
    t->is_set = 1;
    t->ranks = ranks;
    t->n_ranks = n;
    t->world_size = ws0;
    t->path = t->label;
    int src = st_reader_open_set(&t->r, readers, rank_of, n);
    free(readers);
    free(rank_of);
    if (src != ST_OK) {
        an_error("%s: %s", t->label, st_last_error());
        for (uint32_t i = 0; i < n; i++) ranks[i].r = NULL; /* closed by the failed set */
        an_trace_close(t);
        return AN_EXIT_USAGE;
    }
    if (an_trace_init(t)) {
        an_trace_close(t);
        return AN_EXIT_USAGE;
    }
    return AN_EXIT_OK;
}

int an_trace_open_inputs(an_trace *t, const char *const *args, int n)
{
    char **paths;
    uint32_t n_paths;
    int rc = an_inputs_expand(args, n, &paths, &n_paths);
    if (rc) return rc;
    if (n_paths == 1 && n == 1 && strcmp(paths[0], args[0]) == 0) {
        an_paths_free(paths, n_paths);
        return an_trace_open(t, args[0]); /* a file as before: its path as given */
    }
    rc = an_trace_open_set(t, paths, n_paths);
    an_paths_free(paths, n_paths);
    return rc;
}

/* "0, 2, 3" into buf (cut with "..." when long) */
static void list_ranks(char *buf, size_t size, const int64_t *v, uint32_t n)
{
    size_t used = 0;
    buf[0] = '\0';
    for (uint32_t i = 0; i < n; i++) {
        int w = snprintf(buf + used, size - used, "%s%lld", i ? ", " : "", (long long)v[i]);
        if (w < 0 || (size_t)w >= size - used - 4) {
            snprintf(buf + used, size - used, ", ...");
            return;
        }
        used += (size_t)w;
    }
}

uint32_t an_set_missing(const an_trace *t, int64_t *out, uint32_t max)
{
    uint32_t n = 0, k = 0;
    for (int64_t r = 0; r < t->world_size; r++) {
        int64_t have = -1;
        if (k < t->n_ranks) an_trace_meta_i64(&t->ranks[k], "rank", &have);
        if (have == r) {
            k++;
            continue;
        }
        if (n < max) out[n] = r;
        n++;
    }
    return n;
}

void an_set_warn(const an_trace *t)
{
    int64_t miss[64];
    uint32_t n_miss = an_set_missing(t, miss, 64);
    if (n_miss) {
        char buf[400];
        list_ranks(buf, sizeof buf, miss, n_miss < 64 ? n_miss : 64);
        an_warn("%s: %u of %lld ranks have no trace (missing rank%s %s); analysing the %u present", t->label, n_miss,
                (long long)t->world_size, n_miss == 1 ? "" : "s", buf, t->n_ranks);
    }
    for (uint32_t i = 0; i < t->n_ranks; i++) {
        const an_trace *r = &t->ranks[i];
        an_trace tmp = *r;
        tmp.r = st_reader_part(t->r, i);
        const char *status = an_trace_meta(&tmp, "status");
        if (status && strcmp(status, "interrupted") == 0)
            an_warn("%s is incomplete (status interrupted: the run was stopped by a signal); analysing what it holds",
                    r->path);
        an_trace_warn(&tmp);
    }
}
