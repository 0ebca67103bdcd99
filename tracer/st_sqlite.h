/* st_sqlite.h: includes SQLite the right way for the file being built:
 * through the extension API table when compiled into the loadable
 * extension (stagetrace_ext.so), directly otherwise. */
#ifndef ST_SQLITE_H
#define ST_SQLITE_H
#ifdef ST_SQLITE_EXTENSION
#include <sqlite3ext.h>
SQLITE_EXTENSION_INIT3
#else
#include <sqlite3.h>
#endif
#endif
