/* embedding.c: token embedding lookup, forward only (the table belongs to the frozen target and
 * is shared by the drafter for its block inputs). */
#include <string.h>

#include "kernels.h"

int k_embedding_fwd(float *out, const int32_t *tokens, const float *table, int T, int d,
                    int vocab)
{
    int status = K_OK;
    for (int t = 0; t < T; t++) {
        float *row = out + (size_t)t * d;
        int32_t tok = tokens[t];
        if (tok < 0 || tok >= vocab) {
            memset(row, 0, (size_t)d * sizeof(float));
            status = K_EINVAL;
            continue;
        }
        memcpy(row, table + (size_t)tok * d, (size_t)d * sizeof(float));
    }
    return status;
}
