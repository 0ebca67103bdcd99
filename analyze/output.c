/* output.c: the files the analyzer writes (export, report). A regular file
 * (or a new one) is written under a temporary name and renamed into place
 * only when complete, so a failed run leaves nothing half-written; anything
 * else (/dev/null, /dev/stdout, a FIFO) is what the user wants written to,
 * and is written directly; "-" is standard output. The temporary name is
 * registered (tmpfiles.c) while it exists, so that a signal removes it. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "analyze.h"

#define AN_FILE_BUFFER (1 << 20)

int an_path_kind(const char *path)
{
    struct stat sb;
    if (lstat(path, &sb) != 0) return AN_PATH_NONE;
    if (S_ISREG(sb.st_mode)) return AN_PATH_FILE;
    if (S_ISDIR(sb.st_mode)) return AN_PATH_DIR;
    return AN_PATH_OTHER; /* device, FIFO, socket, symbolic link */
}

int an_out_allowed(const char *what, const char *path, int overwrite)
{
    int kind = an_path_kind(path);
    if (kind == AN_PATH_DIR) {
        an_error("%s: %s is a directory", what, path);
        return AN_EXIT_USAGE;
    }
    if (kind == AN_PATH_FILE && !overwrite) {
        an_error("%s: %s exists (pass --overwrite to replace it)", what, path);
        return AN_EXIT_USAGE;
    }
    return AN_EXIT_OK;
}

int an_file_open(an_file *o, const char *what, const char *path, int overwrite)
{
    memset(o, 0, sizeof *o);
    o->what = what;
    o->path = path;
    if (strcmp(path, "-") == 0) {
        o->f = stdout;
        return AN_EXIT_OK;
    }
    int rc = an_out_allowed(what, path, overwrite);
    if (rc) return rc;
    if (an_path_kind(path) == AN_PATH_OTHER) {
        o->f = fopen(path, "w");
    } else {
        size_t len = strlen(path) + 32;
        o->tmp = malloc(len);
        if (!o->tmp) {
            an_error("out of memory");
            return AN_EXIT_FAIL;
        }
        snprintf(o->tmp, len, "%s.tmp%ld", path, (long)getpid());
        if (an_tmp_add_file(o->tmp)) {
            free(o->tmp);
            o->tmp = NULL;
            return AN_EXIT_FAIL;
        }
        o->f = fopen(o->tmp, "w");
    }
    if (!o->f) {
        an_error("%s: cannot write %s: %s", what, path, strerror(errno));
        an_tmp_forget(o->tmp);
        free(o->tmp);
        o->tmp = NULL;
        return AN_EXIT_USAGE;
    }
    o->buf = malloc(AN_FILE_BUFFER);
    if (o->buf) setvbuf(o->f, o->buf, _IOFBF, AN_FILE_BUFFER);
    return AN_EXIT_OK;
}

int an_file_close(an_file *o, int ok)
{
    if (!o->f) return ok ? AN_EXIT_OK : AN_EXIT_FAIL;
    int bad = fflush(o->f) != 0 || ferror(o->f);
    int rc = ok ? AN_EXIT_OK : AN_EXIT_FAIL;
    if (o->f != stdout) {
        bad |= fclose(o->f) != 0;
        if (o->tmp) {
            if (ok && !bad && rename(o->tmp, o->path) != 0) bad = 1;
            if (!ok || bad) unlink(o->tmp);
            an_tmp_forget(o->tmp);
        }
    }
    if (ok && bad) {
        an_error("%s: cannot write %s: %s", o->what, o->path, strerror(errno));
        rc = AN_EXIT_FAIL;
    }
    free(o->tmp);
    free(o->buf);
    memset(o, 0, sizeof *o);
    return rc;
}
