/* export_folded.c: `analyze export --folded OUT`: the CPU capture's samples
 * as folded stacks (the text that flamegraph.pl, speedscope, Perfetto and
 * inferno read; docs/analyze.md, "export"): one line per distinct
 *   THREAD;STAGE;OUTERMOST;...;INNERMOST COUNT
 * over the trace's span (as `analyze cpu` counts samples), from the rows of
 * cpu_stacks.c. COUNT is the samples (weight samples, the format's
 * convention) or their CPU time in nanoseconds (weight ns: samples x the
 * thread's period). Names are made safe for the format: ';' (the frame
 * separator) becomes ':', a space or tab '_' (the count follows the last
 * space), other control characters '?', an empty name '?'. Lines in byte
 * order; two stacks that read the same (two addresses of one function)
 * are one line. Python-frame samples (python_stacks 'frames': wall time,
 * 10^9 / python_frames_hz ns each) follow under a frame "[python-frames]"
 * between the stage and their outermost frame.
 */
#include <stdlib.h>
#include <string.h>

#include "cpu_stacks.h"
#include "export.h"

typedef struct sbuf {
    char *v;
    size_t n, cap;
} sbuf;

static int sbuf_put(sbuf *b, char c)
{
    if (b->n + 1 >= b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        char *v = realloc(b->v, cap);
        if (!v) return -1;
        b->v = v;
        b->cap = cap;
    }
    b->v[b->n++] = c;
    b->v[b->n] = 0;
    return 0;
}

/* name, made safe, then sep (0: none). */
static int put_name(sbuf *b, const char *name, char sep)
{
    if (!name[0] && sbuf_put(b, '?')) return -1;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
        char c = (char)*p;
        if (*p == ';') c = ':';
        else if (*p == ' ' || *p == '\t') c = '_';
        else if (*p < 0x20 || *p == 0x7f) c = '?';
        if (sbuf_put(b, c)) return -1;
    }
    return sep ? sbuf_put(b, sep) : 0;
}

typedef struct line {
    char *text;
    uint64_t weight;
} line;

static int cmp_line(const void *a, const void *b) { return strcmp(((const line *)a)->text, ((const line *)b)->text); }

/* The rows of s as lines (appended to lines[*n]); marker: a frame put
 * between the stage and the outermost frame ("" none). 0, or -1 without
 * memory. */
static int add_lines(st_reader *r, const an_cpu_stacks *s, const char *marker, int weight_ns, line *lines, size_t *n)
{
    for (size_t i = 0; i < s->n_rows; i++) {
        const an_cpu_srow *row = &s->rows[i];
        sbuf b = {0};
        int oom = put_name(&b, st_reader_thread(r, row->thread)->name, ';') ||
                  put_name(&b, row->stage < 0 ? "(none)" : st_reader_stage(r, (uint32_t)row->stage)->name, 0);
        if (!oom && marker[0]) oom = sbuf_put(&b, ';') || put_name(&b, marker, 0);
        for (uint32_t k = row->n_frames; !oom && k-- > 0;)
            oom = sbuf_put(&b, ';') || put_name(&b, s->names[s->frames[s->stack_frames[row->frames_off + k]].name], 0);
        if (oom) {
            free(b.v);
            return -1;
        }
        lines[(*n)++] = (line){b.v, weight_ns ? (uint64_t)row->cpu_ns : row->samples};
    }
    return 0;
}

/* The kernel's samples, then the Python-frame samples (python_stacks
 * 'frames') under the frame "[python-frames]" after the stage: wall time,
 * kept in a tower of their own so that no frame adds the two. */
int an_export_folded(an_trace *t, const char *path, int weight_ns, int overwrite)
{
    int rc = an_cpu_stacks_require(t, "export", "--folded needs one");
    if (rc) return rc;
    an_cpu_stacks s, py;
    int64_t t0 = t->has_span ? t->span_t0_ns : 0, t1 = t->has_span ? t->span_t1_ns : 0;
    if ((rc = an_cpu_stacks_compute_both(t, t0, t1, &s, &py))) return rc;
    st_reader *r = t->r;
    line *lines = calloc(s.n_rows + py.n_rows ? s.n_rows + py.n_rows : 1, sizeof *lines);
    size_t n = 0;
    int oom = !lines || add_lines(r, &s, "", weight_ns, lines, &n) || add_lines(r, &py, "[python-frames]", weight_ns, lines, &n);
    an_file f;
    if (!oom) {
        if (n) qsort(lines, n, sizeof *lines, cmp_line);
        rc = an_file_open(&f, "export", path, overwrite);
        for (size_t i = 0; !rc && i < n;) {
            size_t j = i;
            uint64_t w = 0;
            for (; j < n && strcmp(lines[j].text, lines[i].text) == 0; j++)
                w = w + lines[j].weight < w ? UINT64_MAX : w + lines[j].weight;
            fprintf(f.f, "%s %llu\n", lines[i].text, (unsigned long long)w);
            i = j;
        }
        if (!rc) rc = an_file_close(&f, 1);
    } else {
        an_error("out of memory");
        rc = AN_EXIT_FAIL;
    }
    for (size_t i = 0; lines && i < n; i++) free(lines[i].text);
    free(lines);
    an_cpu_stacks_free(&s);
    an_cpu_stacks_free(&py);
    return rc;
}
