/* _stagetrace.h: what the two C files of the stagetrace extension share:
 * _stagetrace.c (the module, and recording: Trace, Stage, Thread) and
 * _reader.c (reading a trace for the NumPy views). Private to the
 * extension, which exports PyInit__stagetrace only (-fvisibility=hidden).
 * Included first by both, so that Python.h is on the stable ABI. */
#ifndef STP_STAGETRACE_H
#define STP_STAGETRACE_H

#define Py_LIMITED_API 0x03090000
#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* stagetrace.Error (_stagetrace.c, created at import). */
extern PyObject *stp_error;
/* Raises stagetrace.Error "<what>: <st_last_error()>"; returns NULL. */
PyObject *stp_set_error(int rc, const char *what);

/* _reader.c: the module's _read(path, ranges=True, counters=True, gpu=True, cpu=True)
 * and _layouts() (the row size of each array _read returns). */
PyObject *stp_read_trace(PyObject *m, PyObject *args);
PyObject *stp_read_layouts(PyObject *m, PyObject *unused);

#endif
