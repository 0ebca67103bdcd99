/* demangle.h: C++ symbol names as people read them (analyze/demangle.c).
 *
 * CUPTI reports kernels by their mangled name and the CPU capture's symbols
 * are mangled too (`_Z39ncclDevKernel_AllReduce_Sum_f32_RING_LLP...`), while
 * PyTorch's profiler, Nsight Systems and Holistic Trace Analysis show and
 * match them demangled (`ncclDevKernel_AllReduce_Sum_f32_RING_LL(...)`). The
 * views that print a kernel or function name (export --chrome, gpu, cpu,
 * report, --folded, --pprof) pass it through an_demangle; the raw name stays
 * beside it where the format has room (args.mangled, the SQL views'
 * raw_name, pprof's system_name).
 *
 * Rule: a name that begins with "_Z" (the Itanium C++ ABI's mangled names,
 * which GCC, Clang and nvcc write) is demangled with libstdc++'s
 * __cxa_demangle; any other name, and one that does not demangle, is
 * returned as it is. Results are cached per distinct name (one demangling
 * per name per process), and are safe to call from several threads.
 */
#ifndef AN_DEMANGLE_H
#define AN_DEMANGLE_H

/* The readable form of name: a string owned by the cache (valid until
 * an_demangle_reset) when name demangles, else name itself. NULL: NULL. */
const char *an_demangle(const char *name);

/* 1 when name has the form an_demangle tries ("_Z..."), else 0. */
int an_demangle_is_mangled(const char *name);

/* Frees the cache; strings an_demangle returned before are invalid after. */
void an_demangle_reset(void);

#endif
