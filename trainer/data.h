/* data.h: the loader's token source. Batches are `batch` sequences of `seq_len` tokens packed
 * from a stream of documents; each token carries its document id and its position inside the
 * document (both restart nothing at a sequence cut: a document split over two sequences keeps
 * counting). Two sources:
 *  - synthetic (default): documents (lengths uniform in seq_len/8 .. 3*seq_len/4) walk a
 *    seeded sparse Markov chain over max(64, vocab/4) of the tokens: each token has four
 *    successors, taken with probabilities .90/.05/.02/.01, and a 2% jump anywhere, so the next
 *    tokens are predictable and the drafter's loss really falls;
 *  - a text file (--data): byte tokens, paragraphs (split at blank lines) are documents, the
 *    file is read cyclically.
 */
#ifndef TR_DATA_H
#define TR_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "config.h"

typedef struct tr_data tr_data;

/* 0, or -1 with a one-line message in err (unreadable or empty file, no memory). */
int tr_data_open(tr_data **out, const tr_config *cfg, char *err, size_t err_size);
/* Fills batch->tokens, doc_ids, positions ([n_seqs * seq_len] each) with the next batch. */
void tr_data_next(tr_data *data, tr_batch *batch);
void tr_data_close(tr_data *data);
/* The synthetic chain's k-th successor of token (k < 4, the most likely first), for the
 * tests; -1 for a file source or a token out of range. */
int32_t tr_data_successor(const tr_data *data, int32_t token, int k);

#endif
