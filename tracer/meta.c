/* meta.c: st_meta_set, the program's own keys in the trace's meta table
 * (docs/trace-format.md, "meta"): what a program knows of its run that the
 * library cannot, such as the Python package's python_stacks. A call from
 * any thread keeps the pair under the trace's lock; the writer stores the
 * pairs not yet written at its next commit (st_meta_store), so the calling
 * thread never touches the database. The library's own keys are refused,
 * so that a program cannot overwrite what the library measured. */
#include <stdlib.h>
#include <string.h>

#include "st_internal.h"
#include "st_store.h"

#define META_KEY_MAX 64
#define META_VALUE_MAX 4096
#define META_ITEMS_MAX 32

struct st_meta_item {
    char key[META_KEY_MAX + 1];
    char *value;
    int written;
};

/* The keys of docs/trace-format.md's meta table; with the cpu_, clock_ and
 * gpu_ prefixes, every key the library writes. */
static const char *const library_keys[] = {
    "schema_version", "status", "program", "tool_version", "run_id", "start_utc", "start_ns",
    "end_ns", "clock", "tsc_hz", "host", "pid", "argv", "rank", "world_size", "local_rank",
    "device", "profile_interval", "commit_ms", "ring_records", "dropped_events", "unmatched_ends",
    "rejected_steps", "bad_counters", "failed_commits", "lost_events", "nvtx"};
static const char *const library_prefixes[] = {"cpu_", "clock_", "gpu_"};

static int key_refused(const char *key)
{
    size_t n = strlen(key);
    if (n == 0 || n > META_KEY_MAX) return 1;
    for (size_t i = 0; i < n; i++)
        if (!((key[i] >= 'a' && key[i] <= 'z') || (key[i] >= '0' && key[i] <= '9') || key[i] == '_')) return 1;
    for (size_t i = 0; i < sizeof library_keys / sizeof *library_keys; i++)
        if (strcmp(key, library_keys[i]) == 0) return 1;
    for (size_t i = 0; i < sizeof library_prefixes / sizeof *library_prefixes; i++)
        if (strncmp(key, library_prefixes[i], strlen(library_prefixes[i])) == 0) return 1;
    return 0;
}

ST_API int st_meta_set(st_trace *t, const char *key, const char *value)
{
    if (!key || key_refused(key))
        return st_set_error(ST_EINVAL,
                            "st_meta_set: key '%.80s' refused: 1..64 bytes of [a-z0-9_], not one of the "
                            "library's own keys (docs/trace-format.md, meta; no cpu_, clock_ or gpu_ prefix)",
                            key ? key : "(null)");
    if (!value || strlen(value) > META_VALUE_MAX)
        return st_set_error(ST_EINVAL, "st_meta_set: the value of '%s' is missing or longer than %d bytes", key,
                            META_VALUE_MAX);
    if (!t) return st_set_error(ST_ESTATE, "st_meta_set: no trace");
    if (!t->opt.enabled) return ST_OK;
    char *copy = strdup(value);
    if (!copy) return st_set_error(ST_ENOMEM, "out of memory");
    int rc = ST_OK;
    pthread_mutex_lock(&t->lock);
    size_t i = 0;
    while (i < t->n_meta_items && strcmp(t->meta_items[i].key, key) != 0) i++;
    if (i == t->n_meta_items) {
        if (!t->meta_items) t->meta_items = calloc(META_ITEMS_MAX, sizeof *t->meta_items);
        if (!t->meta_items) rc = st_set_error(ST_ENOMEM, "out of memory");
        else if (t->n_meta_items == META_ITEMS_MAX)
            rc = st_set_error(ST_ELIMIT, "st_meta_set: more than %d keys", META_ITEMS_MAX);
        else
            memcpy(t->meta_items[t->n_meta_items++].key, key, strlen(key) + 1);
    }
    if (rc == ST_OK) {
        free(t->meta_items[i].value);
        t->meta_items[i].value = copy;
        t->meta_items[i].written = 0;
    } else {
        free(copy);
    }
    pthread_mutex_unlock(&t->lock);
    return rc;
}

void st_meta_store(st_trace *t, st_store *store)
{
    pthread_mutex_lock(&t->lock);
    for (size_t i = 0; i < t->n_meta_items; i++) {
        struct st_meta_item *m = &t->meta_items[i];
        if (m->written) continue;
        st_val v[2] = {ST_VTEXT(m->key), ST_VTEXT(m->value)};
        st_store_row(store, ST_S_META, 2, v); /* copied by the store */
        m->written = 1;
    }
    pthread_mutex_unlock(&t->lock);
}

void st_meta_free(st_trace *t)
{
    for (size_t i = 0; i < t->n_meta_items; i++) free(t->meta_items[i].value);
    free(t->meta_items);
    t->meta_items = NULL;
    t->n_meta_items = 0;
}
