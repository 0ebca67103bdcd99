/* st_reader.h: the reader as libstagetrace's own files (and its tests) see
 * it: the public reader API (stagetrace_reader.h) with the chunk encodings
 * and the interval aggregator it is built on. Not installed; programs
 * include stagetrace_reader.h. */
#ifndef ST_READER_H
#define ST_READER_H

#include "encoding.h"
#include "stagetrace.h"
#include "stagetrace_reader.h"
#include "st_intervals.h"

#endif
