/* data.c: synthetic and file token sources for the loader (see data.h). Both produce one
 * endless stream of (token, document id, position) that tr_data_next cuts into sequences. */
#include "data.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"

#define SUCCESSORS 4
static const double successor_cdf[SUCCESSORS] = {0.90, 0.95, 0.97, 0.98}; /* rest: jump */

/* Documents use max(64, vocab/4) of the vocabulary (the rest is never seen, like rare
 * tokens): a dense chain gives the drafter enough repetitions to learn from in a few dozen
 * steps of the tiny preset. */
static int active_tokens(int vocab)
{
    int active = vocab / 4 > 64 ? vocab / 4 : 64;
    return active < vocab ? active : vocab;
}

struct tr_data {
    int vocab, active;
    uint64_t rng;
    /* synthetic */
    int32_t *successors; /* [vocab, SUCCESSORS] */
    int min_doc_len, max_doc_len;
    int32_t current_token, doc_left;
    /* file */
    unsigned char *text;
    size_t text_len, text_at;
    /* both */
    int32_t doc_id, position;
};

static int open_file(tr_data *d, const char *path, char *err, size_t n)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, n, "--data: cannot open '%s': %s", path, strerror(errno));
        return -1;
    }
    size_t cap = 1 << 16, len = 0;
    unsigned char *buf = malloc(cap);
    for (;;) {
        if (!buf) {
            fclose(f);
            snprintf(err, n, "--data: out of memory reading '%s'", path);
            return -1;
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0)
            break;
        if (len == cap) {
            unsigned char *bigger = realloc(buf, cap * 2);
            if (!bigger)
                free(buf);
            buf = bigger;
            cap *= 2;
        }
    }
    int failed = ferror(f);
    fclose(f);
    if (failed || len == 0) {
        free(buf);
        snprintf(err, n, failed ? "--data: cannot read '%s'" : "--data: '%s' is empty", path);
        return -1;
    }
    d->text = buf;
    d->text_len = len;
    return 0;
}

int tr_data_open(tr_data **out, const tr_config *cfg, char *err, size_t n)
{
    *out = NULL;
    tr_data *d = calloc(1, sizeof *d);
    if (!d) {
        snprintf(err, n, "out of memory");
        return -1;
    }
    d->vocab = cfg->vocab;
    d->active = active_tokens(cfg->vocab);
    d->rng = tr_rng_stream(cfg->seed, 0xDA7A);
    if (cfg->data_path) {
        if (open_file(d, cfg->data_path, err, n)) {
            free(d);
            return -1;
        }
    } else {
        d->successors = malloc((size_t)cfg->vocab * SUCCESSORS * sizeof *d->successors);
        if (!d->successors) {
            free(d);
            snprintf(err, n, "out of memory");
            return -1;
        }
        uint64_t chain = tr_rng_stream(cfg->seed, 0xC4A1);
        for (size_t i = 0; i < (size_t)cfg->vocab * SUCCESSORS; i++)
            d->successors[i] = (int32_t)tr_rng_below(&chain, (uint32_t)d->active);
        d->min_doc_len = cfg->seq_len / 8 > 4 ? cfg->seq_len / 8 : 4;
        d->max_doc_len = cfg->seq_len * 3 / 4 > d->min_doc_len ? cfg->seq_len * 3 / 4
                                                                : d->min_doc_len + 1;
        d->doc_id = -1;
    }
    *out = d;
    return 0;
}

static void next_synthetic(tr_data *d, int32_t *token, int32_t *doc, int32_t *pos)
{
    if (d->doc_left == 0) {
        d->doc_id++;
        d->position = 0;
        d->doc_left = d->min_doc_len +
                      (int32_t)tr_rng_below(&d->rng, (uint32_t)(d->max_doc_len - d->min_doc_len + 1));
        d->current_token = (int32_t)tr_rng_below(&d->rng, (uint32_t)d->active);
    } else {
        double u = tr_rng_uniform(&d->rng);
        int k = 0;
        while (k < SUCCESSORS && u >= successor_cdf[k])
            k++;
        d->current_token = k < SUCCESSORS
                               ? d->successors[(size_t)d->current_token * SUCCESSORS + k]
                               : (int32_t)tr_rng_below(&d->rng, (uint32_t)d->active);
    }
    *token = d->current_token;
    *doc = d->doc_id;
    *pos = d->position++;
    d->doc_left--;
}

/* Paragraphs are documents: a blank line ("\n\n") ends one. */
static void next_file(tr_data *d, int32_t *token, int32_t *doc, int32_t *pos)
{
    if (d->text_at == d->text_len) {
        d->text_at = 0;
        d->doc_id++;
        d->position = 0;
    }
    unsigned char c = d->text[d->text_at++];
    *token = c;
    *doc = d->doc_id;
    *pos = d->position++;
    if (c == '\n' && d->text_at < d->text_len && d->text[d->text_at] == '\n') {
        /* the second newline ends this document too; the next token starts a new one */
        *token = c;
        d->text_at++;
        d->doc_id++;
        d->position = 0;
    }
}

void tr_data_next(tr_data *d, tr_batch *b)
{
    size_t n = (size_t)b->n_seqs * b->seq_len;
    for (size_t i = 0; i < n; i++) {
        if (d->text)
            next_file(d, &b->tokens[i], &b->doc_ids[i], &b->positions[i]);
        else
            next_synthetic(d, &b->tokens[i], &b->doc_ids[i], &b->positions[i]);
    }
}

int32_t tr_data_successor(const tr_data *d, int32_t token, int k)
{
    if (!d->successors || token < 0 || token >= d->vocab || k < 0 || k >= SUCCESSORS) return -1;
    return d->successors[(size_t)token * SUCCESSORS + k];
}

void tr_data_close(tr_data *d)
{
    if (!d)
        return;
    free(d->successors);
    free(d->text);
    free(d);
}
