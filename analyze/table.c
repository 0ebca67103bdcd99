/* table.c: output tables of `analyze` in three formats.
 *
 * A command builds rows cell by cell (an_put_*) against a column list; this
 * file renders them as aligned text (the default: strings left, numbers
 * right, names from traces sanitized so a trace cannot send escape sequences
 * to a terminal), CSV (RFC 4180 quoting, one header line per table) or JSON
 * (one object per document, each table an array of row objects, numbers as
 * numbers, NULL and non-finite values as null, strings always valid UTF-8).
 *
 * Text needs column widths before it prints, so a text table keeps its first
 * TEXT_BUFFER_ROWS rows, sizes the columns from them and then streams the
 * rest (a wider cell later only shifts its own line). CSV and JSON stream
 * from the first row, so `analyze sql` or an export can print any number of
 * rows in constant memory.
 */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "analyze.h"

#define TEXT_BUFFER_ROWS 1000
#define COL_GAP 2

int an_parse_format(const char *s, an_format *out)
{
    if (strcmp(s, "text") == 0) *out = AN_FMT_TEXT;
    else if (strcmp(s, "csv") == 0) *out = AN_FMT_CSV;
    else if (strcmp(s, "json") == 0) *out = AN_FMT_JSON;
    else return -1;
    return 0;
}

struct an_out {
    FILE *f;
    an_format fmt;
    const char *only; /* --table: print only the tables of this name */
    int n_tables;     /* printed */
    int after_table; /* text: the next thing starts with a blank line */
    int oom;
};

/* A text cell: its rendered bytes in the arena, and whether it is a number. */
typedef struct text_cell {
    size_t off, len;
    int right;
} text_cell;

struct an_table {
    an_out *out;
    int muted;           /* not the --table asked for: built, not printed */
    const an_col *cols;
    int n_cols, col;     /* cell index in the current row */
    uint64_t n_rows;
    /* text */
    size_t *width;
    char *arena;
    size_t arena_len, arena_cap;
    text_cell *cells;    /* [rows * n_cols] while buffering */
    size_t n_cells, cells_cap;
    uint8_t *row_gap;    /* per buffered row: 1 = a gap line, not a row */
    size_t n_buf_rows, row_gap_cap;
    int streaming;
    int pending_gap;
};

/* ---- number formatting --------------------------------------------------------- */

const char *an_clean(const char *s, char *buf, size_t size)
{
    size_t i = 0;
    for (; s && s[i] && i + 1 < size; i++) buf[i] = (unsigned char)s[i] < 0x20 || s[i] == 0x7f ? '?' : s[i];
    buf[i] = '\0';
    return buf;
}

const char *an_fmt_pct1(double v, char *buf, size_t size)
{
    if (!isfinite(v)) {
        snprintf(buf, size, "-");
        return buf;
    }
    long long tenths = llround(v * 10.0);
    snprintf(buf, size, "%s%lld.%lld%%", tenths < 0 ? "-" : "", llabs(tenths) / 10, llabs(tenths) % 10);
    return buf;
}

int an_fmt_i64(char *buf, int64_t v)
{
    char tmp[24];
    int n = 0, len = 0;
    uint64_t mag = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do {
        tmp[n++] = (char)('0' + mag % 10);
        mag /= 10;
    } while (mag);
    if (v < 0) buf[len++] = '-';
    while (n) buf[len++] = tmp[--n];
    buf[len] = '\0';
    return len;
}

static const uint64_t pow10_u64[] = {1ULL, 10ULL, 100ULL, 1000ULL, 10000ULL, 100000ULL,
                                     1000000ULL, 10000000ULL, 100000000ULL, 1000000000ULL};

int an_fmt_fixed(char *buf, int64_t v, int digits, int decimals)
{
    if (digits < 0) digits = 0;
    if (digits > 9) digits = 9;
    if (decimals > digits) decimals = digits;
    if (decimals < 0) decimals = 0;
    uint64_t mag = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    uint64_t div = pow10_u64[digits - decimals];
    if (div > 1) mag = mag / div + (mag % div >= div / 2 ? 1 : 0);
    uint64_t unit = pow10_u64[decimals];
    uint64_t whole = mag / unit, frac = mag % unit;
    int len = 0;
    if (v < 0 && mag != 0) buf[len++] = '-';
    char tmp[24];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + whole % 10);
        whole /= 10;
    } while (whole);
    while (n) buf[len++] = tmp[--n];
    if (decimals > 0) {
        buf[len++] = '.';
        for (int i = decimals - 1; i >= 0; i--) {
            buf[len + i] = (char)('0' + frac % 10);
            frac /= 10;
        }
        len += decimals;
    }
    buf[len] = '\0';
    return len;
}

/* ---- escaping ------------------------------------------------------------------------ */

/* Length of the valid UTF-8 sequence at s (1..4), or 0 when invalid. */
int an_utf8_len(const unsigned char *s)
{
    unsigned char c = s[0];
    if (c < 0x80) return 1;
    int n;
    unsigned min;
    unsigned cp;
    if (c >= 0xc2 && c <= 0xdf) { n = 2; cp = c & 0x1f; min = 0x80; }
    else if (c >= 0xe0 && c <= 0xef) { n = 3; cp = c & 0x0f; min = 0x800; }
    else if (c >= 0xf0 && c <= 0xf4) { n = 4; cp = c & 0x07; min = 0x10000; }
    else return 0;
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0; /* also stops at the NUL */
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
    return n;
}

void an_json_string(FILE *f, const char *str)
{
    const unsigned char *s = (const unsigned char *)(str ? str : "");
    putc('"', f);
    while (*s) {
        unsigned char c = *s;
        if (c == '"' || c == '\\') {
            putc('\\', f);
            putc(c, f);
            s++;
        } else if (c < 0x20 || c == 0x7f) {
            switch (c) {
            case '\n': fputs("\\n", f); break;
            case '\t': fputs("\\t", f); break;
            case '\r': fputs("\\r", f); break;
            default: fprintf(f, "\\u%04x", c); break;
            }
            s++;
        } else if (c < 0x80) {
            putc(c, f);
            s++;
        } else {
            int n = an_utf8_len(s);
            if (n == 0) {
                fputs("\\ufffd", f); /* not UTF-8: replaced, so the JSON stays valid */
                s++;
            } else {
                fwrite(s, 1, (size_t)n, f);
                s += n;
            }
        }
    }
    putc('"', f);
}

void an_csv_field(FILE *f, const char *str)
{
    const char *s = str ? str : "";
    size_t len = strlen(s);
    int quote = len > 0 && (s[0] == ' ' || s[len - 1] == ' ');
    for (const char *p = s; *p && !quote; p++)
        if (*p == ',' || *p == '"' || *p == '\n' || *p == '\r') quote = 1;
    if (!quote) {
        fwrite(s, 1, len, f);
        return;
    }
    putc('"', f);
    for (const char *p = s; *p; p++) {
        if (*p == '"') putc('"', f);
        putc(*p, f);
    }
    putc('"', f);
}

/* ---- documents ------------------------------------------------------------------------ */

/* --table: the name asked for, whether a table of that name was printed, and
 * the names of the tables the documents had, for the error when none was. */
static const char *only_name;
static int only_found;
static char only_seen[512];

void an_out_only(const char *name)
{
    only_name = name;
    only_found = 0;
    only_seen[0] = '\0';
}

int an_out_only_missing(char *printed, size_t size)
{
    snprintf(printed, size, "%s", only_seen[0] ? only_seen : "none");
    return only_name && !only_found;
}

/* Notes a table's name for an_out_only_missing (each name once). */
static void only_note(const char *name)
{
    size_t len = strlen(name), used = strlen(only_seen);
    for (const char *p = only_seen; (p = strstr(p, name)) != NULL; p += len)
        if ((p == only_seen || p[-1] == ' ') && (p[len] == ',' || p[len] == '\0')) return;
    if (used + len + 3 < sizeof only_seen)
        snprintf(only_seen + used, sizeof only_seen - used, "%s%s", used ? ", " : "", name);
}

an_out *an_out_new(FILE *f, an_format fmt)
{
    an_out *o = calloc(1, sizeof *o);
    if (!o) return NULL;
    o->f = f;
    o->fmt = fmt;
    o->only = only_name;
    /* With --table the object opens at the table, so that a run without it prints nothing. */
    if (fmt == AN_FMT_JSON && !o->only) fputs("{", f);
    return o;
}

an_format an_out_format(const an_out *o) { return o->fmt; }

void an_out_text(an_out *o, const char *fmt, ...)
{
    if (o->fmt != AN_FMT_TEXT) return;
    if (o->after_table) putc('\n', o->f);
    o->after_table = 0;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(o->f, fmt, ap);
    va_end(ap);
}

int an_out_finish(an_out *o)
{
    if (!o) return -1;
    if (o->fmt == AN_FMT_JSON && !(o->only && !o->n_tables)) fputs(o->n_tables ? "\n}\n" : "}\n", o->f);
    int bad = o->oom || fflush(o->f) != 0 || ferror(o->f);
    free(o);
    return bad ? -1 : 0;
}

/* ---- tables ---------------------------------------------------------------------------- */

static int is_number_type(an_type t) { return t == AN_T_INT || t == AN_T_MS || t == AN_T_PCT || t == AN_T_REAL; }

an_table *an_table_new(an_out *o, const char *name, const an_col *cols, int n_cols)
{
    an_table *t = calloc(1, sizeof *t);
    if (!t) {
        o->oom = 1;
        return NULL;
    }
    t->out = o;
    t->cols = cols;
    t->n_cols = n_cols;
    if (o->only) {
        only_note(name);
        if (strcmp(name, o->only) != 0) {
            t->muted = 1;
            return t;
        }
        only_found = 1;
        if (o->fmt == AN_FMT_JSON && !o->n_tables) fputs("{", o->f);
    }
    FILE *f = o->f;
    switch (o->fmt) {
    case AN_FMT_TEXT:
        t->width = calloc((size_t)n_cols, sizeof *t->width);
        if (!t->width) {
            free(t);
            o->oom = 1;
            return NULL;
        }
        for (int i = 0; i < n_cols; i++) t->width[i] = strlen(cols[i].name);
        if (o->after_table) putc('\n', f);
        o->after_table = 0;
        break;
    case AN_FMT_CSV:
        if (o->n_tables) putc('\n', f);
        for (int i = 0; i < n_cols; i++) {
            if (i) putc(',', f);
            an_csv_field(f, cols[i].name);
        }
        putc('\n', f);
        break;
    case AN_FMT_JSON:
        fputs(o->n_tables ? ",\n" : "\n", f);
        an_json_string(f, name);
        fputs(": [", f);
        break;
    }
    o->n_tables++;
    return t;
}

static int arena_add(an_table *t, const char *s, size_t len)
{
    if (len == 0) return 0; /* an empty first cell: the arena is still NULL, and memcpy(NULL, .., 0) is undefined */
    if (t->arena_len + len > t->arena_cap) {
        size_t cap = t->arena_cap ? t->arena_cap * 2 : 4096;
        while (cap < t->arena_len + len) cap *= 2;
        char *a = realloc(t->arena, cap);
        if (!a) return -1;
        t->arena = a;
        t->arena_cap = cap;
    }
    memcpy(t->arena + t->arena_len, s, len);
    t->arena_len += len;
    return 0;
}

static void put_spaces(FILE *f, size_t n)
{
    while (n--) putc(' ', f);
}

/* Prints one text cell padded to its column (no trailing spaces at the end
 * of a line). */
static void print_text_cell(an_table *t, int col, const char *s, size_t len, int right)
{
    FILE *f = t->out->f;
    size_t w = t->width[col];
    if (col) put_spaces(f, COL_GAP);
    if (right && len < w) put_spaces(f, w - len);
    fwrite(s, 1, len, f);
    if (!right && len < w && col < t->n_cols - 1) put_spaces(f, w - len);
}

static void print_text_header(an_table *t)
{
    for (int i = 0; i < t->n_cols; i++)
        print_text_cell(t, i, t->cols[i].name, strlen(t->cols[i].name), is_number_type(t->cols[i].type));
    putc('\n', t->out->f);
}

/* Sizes the columns from the buffered rows, prints them, and streams from now on. */
static void flush_text(an_table *t)
{
    if (t->streaming) return;
    print_text_header(t);
    size_t cell = 0;
    for (size_t r = 0; r < t->n_buf_rows; r++) {
        if (t->row_gap[r]) {
            putc('\n', t->out->f);
            continue;
        }
        for (int c = 0; c < t->n_cols; c++, cell++)
            print_text_cell(t, c, t->arena + t->cells[cell].off, t->cells[cell].len, t->cells[cell].right);
        putc('\n', t->out->f);
    }
    free(t->cells);
    free(t->arena);
    free(t->row_gap);
    t->cells = NULL;
    t->arena = NULL;
    t->row_gap = NULL;
    t->arena_len = t->arena_cap = t->n_cells = t->cells_cap = 0;
    t->streaming = 1;
}

static int add_buf_row(an_table *t, int gap)
{
    if (t->n_buf_rows == t->row_gap_cap) {
        size_t cap = t->row_gap_cap ? t->row_gap_cap * 2 : 64;
        uint8_t *g = realloc(t->row_gap, cap);
        if (!g) return -1;
        t->row_gap = g;
        t->row_gap_cap = cap;
    }
    t->row_gap[t->n_buf_rows++] = (uint8_t)gap;
    return 0;
}

/* Text: keeps (buffering) or prints (streaming) one rendered cell. */
static void text_cell_put(an_table *t, const char *s, size_t len, int right)
{
    int col = t->col;
    if (t->streaming) {
        print_text_cell(t, col, s, len, right);
        return;
    }
    if (len > t->width[col]) t->width[col] = len;
    if (t->n_cells == t->cells_cap) {
        size_t cap = t->cells_cap ? t->cells_cap * 2 : 256;
        text_cell *c = realloc(t->cells, cap * sizeof *c);
        if (!c) {
            t->out->oom = 1;
            return;
        }
        t->cells = c;
        t->cells_cap = cap;
    }
    size_t off = t->arena_len;
    if (arena_add(t, s, len)) {
        t->out->oom = 1;
        return;
    }
    t->cells[t->n_cells++] = (text_cell){off, len, right};
}

/* Every cell goes through here with its text rendering (for text) and its
 * data rendering (CSV / JSON); `quoted` data is a string. */
static void put_cell(an_table *t, const char *text, const char *data, int is_string, int is_null)
{
    if (!t || t->col >= t->n_cols) return;
    if (t->muted) {
        t->col++;
        return;
    }
    FILE *f = t->out->f;
    switch (t->out->fmt) {
    case AN_FMT_TEXT: {
        if (is_null) {
            /* Aligned as its column: "-" under a name, at the right under a number. */
            an_type type = t->cols[t->col].type;
            text_cell_put(t, "-", 1, type != AN_T_STR && type != AN_T_ANY);
            break;
        }
        const char *s = text;
        size_t len = strlen(s);
        if (is_string && len > 0) {
            /* A name from the trace: no control characters on a terminal. */
            char stack[256];
            char *clean = len < sizeof stack ? stack : malloc(len + 1);
            if (!clean) {
                t->out->oom = 1;
                break;
            }
            for (size_t i = 0; i < len; i++) {
                unsigned char c = (unsigned char)s[i];
                clean[i] = (c < 0x20 || c == 0x7f) ? '?' : (char)c;
            }
            text_cell_put(t, clean, len, 0);
            if (clean != stack) free(clean);
        } else {
            text_cell_put(t, s, len, !is_string);
        }
        break;
    }
    case AN_FMT_CSV:
        if (t->col) putc(',', f);
        if (is_null) break;
        if (is_string) an_csv_field(f, data);
        else fputs(data, f);
        break;
    case AN_FMT_JSON:
        fputs(t->col ? ", " : (t->n_rows ? ",\n  {" : "\n  {"), f);
        an_json_string(f, t->cols[t->col].name);
        fputs(": ", f);
        if (is_null) fputs("null", f);
        else if (is_string) an_json_string(f, data);
        else fputs(data, f);
        break;
    }
    t->col++;
}

void an_put_str(an_table *t, const char *s)
{
    put_cell(t, s, s, 1, s == NULL);
}

void an_put_null(an_table *t) { put_cell(t, NULL, NULL, 0, 1); }

void an_put_int(an_table *t, int64_t v)
{
    char buf[32];
    an_fmt_i64(buf, v);
    put_cell(t, buf, buf, 0, 0);
}

void an_put_ns(an_table *t, int64_t ns)
{
    char text[40], data[40];
    an_fmt_fixed(text, ns, 6, 3);
    an_fmt_fixed(data, ns, 6, 6);
    put_cell(t, text, data, 0, 0);
}

/* The shortest decimal that reads back as v (62.5, 44.0625, 33.333333333333336). */
static void shortest(char *buf, size_t size, double v)
{
    for (int digits = 15; digits <= 17; digits++) {
        snprintf(buf, size, "%.*g", digits, v);
        if (strtod(buf, NULL) == v) return;
    }
}

void an_put_pct(an_table *t, double pct)
{
    if (!isfinite(pct)) {
        an_put_null(t);
        return;
    }
    char text[64], data[64];
    /* Tenths rounded half up, like the profile lines (printf would round 1.25 to 1.2). */
    long long tenths = llround(pct * 10.0);
    snprintf(text, sizeof text, "%s%lld.%lld%%", tenths < 0 ? "-" : "", llabs(tenths) / 10, llabs(tenths) % 10);
    shortest(data, sizeof data, pct);
    put_cell(t, text, data, 0, 0);
}

void an_put_real(an_table *t, double v)
{
    if (!isfinite(v)) {
        an_put_null(t);
        return;
    }
    int dec = t && t->col < t->n_cols && t->cols[t->col].type == AN_T_REAL ? t->cols[t->col].decimals : -1;
    char text[64], data[64];
    if (dec >= 0) {
        snprintf(text, sizeof text, "%.*f", dec, v);
        snprintf(data, sizeof data, "%.*f", dec, v);
    } else {
        /* AN_T_ANY (sql): short for people, round-trip exact for programs. */
        snprintf(text, sizeof text, "%.15g", v);
        shortest(data, sizeof data, v);
    }
    put_cell(t, text, data, 0, 0);
}

void an_row_end(an_table *t)
{
    if (!t) return;
    while (t->col < t->n_cols) an_put_null(t); /* a short row is padded with nulls */
    FILE *f = t->out->f;
    switch (t->muted ? -1 : (int)t->out->fmt) {
    case AN_FMT_TEXT:
        if (t->streaming) putc('\n', f);
        else if (add_buf_row(t, 0)) t->out->oom = 1;
        else if (t->n_buf_rows >= TEXT_BUFFER_ROWS) flush_text(t);
        break;
    case AN_FMT_CSV: putc('\n', f); break;
    case AN_FMT_JSON: putc('}', f); break;
    }
    t->col = 0;
    t->n_rows++;
}

void an_table_gap(an_table *t)
{
    if (!t || t->muted || t->out->fmt != AN_FMT_TEXT || t->n_rows == 0) return;
    if (t->streaming) putc('\n', t->out->f);
    else if (add_buf_row(t, 1)) t->out->oom = 1;
}

void an_table_end(an_table *t)
{
    if (!t) return;
    if (t->col) an_row_end(t);
    switch (t->muted ? -1 : (int)t->out->fmt) {
    case AN_FMT_TEXT:
        /* A trailing gap would leave an empty line before the next table. */
        while (!t->streaming && t->n_buf_rows && t->row_gap[t->n_buf_rows - 1]) t->n_buf_rows--;
        flush_text(t);
        t->out->after_table = 1;
        break;
    case AN_FMT_CSV: break;
    case AN_FMT_JSON: fputs(t->n_rows ? "\n]" : "]", t->out->f); break;
    }
    free(t->width);
    free(t->cells);
    free(t->arena);
    free(t->row_gap);
    free(t);
}

void an_put_real_or_null(an_table *t, double v)
{
    if (isfinite(v)) an_put_real(t, v);
    else an_put_null(t);
}

void an_put_pct_or_null(an_table *t, double v)
{
    if (isfinite(v)) an_put_pct(t, v);
    else an_put_null(t);
}

double an_change_pct(double a, double b) { return a > 0 && isfinite(b) ? 100.0 * (b - a) / a : NAN; }

const char *an_fmt_signed_pct(double v, char *buf, size_t size)
{
    int plus = isfinite(v) && llround(v * 10.0) > 0;
    buf[0] = '+';
    an_fmt_pct1(v, buf + plus, size - 1);
    return buf;
}
