/* inputs.c: the inputs of a command (docs/analyze.md, "Rank sets"). An
 * argument is a trace file, a directory (its *.sqlite files) or a glob
 * pattern expanded here with glob(3). The files of one run are put in rank
 * order here, as they are expanded (an_inputs_by_rank), so that no command
 * sees the order they were given in: a list in any order, a pattern and a
 * directory are the same input. It reads a file's meta through the reader
 * itself; opening the files as one trace or a rank set is trace.c's.
 */
#include <dirent.h>
#include <errno.h>
#include <glob.h>
#include <stdio.h>
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
        const char *id = st_reader_meta(t.r, "run_id");
        ok = id && an_parse_i64(st_reader_meta(t.r, "rank"), &rank[i]) == 0 && (run_id[i] = strdup(id)) != NULL &&
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
