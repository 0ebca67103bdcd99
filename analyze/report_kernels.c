/* report_kernels.c: the top-kernels section of `analyze report` (report.h):
 * per GPU, the kernels with the most device time over the whole trace,
 * summed as `analyze gpu`'s kernels table sums them (same names, counts,
 * totals and means), each with its share of the device's busy time (the
 * union of its kernels, copies and memsets over the whole trace). One pass
 * over each device's records (an_gpu_each); names are kept in an open
 * addressing table, one copy each.
 */
#include <stdlib.h>
#include <string.h>

#include "demangle.h"
#include "gpu_activity.h"
#include "report.h"

#define TOP_KERNELS 10

/* The name a kernel is shown under: every kernel name of the report passes
 * through here, demangled as analyze gpu shows it (demangle.h). */
static const char *report_kernel_name(const char *raw) { return an_demangle(raw); }

typedef struct kernel_total {
    char *name; /* NULL: free slot */
    uint64_t count;
    int64_t total_ns;
} kernel_total;

typedef struct device_kernels {
    kernel_total *k; /* open addressing on the name */
    size_t cap, len;
    int64_t busy_ns, busy_end; /* the union of the device's work, swept in start order */
    int have_busy;
    uint64_t n_kernels;
} device_kernels;

static int add_kernel(device_kernels *d, const char *name, int64_t dur_ns)
{
    if (d->len * 2 >= d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 64;
        kernel_total *t = calloc(cap, sizeof *t);
        if (!t) return -1;
        for (size_t i = 0; i < d->cap; i++) {
            if (!d->k[i].name) continue;
            size_t h = an_hash_name(d->k[i].name) & (cap - 1);
            while (t[h].name) h = (h + 1) & (cap - 1);
            t[h] = d->k[i];
        }
        free(d->k);
        d->k = t;
        d->cap = cap;
    }
    size_t h = an_hash_name(name) & (d->cap - 1);
    while (d->k[h].name && strcmp(d->k[h].name, name) != 0) h = (h + 1) & (d->cap - 1);
    if (!d->k[h].name) {
        if (!(d->k[h].name = strdup(name))) return -1;
        d->len++;
    }
    d->k[h].count++;
    d->k[h].total_ns += dur_ns;
    d->n_kernels++;
    return 0;
}

static int on_record(const st_gpu_row *g, void *arg)
{
    device_kernels *d = arg;
    const st_gpu_rec *r = &g->rec;
    if (!st_gpu_kind_is_device_work(r->kind)) return 0;
    int64_t start = r->start_ns, end = r->start_ns + r->dur_ns;
    /* records come in start order: the union grows by what passes the end so far */
    if (!d->have_busy || start >= d->busy_end) {
        d->busy_ns += end - start;
        d->busy_end = end;
        d->have_busy = 1;
    } else if (end > d->busy_end) {
        d->busy_ns += end - d->busy_end;
        d->busy_end = end;
    }
    if (r->kind == ST_GPU_KERNEL && add_kernel(d, g->name ? g->name : "?", r->dur_ns)) return an_report_oom();
    return 0;
}

/* As `analyze gpu` orders its kernels: by total, largest first, then by name. */
static int cmp_total(const void *a, const void *b)
{
    const kernel_total *x = a, *y = b;
    if (x->total_ns != y->total_ns) return x->total_ns > y->total_ns ? -1 : 1;
    return strcmp(x->name, y->name);
}

static void ms_cell(FILE *f, int64_t ns)
{
    char buf[40];
    an_fmt_fixed(buf, ns, 6, 3);
    fprintf(f, "<td class=\"n\">%s</td>", buf);
}

static void share_cell(FILE *f, int64_t ns, int64_t busy_ns)
{
    char buf[32];
    fprintf(f, "<td class=\"n\">%s</td>", an_fmt_pct1(busy_ns > 0 ? 100.0 * (double)ns / (double)busy_ns : 0, buf, sizeof buf));
}

static void put_device(FILE *f, int32_t device, device_kernels *d)
{
    size_t n = 0;
    for (size_t i = 0; i < d->cap; i++)
        if (d->k[i].name) d->k[n++] = d->k[i];
    for (size_t i = n; i < d->cap; i++) d->k[i].name = NULL; /* each name once, at the front */
    if (n) qsort(d->k, n, sizeof *d->k, cmp_total);
    char busy[40];
    an_fmt_fixed(busy, d->busy_ns, 6, 3);
    fprintf(f, "<table class=\"data kernels\" id=\"kernels-gpu-%d\" data-device=\"%d\"><caption>GPU %d: top %zu of "
               "%zu kernel%s by device time, over the whole trace (busy %s ms: kernels, copies and memsets)</caption>\n"
               "<tr><th>kernel</th><th>count</th><th>total ms</th><th>share of busy</th><th>mean ms</th></tr>\n",
            device, device, device, n < TOP_KERNELS ? n : TOP_KERNELS, n, n == 1 ? "" : "s", busy);
    uint64_t rest_count = 0;
    int64_t rest_ns = 0;
    for (size_t i = 0; i < n; i++) {
        const kernel_total *k = &d->k[i];
        if (i >= TOP_KERNELS) {
            rest_count += k->count;
            rest_ns += k->total_ns;
            continue;
        }
        fputs("<tr><td class=\"kname\">", f);
        an_html_esc(f, report_kernel_name(k->name));
        fprintf(f, "</td><td class=\"n\">%llu</td>", (unsigned long long)k->count);
        ms_cell(f, k->total_ns);
        share_cell(f, k->total_ns, d->busy_ns);
        ms_cell(f, k->total_ns / (int64_t)k->count);
        fputs("</tr>\n", f);
    }
    if (n > TOP_KERNELS) {
        fprintf(f, "<tr class=\"idle\"><td>%zu other kernel%s</td><td class=\"n\">%llu</td>", n - TOP_KERNELS,
                n - TOP_KERNELS == 1 ? "" : "s", (unsigned long long)rest_count);
        ms_cell(f, rest_ns);
        share_cell(f, rest_ns, d->busy_ns);
        ms_cell(f, rest_ns / (int64_t)rest_count);
        fputs("</tr>\n", f);
    }
    fputs("</table>\n", f);
}

int an_report_kernels(an_report *rp)
{
    an_trace *t = rp->t;
    int has = st_reader_has_gpu(t->r);
    if (has < 0) return an_trace_fail(t);
    if (!has) return AN_EXIT_OK;
    int32_t *devices = NULL;
    uint32_t n_devices = 0;
    int rc = an_gpu_devices(t, &devices, &n_devices);
    if (rc || !n_devices) {
        free(devices);
        return rc;
    }
    FILE *f = rp->f;
    fputs("<section id=\"kernels\"><h2>Top kernels per GPU</h2>\n<p class=\"note\">Over the whole trace, as "
          "<code>analyze gpu</code>&#39;s kernels table sums them: per kernel name its launches, total and mean "
          "device time, and its share of the GPU&#39;s busy time (the union of its kernels, copies and memsets; "
          "kernels overlapping on several streams can make the shares add up to more than 100%).</p>\n",
          f);
    for (uint32_t i = 0; i < n_devices && !rc; i++) {
        device_kernels d;
        memset(&d, 0, sizeof d);
        rc = an_gpu_each(t, devices[i], INT64_MIN, INT64_MAX, on_record, &d);
        if (!rc && d.n_kernels) put_device(f, devices[i], &d);
        else if (!rc) fprintf(f, "<p class=\"note\">GPU %d ran no kernel (copies and memsets only).</p>\n", devices[i]);
        for (size_t k = 0; k < d.cap; k++) free(d.k[k].name);
        free(d.k);
    }
    fputs("</section>\n", f);
    free(devices);
    return rc;
}
