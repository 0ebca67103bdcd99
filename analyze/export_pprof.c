/* export_pprof.c: `analyze export --pprof OUT`: the CPU capture's samples
 * as a pprof profile (profile.proto of github.com/google/pprof, read by
 * `go tool pprof`, Pyroscope, speedscope; docs/analyze.md, "export"),
 * gzipped when the build has zlib (pprof reads both), from the rows of
 * cpu_stacks.c over the trace's span.
 *
 * The profile: sample types samples/count and cpu/nanoseconds; period type
 * cpu/nanoseconds, period the first capturing thread's period_ns; one
 * Sample per (thread, stage, stack) with values [samples, samples x the
 * thread's period_ns] and string labels thread, stage, role (and rank in a
 * rank set); one Location per (process, address), its Line naming one
 * Function per (name, file); one Mapping per cpu_maps row used.
 *
 * Python-frame samples (python_stacks 'frames': wall time, taken by the
 * interpreter, never CPU time) have sample types of their own,
 * python_samples/count and python_wall/nanoseconds, after the kernel's:
 * a kernel sample's values are [n, cpu_ns, 0, 0], a Python one's
 * [0, 0, n, n x 10^9 / python_frames_hz], with the same labels and
 * source=python-frames, so no view of pprof adds the two and Pyroscope
 * stores them as two profile types. Their frames are Locations with no
 * mapping, one Line each: Function "py::QUALNAME:FILE" (no system_name),
 * filename FILE, the line. default_sample_type: cpu (python_wall when the kernel has none).
 * A trace without the sampler gets the two kernel types only.
 *
 * Strings are written as valid UTF-8 (a byte that begins no sequence as
 * U+FFFD), as proto3 requires of a string field and strict decoders check.
 *
 * The encoder is protobuf's wire format, written here (it is small): a
 * varint for each integer, a length-delimited record for strings, nested
 * messages and packed repeated integers. Each message is built in its own
 * buffer and appended to its parent with its length.
 */
#include <stdlib.h>
#include <string.h>

#ifdef AN_HAVE_ZLIB
#include <zlib.h>
#endif

#include "cpu_stacks.h"
#include "demangle.h"
#include "export.h"

/* ---- protobuf wire format ---- */

typedef struct pb {
    uint8_t *v;
    size_t n, cap;
    int oom;
} pb;

static void pb_bytes(pb *b, const void *data, size_t n)
{
    if (b->oom) return;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n) cap *= 2;
        uint8_t *v = realloc(b->v, cap);
        if (!v) {
            b->oom = 1;
            return;
        }
        b->v = v;
        b->cap = cap;
    }
    if (n) memcpy(b->v + b->n, data, n);
    b->n += n;
}

static void pb_varint(pb *b, uint64_t v)
{
    uint8_t buf[10];
    size_t n = 0;
    do {
        buf[n] = (uint8_t)(v & 0x7f);
        v >>= 7;
        if (v) buf[n] |= 0x80;
        n++;
    } while (v);
    pb_bytes(b, buf, n);
}

/* wire types: 0 varint, 2 length-delimited */
static void pb_uint(pb *b, uint32_t field, uint64_t v)
{
    if (!v) return; /* proto3: a zero is the default, left out */
    pb_varint(b, (uint64_t)field << 3);
    pb_varint(b, v);
}

static void pb_len(pb *b, uint32_t field, const void *data, size_t n)
{
    pb_varint(b, (uint64_t)field << 3 | 2);
    pb_varint(b, n);
    pb_bytes(b, data, n);
}

/* a nested message (sub, then emptied for reuse) */
static void pb_msg(pb *b, uint32_t field, pb *sub)
{
    if (sub->oom) b->oom = 1;
    pb_len(b, field, sub->v, sub->n);
    sub->n = 0;
}

/* ---- the string table ---- */

typedef struct strtab {
    pb out;           /* the string_table fields, in index order */
    char **keys;      /* hash slots: the strings, NULL empty */
    int64_t *index;
    size_t cap, n;
} strtab;

/* str as proto3 wants a string, valid UTF-8: each byte that begins no
 * UTF-8 sequence (a name cut inside a character, a hostile trace's) as
 * U+FFFD. NULL when str is valid as it is (or out of memory: *oom 1), else
 * a copy to free. */
static char *utf8_fixed(const char *str, int *oom)
{
    const unsigned char *p = (const unsigned char *)str;
    size_t bad = 0, n = 0;
    while (p[n]) {
        int k = an_utf8_len(p + n);
        bad += !k;
        n += k ? (size_t)k : 1;
    }
    if (!bad) return NULL;
    char *out = malloc(n + 2 * bad + 1), *o = out;
    if (!out) {
        *oom = 1;
        return NULL;
    }
    for (size_t i = 0; p[i];) {
        int k = an_utf8_len(p + i);
        if (!k) {
            memcpy(o, "\xef\xbf\xbd", 3);
            o += 3;
            i++;
        } else {
            memcpy(o, p + i, (size_t)k);
            o += k;
            i += (size_t)k;
        }
    }
    *o = 0;
    return out;
}

/* The index of str (valid UTF-8) in the string table, added when new. */
static int64_t str_id_valid(strtab *s, const char *str)
{
    if (s->n * 2 >= s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 1024;
        char **keys = calloc(cap, sizeof *keys);
        int64_t *index = calloc(cap, sizeof *index);
        if (!keys || !index) {
            free(keys);
            free(index);
            s->out.oom = 1;
            return 0;
        }
        for (size_t i = 0; i < s->cap; i++)
            if (s->keys[i]) {
                size_t k = an_hash_name(s->keys[i]) & (cap - 1);
                while (keys[k]) k = (k + 1) & (cap - 1);
                keys[k] = s->keys[i];
                index[k] = s->index[i];
            }
        free(s->keys);
        free(s->index);
        s->keys = keys;
        s->index = index;
        s->cap = cap;
    }
    size_t k = an_hash_name(str) & (s->cap - 1);
    for (; s->keys[k]; k = (k + 1) & (s->cap - 1))
        if (strcmp(s->keys[k], str) == 0) return s->index[k];
    s->keys[k] = strdup(str);
    if (!s->keys[k]) {
        s->out.oom = 1;
        return 0;
    }
    s->index[k] = (int64_t)s->n++;
    pb_len(&s->out, 6, str, strlen(str)); /* Profile.string_table */
    return s->index[k];
}

static int64_t str_id(strtab *s, const char *str)
{
    int oom = 0;
    char *fixed = utf8_fixed(str, &oom);
    if (oom) {
        s->out.oom = 1;
        return 0;
    }
    int64_t id = str_id_valid(s, fixed ? fixed : str);
    free(fixed);
    return id;
}

static void strtab_free(strtab *s)
{
    for (size_t i = 0; i < s->cap; i++) free(s->keys[i]);
    free(s->keys);
    free(s->index);
    free(s->out.v);
}

/* ---- the profile ---- */

static void value_type(pb *prof, pb *sub, uint32_t field, strtab *st, const char *type, const char *unit)
{
    pb_uint(sub, 1, (uint64_t)str_id(st, type));
    pb_uint(sub, 2, (uint64_t)str_id(st, unit));
    pb_msg(prof, field, sub);
}

static void label(pb *sample, pb *sub, strtab *st, const char *key, const char *value)
{
    pb_uint(sub, 1, (uint64_t)str_id(st, key));
    pb_uint(sub, 2, (uint64_t)str_id(st, value));
    pb_msg(sample, 3, sub);
}

/* A u32 id per (a, b), 1, 2, ... by first use: linear probing over pairs. */
typedef struct idmap {
    uint64_t *a, *b;
    uint32_t *id;
    size_t cap, n;
} idmap;

static uint32_t idmap_get(idmap *m, uint64_t a, uint64_t b, int *is_new)
{
    *is_new = 0;
    if (m->n * 2 >= m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 256;
        uint64_t *na = calloc(cap, sizeof *na), *nb = calloc(cap, sizeof *nb);
        uint32_t *nid = calloc(cap, sizeof *nid);
        if (!na || !nb || !nid) {
            free(na);
            free(nb);
            free(nid);
            return 0;
        }
        for (size_t i = 0; i < m->cap; i++)
            if (m->id[i]) {
                size_t k = (m->a[i] * 0x9E3779B97F4A7C15ull ^ m->b[i] * 0xC2B2AE3D27D4EB4Full) & (cap - 1);
                while (nid[k]) k = (k + 1) & (cap - 1);
                na[k] = m->a[i];
                nb[k] = m->b[i];
                nid[k] = m->id[i];
            }
        free(m->a);
        free(m->b);
        free(m->id);
        m->a = na;
        m->b = nb;
        m->id = nid;
        m->cap = cap;
    }
    size_t k = (a * 0x9E3779B97F4A7C15ull ^ b * 0xC2B2AE3D27D4EB4Full) & (m->cap - 1);
    for (; m->id[k]; k = (k + 1) & (m->cap - 1))
        if (m->a[k] == a && m->b[k] == b) return m->id[k];
    m->a[k] = a;
    m->b[k] = b;
    m->id[k] = (uint32_t)++m->n;
    *is_new = 1;
    return m->id[k];
}

static void idmap_free(idmap *m)
{
    free(m->a);
    free(m->b);
    free(m->id);
}

/* What build's passes share. */
typedef struct pprof {
    an_trace *t;
    st_reader *r;
    strtab st;
    pb sub, sub2, locs, maps, fns, lines_pb;
    idmap map_ids, fn_ids;
    int n_types; /* 2, or 4 with the Python-frame samples */
} pprof;

/* The Locations of s's frames, ids base + 1 ... (their mappings and
 * functions with them); python: the Python-frame samples' frames, which
 * have no mapping and one line each (the file and line their name and
 * sym_offset carry). 0, -1 out of memory, or an exit code after the message. */
static int add_locations(pprof *x, const an_cpu_stacks *s, uint32_t base, int python)
{
    st_reader *r = x->r;
    for (uint32_t i = 0; i < s->n_frames; i++) {
        const an_cpu_sframe *f = &s->frames[i];
        int is_new;
        uint64_t mapping = 0;
        if (f->map >= 0 && !python) {
            st_cpu_map m;
            int has = st_reader_cpu_map(r, f->stack, f->map, &m);
            if (has < 0) return an_trace_fail(x->t);
            if (has) {
                mapping = idmap_get(&x->map_ids, f->process, (uint64_t)f->map, &is_new);
                if (!mapping) return -1;
                if (is_new) { /* Mapping */
                    pb_uint(&x->sub, 1, mapping);
                    pb_uint(&x->sub, 2, m.start);
                    pb_uint(&x->sub, 3, m.end);
                    pb_uint(&x->sub, 4, m.file_offset);
                    pb_uint(&x->sub, 5, (uint64_t)str_id(&x->st, m.path));
                    pb_uint(&x->sub, 6, (uint64_t)str_id(&x->st, m.build_id));
                    pb_uint(&x->sub, 7, 1); /* has_functions */
                    pb_msg(&x->maps, 3, &x->sub);
                }
            }
        }
        /* Lines: the address's cpu_lines rows, innermost first (pprof's
         * order: the last line is the caller the others were inlined
         * into); without them one line naming the frame's function. */
        const st_cpu_line *lines = NULL;
        uint32_t n_lines = 0;
        int has_lines = 0;
        int64_t py_line = 0;
        if (python) {
            st_cpu_frame fr;
            int has = st_reader_cpu_frame_name(r, f->stack, f->addr, &fr);
            if (has < 0) return an_trace_fail(x->t);
            if (has && fr.sym_offset < ((uint64_t)1 << 20)) py_line = (int64_t)fr.sym_offset;
        } else {
            has_lines = st_reader_cpu_frame_lines(r, f->stack, f->addr, &lines, &n_lines);
            if (has_lines < 0) return an_trace_fail(x->t);
        }
        if (!has_lines) n_lines = 1;
        for (uint32_t d = 0; d < n_lines; d++) {
            /* name demangled, system_name as recorded */
            const char *fname = s->names[f->name], *fsys = s->names[f->raw_name], *ffile = s->names[f->path];
            int64_t line = py_line;
            /* no system_name: pprof then keeps the name as it is (one equal to its system_name
             * and holding "::" or '<' it simplifies as C++, which turns py::<module> into py::) */
            if (python) {
                ffile = an_cpu_py_file(fname);
                fsys = "";
            }
            if (has_lines) {
                if (lines[d].function[0]) fname = an_demangle(fsys = lines[d].function);
                ffile = lines[d].file;
                line = lines[d].line;
            }
            int64_t name = str_id(&x->st, fname), sys = str_id(&x->st, fsys), file = str_id(&x->st, ffile);
            uint32_t fn = idmap_get(&x->fn_ids, (uint64_t)name, (uint64_t)file, &is_new);
            if (!fn) return -1;
            if (is_new) { /* Function */
                pb_uint(&x->sub2, 1, fn);
                pb_uint(&x->sub2, 2, (uint64_t)name);
                pb_uint(&x->sub2, 3, (uint64_t)sys);
                pb_uint(&x->sub2, 4, (uint64_t)file);
                pb_msg(&x->fns, 5, &x->sub2);
            }
            pb_uint(&x->sub2, 1, fn); /* Line.function_id */
            if (line > 0) pb_uint(&x->sub2, 2, (uint64_t)line);
            pb_msg(&x->lines_pb, 4, &x->sub2);
        }
        pb_uint(&x->sub, 1, base + i + 1); /* Location */
        pb_uint(&x->sub, 2, mapping);
        pb_uint(&x->sub, 3, f->addr);
        pb_bytes(&x->sub, x->lines_pb.v, x->lines_pb.n);
        x->lines_pb.n = 0;
        pb_msg(&x->locs, 4, &x->sub);
    }
    return 0;
}

/* The Samples of s's rows into prof: values at [python ? 2 : 0] of the
 * n_types (the others 0), locations base + 1 ... 0 or -1 out of memory. */
static int add_samples(pprof *x, const an_cpu_stacks *s, uint32_t base, int python, pb *prof)
{
    st_reader *r = x->r;
    pb ids = {0}, vals = {0}, sample = {0};
    for (size_t i = 0; i < s->n_rows; i++) {
        const an_cpu_srow *row = &s->rows[i];
        const st_thread_info *ti = st_reader_thread(r, row->thread);
        for (uint32_t k = 0; k < row->n_frames; k++) pb_varint(&ids, base + s->stack_frames[row->frames_off + k] + 1);
        for (int v = 0; v < x->n_types; v++) {
            int at = v - (python ? 2 : 0);
            pb_varint(&vals, at == 0 ? row->samples : at == 1 ? (uint64_t)row->cpu_ns : 0);
        }
        if (ids.n) pb_msg(&sample, 1, &ids); /* packed location_id, innermost first */
        pb_msg(&sample, 2, &vals);
        label(&sample, &x->sub, &x->st, "thread", ti->name);
        label(&sample, &x->sub, &x->st, "stage", row->stage < 0 ? "(none)" : st_reader_stage(r, (uint32_t)row->stage)->name);
        label(&sample, &x->sub, &x->st, "role", ti->role);
        if (x->t->is_set) {
            char rank[24];
            snprintf(rank, sizeof rank, "%d", ti->rank);
            label(&sample, &x->sub, &x->st, "rank", rank);
        }
        if (python) label(&sample, &x->sub, &x->st, "source", "python-frames");
        pb_msg(prof, 2, &sample);
    }
    int oom = ids.oom || vals.oom || sample.oom;
    free(ids.v);
    free(vals.v);
    free(sample.v);
    return oom ? -1 : 0;
}

/* The whole profile into prof: the kernel's samples (s), then the
 * Python-frame samples (py) as sample types of their own when the trace
 * has them. 0, or an exit code after the message. */
static int build(an_trace *t, const an_cpu_stacks *s, const an_cpu_stacks *py, int has_py, pb *prof)
{
    pprof x;
    memset(&x, 0, sizeof x);
    x.t = t;
    x.r = t->r;
    x.n_types = has_py ? 4 : 2;
    str_id(&x.st, ""); /* string_table[0] must be "" */
    int rc = AN_EXIT_OK;
    value_type(prof, &x.sub, 1, &x.st, "samples", "count"); /* Profile.sample_type */
    value_type(prof, &x.sub, 1, &x.st, "cpu", "nanoseconds");
    if (has_py) {
        value_type(prof, &x.sub, 1, &x.st, "python_samples", "count");
        value_type(prof, &x.sub, 1, &x.st, "python_wall", "nanoseconds");
    }
    if ((rc = add_locations(&x, s, 0, 0)) || (rc = add_locations(&x, py, s->n_frames, 1))) goto end;
    if (add_samples(&x, s, 0, 0, prof) || add_samples(&x, py, s->n_frames, 1, prof)) goto oom;
    pb_bytes(prof, x.maps.v, x.maps.n);
    pb_bytes(prof, x.locs.v, x.locs.n);
    pb_bytes(prof, x.fns.v, x.fns.n);
    int64_t span = t->has_span ? t->span_t1_ns - t->span_t0_ns : 0;
    pb_uint(prof, 10, (uint64_t)span); /* duration_nanos */
    value_type(prof, &x.sub, 11, &x.st, "cpu", "nanoseconds"); /* period_type */
    pb_uint(prof, 12, (uint64_t)s->period_ns); /* period */
    /* default_sample_type: the kernel's CPU time, or with only Python-frame samples their wall time */
    if (has_py) pb_uint(prof, 14, (uint64_t)str_id(&x.st, s->n_rows || !py->n_rows ? "cpu" : "python_wall"));
    if (x.st.out.oom || x.sub.oom || x.sub2.oom || x.lines_pb.oom || x.maps.oom || x.locs.oom || x.fns.oom || prof->oom)
        goto oom;
    pb_bytes(prof, x.st.out.v, x.st.out.n);
    if (prof->oom) goto oom;
    goto done;
end:
    if (rc > 0) goto done;
oom:
    an_error("out of memory");
    rc = AN_EXIT_FAIL;
done:
    strtab_free(&x.st);
    free(x.sub.v);
    free(x.sub2.v);
    free(x.lines_pb.v);
    free(x.locs.v);
    free(x.maps.v);
    free(x.fns.v);
    idmap_free(&x.map_ids);
    idmap_free(&x.fn_ids);
    return rc;
}

/* data as written to the file: gzip with zlib, else as is. 0, or -1 out of memory. */
static int compress_profile(const pb *prof, uint8_t **out, size_t *n)
{
#ifdef AN_HAVE_ZLIB
    z_stream z;
    memset(&z, 0, sizeof z);
    if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) return -1;
    uLong bound = deflateBound(&z, (uLong)prof->n) + 32;
    uint8_t *buf = malloc(bound);
    if (!buf) {
        deflateEnd(&z);
        return -1;
    }
    z.next_in = prof->v;
    z.avail_in = (uInt)prof->n;
    z.next_out = buf;
    z.avail_out = (uInt)bound;
    int zr = prof->n > UINT32_MAX ? Z_BUF_ERROR : deflate(&z, Z_FINISH);
    *n = z.total_out;
    deflateEnd(&z);
    if (zr != Z_STREAM_END) {
        free(buf);
        return -1;
    }
    *out = buf;
    return 0;
#else
    *out = malloc(prof->n ? prof->n : 1);
    if (!*out) return -1;
    memcpy(*out, prof->v, prof->n);
    *n = prof->n;
    return 0;
#endif
}

int an_export_pprof(an_trace *t, const char *path, int overwrite)
{
    int rc = an_cpu_stacks_require(t, "export", "--pprof needs one");
    if (rc) return rc;
    an_cpu_stacks s, py;
    int64_t t0 = t->has_span ? t->span_t0_ns : 0, t1 = t->has_span ? t->span_t1_ns : 0;
    if ((rc = an_cpu_stacks_compute_both(t, t0, t1, &s, &py))) return rc;
    /* the Python sample types whenever the sampler ran, so that profiles of one program compare */
    const char *method = an_trace_meta(t, "python_stacks");
    int has_py = py.n_rows || (method && strcmp(method, "frames") == 0);
    pb prof = {0};
    rc = build(t, &s, &py, has_py, &prof);
    an_cpu_stacks_free(&s);
    an_cpu_stacks_free(&py);
    uint8_t *data = NULL;
    size_t n = 0;
    if (!rc && compress_profile(&prof, &data, &n)) {
        an_error("out of memory");
        rc = AN_EXIT_FAIL;
    }
    free(prof.v);
    if (!rc) {
        an_file f;
        rc = an_file_open(&f, "export", path, overwrite);
        if (!rc) {
            fwrite(data, 1, n, f.f);
            rc = an_file_close(&f, 1);
        }
    }
    free(data);
    return rc;
}
