/* rankset.c: the inputs of a command and rank sets (docs/analyze.md, "Rank
 * sets"). An argument is a trace file, a directory (its *.sqlite files) or
 * a glob pattern expanded here with glob(3); several files are the ranks of
 * one multi-process run, checked to be one (the reader's rule for one run,
 * st_run_ids_match; same world_size; each rank once) and read as one trace
 * on rank 0's clock through the reader's rank set (st_reader_open_set).
 * The files of one run are put in rank order here, as they are expanded
 * (an_inputs_by_rank), so that no command sees the order they were given
 * in: a list in any order, a pattern and a directory are the same input. Missing ranks and ranks that did
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

void an_inputs_by_rank(char **paths, uint32_t n)
{
    if (n < 2) return;
    int64_t *rank = malloc(n * sizeof *rank);
    char **run_id = calloc(n, sizeof *run_id);
    char **sorted = malloc(n * sizeof *sorted);
    int ok = rank && run_id && sorted;
    for (uint32_t i = 0; ok && i < n; i++) {
        an_trace t;
        memset(&t, 0, sizeof t);
        t.path = paths[i];
        if (st_reader_open(&t.r, paths[i]) != ST_OK) {
            ok = 0; /* the command's own open says why */
            break;
        }
        const char *id = an_trace_meta(&t, "run_id");
        ok = id && an_trace_meta_i64(&t, "rank", &rank[i]) == 0 && (run_id[i] = strdup(id)) != NULL &&
             st_run_ids_match(run_id[i], run_id[0]);
        st_reader_close(t.r);
    }
    if (ok) {
        /* stable: of two files with one rank (refused later), the first given stays first */
        for (uint32_t i = 0; i < n; i++) {
            int64_t r = rank[i];
            char *p = paths[i];
            uint32_t j = i;
            while (j > 0 && rank[j - 1] > r) {
                rank[j] = rank[j - 1];
                sorted[j] = sorted[j - 1];
                j--;
            }
            rank[j] = r;
            sorted[j] = p;
        }
        memcpy(paths, sorted, n * sizeof *paths);
    }
    for (uint32_t i = 0; run_id && i < n; i++) free(run_id[i]);
    free(run_id);
    free(rank);
    free(sorted);
}

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
    an_inputs_by_rank(*paths, *n_paths);
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

/* One run: run_id (the reader's rule) and world_size as the first file's;
 * ranks in 0..world_size-1, each once. In the order given, which
 * an_inputs_by_rank has made rank order for the files of one run. */
static int check_one_run(an_trace *ranks, uint32_t n, int64_t *world_size)
{
    const char *id0 = NULL;
    int64_t ws0 = 0;
    for (uint32_t i = 0; i < n; i++) {
        an_trace *r = &ranks[i];
        const char *id = an_trace_meta(r, "run_id");
        int64_t ws, rank;
        if (!id) {
            an_error("%s: the trace has no run_id: it cannot be one rank of a set", r->path);
            return AN_EXIT_USAGE;
        }
        if (an_trace_meta_i64(r, "world_size", &ws) || ws < 1 || ws > INT32_MAX) {
            an_error("%s: world_size '%s' is not a count of ranks (1 to %d)", r->path,
                     an_trace_meta(r, "world_size") ? an_trace_meta(r, "world_size") : "(absent)", INT32_MAX);
            return AN_EXIT_USAGE;
        }
        if (an_trace_meta_i64(r, "rank", &rank) || rank < 0 || rank >= ws) {
            an_error("%s: rank '%s' is not in 0..%lld (world_size %lld)", r->path,
                     an_trace_meta(r, "rank") ? an_trace_meta(r, "rank") : "(absent)", (long long)ws - 1,
                     (long long)ws);
            return AN_EXIT_USAGE;
        }
        if (i == 0) {
            id0 = id;
            ws0 = ws;
        } else if (!st_run_ids_match(id, id0)) {
            an_error("%s: run_id '%s' is not the run_id '%s' of %s: the files are not ranks of one run", r->path, id,
                     id0, ranks[0].path);
            return AN_EXIT_USAGE;
        } else if (ws != ws0) {
            an_error("%s: world_size %lld is not the world_size %lld of %s: the files are not ranks of one run",
                     r->path, (long long)ws, (long long)ws0, ranks[0].path);
            return AN_EXIT_USAGE;
        }
        for (uint32_t j = 0; j < i; j++) {
            int64_t other;
            an_trace_meta_i64(&ranks[j], "rank", &other);
            if (other == rank) {
                an_error("%s: rank %lld is also the rank of %s (each rank once)", r->path, (long long)rank,
                         ranks[j].path);
                return AN_EXIT_USAGE;
            }
        }
    }
    *world_size = ws0;
    return AN_EXIT_OK;
}

int an_trace_open_set(an_trace *t, char **paths, uint32_t n)
{
    memset(t, 0, sizeof *t);
    an_trace *ranks = calloc(n, sizeof *ranks);
    st_reader **readers = malloc(n * sizeof *readers);
    int *rank_of = malloc(n * sizeof *rank_of);
    if (!ranks || !readers || !rank_of) {
        free(ranks);
        free(readers);
        free(rank_of);
        an_error("out of memory");
        return AN_EXIT_FAIL;
    }
    int rc = AN_EXIT_OK;
    uint32_t opened = 0;
    for (; opened < n && !rc; opened++) {
        rc = an_trace_open(&ranks[opened], paths[opened]);
        if (rc) break;
    }
    int64_t ws = 0;
    if (!rc) rc = check_one_run(ranks, n, &ws);
    for (uint32_t i = 0; !rc && i < n; i++) {
        if (!(ranks[i].path = strdup(paths[i]))) {
            for (uint32_t k = 0; k < i; k++) free((char *)ranks[k].path);
            an_error("out of memory");
            rc = AN_EXIT_FAIL;
        }
    }
    if (rc) {
        for (uint32_t i = 0; i < opened && i < n; i++) an_trace_close(&ranks[i]);
        free(ranks);
        free(readers);
        free(rank_of);
        return rc;
    }
    const char *id0 = an_trace_meta(&ranks[0], "run_id");
    size_t label_len = strlen(id0) + 8;
    t->label = malloc(label_len);
    t->is_set = 1;
    t->ranks = ranks;
    t->n_ranks = n;
    t->world_size = ws;
    t->path = t->label;
    if (!t->label) {
        free(readers);
        free(rank_of);
        an_error("out of memory");
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
    int src = st_reader_open_set(&t->r, readers, rank_of, n);
    free(rank_of);
    if (src != ST_OK) {
        free(readers);
        an_error("%s: %s", t->label, st_last_error());
        for (uint32_t i = 0; i < n; i++) ranks[i].r = NULL; /* closed by the failed set */
        an_trace_close(t);
        return AN_EXIT_USAGE;
    }
    /* ranks[i] as the set's part i: the reader orders its parts by rank */
    an_trace *by_part = malloc(n * sizeof *by_part);
    if (!by_part) {
        free(readers);
        an_error("out of memory");
        an_trace_close(t);
        return AN_EXIT_FAIL;
    }
    for (uint32_t p = 0; p < n; p++)
        for (uint32_t i = 0; i < n; i++)
            if (readers[i] == st_reader_part(t->r, p)) by_part[p] = ranks[i];
    memcpy(ranks, by_part, n * sizeof *ranks);
    free(by_part);
    free(readers);
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

void an_warn_missing_ranks(const char *run_id, int64_t world_size, const int64_t *ranks, uint32_t n)
{
    /* ranks: distinct, ascending, in 0..world_size-1 (a checked set), so the
     * missing are world_size - n; the first 64 are listed, gap by gap */
    int64_t n_miss = world_size - (int64_t)n, miss[64], prev = -1;
    uint32_t listed = 0;
    for (uint32_t k = 0; k <= n && listed < 64; k++) {
        int64_t next = k < n ? ranks[k] : world_size;
        for (int64_t r = prev + 1; r < next && listed < 64; r++) miss[listed++] = r;
        prev = next;
    }
    if (n_miss <= 0) return;
    char buf[400];
    list_ranks(buf, sizeof buf, miss, listed);
    if (n_miss > (int64_t)listed && !strstr(buf, "...")) snprintf(buf + strlen(buf), sizeof buf - strlen(buf), ", ...");
    an_warn("run %s: %lld of %lld ranks have no trace (missing rank%s %s); analysing the %u present", run_id,
            (long long)n_miss, (long long)world_size, n_miss == 1 ? "" : "s", buf, n);
}

/* Every command's warnings on a set: the missing ranks, then each rank's
 * own (an_trace_warn_rank: incomplete, interrupted too, dropped, lost),
 * ranks ascending. */
void an_set_warn(const an_trace *t)
{
    int64_t *present = malloc((t->n_ranks ? t->n_ranks : 1) * sizeof *present);
    if (present) {
        for (uint32_t i = 0; i < t->n_ranks; i++) an_trace_meta_i64(&t->ranks[i], "rank", &present[i]);
        an_warn_missing_ranks(an_trace_meta(&t->ranks[0], "run_id"), t->world_size, present, t->n_ranks);
        free(present);
    }
    for (uint32_t i = 0; i < t->n_ranks; i++) {
        an_trace tmp = t->ranks[i];
        tmp.r = st_reader_part(t->r, i);
        an_trace_warn_rank(&tmp);
    }
}
