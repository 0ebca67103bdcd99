/* tmpfiles.c: the temporary paths the analyzer is writing (an output file's
 * PATH.tmpPID, the staging directory of `export --csv`, the SQLite file of
 * `export --rows`), and what SIGINT, SIGTERM and SIGHUP do to them.
 *
 * A command registers a path before it creates it and forgets it once it
 * has been renamed into place or removed. On one of those signals, the
 * handler that analyze's main installs removes every registered file (and
 * SQLite's side files of it), then every registered directory (after the
 * files it is known to hold), erases the progress line, and re-raises the
 * signal with the default action, so the process dies of it and the shell
 * sees status 128 + the signal's number (130 for Ctrl-C). What the handler
 * calls is async-signal-safe (unlink, rmdir, write, sigaction, sigprocmask,
 * raise): every path is built when it is registered, and a slot is
 * published only once complete (docs/analyze.md, "Conventions").
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "analyze.h"

#define AN_TMP_SLOTS 32

typedef struct tmp_slot {
    volatile sig_atomic_t used;
    char **files;   /* removed first */
    uint32_t n_files;
    char *dir;      /* removed after every slot's files (NULL: none) */
    char *key;      /* the path given, for an_tmp_forget */
} tmp_slot;

static tmp_slot slots[AN_TMP_SLOTS];
static volatile sig_atomic_t stderr_is_tty;

static void slot_free(tmp_slot *s)
{
    for (uint32_t i = 0; i < s->n_files; i++) free(s->files[i]);
    free(s->files);
    free(s->dir);
    free(s->key);
    memset(s, 0, sizeof *s);
}

static char *join(const char *a, const char *sep, const char *b)
{
    size_t la = strlen(a), ls = strlen(sep), lb = strlen(b);
    char *p = malloc(la + ls + lb + 1);
    if (!p) return NULL;
    memcpy(p, a, la);
    memcpy(p + la, sep, ls);
    memcpy(p + la + ls, b, lb + 1);
    return p;
}

/* Fills a free slot: files (each names[i] joined to path by sep) and dir. */
static int add(const char *path, const char *sep, const char *const *names, uint32_t n, int is_dir)
{
    int free_ix = -1;
    for (int i = 0; i < AN_TMP_SLOTS && free_ix < 0; i++)
        if (!slots[i].used && !slots[i].key) free_ix = i;
    if (free_ix < 0) return AN_EXIT_FAIL;
    tmp_slot s = {0};
    s.key = strdup(path);
    s.files = calloc(n ? n : 1, sizeof *s.files);
    s.dir = is_dir ? strdup(path) : NULL;
    int ok = s.key && s.files && (!is_dir || s.dir);
    for (uint32_t i = 0; ok && i < n; i++) {
        s.files[i] = join(path, sep, names[i]);
        ok = s.files[i] != NULL;
        s.n_files += ok;
    }
    if (!ok) {
        slot_free(&s);
        an_error("out of memory");
        return AN_EXIT_FAIL;
    }
    slots[free_ix].files = s.files;
    slots[free_ix].n_files = s.n_files;
    slots[free_ix].dir = s.dir;
    slots[free_ix].key = s.key;
    __atomic_signal_fence(__ATOMIC_SEQ_CST); /* the slot is whole before the handler may see it */
    slots[free_ix].used = 1;
    return AN_EXIT_OK;
}

int an_tmp_add_file(const char *path)
{
    /* the file, and what SQLite may create beside it */
    static const char *const suffixes[] = {"", "-journal", "-wal", "-shm"};
    return add(path, "", suffixes, 4, 0);
}

int an_tmp_add_dir(const char *dir, const char *const *names, uint32_t n)
{
    return add(dir, "/", names, n, 1);
}

void an_tmp_forget(const char *path)
{
    if (!path) return;
    for (int i = 0; i < AN_TMP_SLOTS; i++) {
        if (!slots[i].used || strcmp(slots[i].key, path) != 0) continue;
        slots[i].used = 0;
        __atomic_signal_fence(__ATOMIC_SEQ_CST);
        slot_free(&slots[i]);
        return;
    }
}

static void on_signal(int sig)
{
    int saved = errno;
    for (int i = 0; i < AN_TMP_SLOTS; i++)
        if (slots[i].used)
            for (uint32_t k = 0; k < slots[i].n_files; k++) unlink(slots[i].files[k]);
    for (int i = 0; i < AN_TMP_SLOTS; i++)
        if (slots[i].used && slots[i].dir) rmdir(slots[i].dir);
    /* The progress line (docs/analyze.md, "Progress") is drawn only on a terminal and every
     * other line on stderr ends in a newline, so erasing the current line there takes the
     * progress line away and nothing else. */
    if (stderr_is_tty) {
        static const char erase[] = "\r\033[K";
        ssize_t w = write(STDERR_FILENO, erase, sizeof erase - 1);
        (void)w;
    }
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, NULL);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, sig);
    sigprocmask(SIG_UNBLOCK, &set, NULL);
    raise(sig);
    errno = saved; /* not reached: the default action of these signals ends the process */
}

int an_signals_install(void)
{
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
    stderr_is_tty = isatty(STDERR_FILENO);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) sigaddset(&sa.sa_mask, sigs[i]);
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        struct sigaction old;
        /* a signal the caller ignores (nohup, a background job's SIGINT) stays ignored */
        if (sigaction(sigs[i], NULL, &old) != 0) return AN_EXIT_FAIL;
        if (old.sa_handler == SIG_IGN) continue;
        if (sigaction(sigs[i], &sa, NULL) != 0) return AN_EXIT_FAIL;
    }
    return AN_EXIT_OK;
}
