# stagetrace: one Makefile for the library, the programs, the tests and the
# benchmarks. `make` builds what this machine can build into build/ and
# prints a line per optional dependency. NO_CUDA=1 forces the CPU-only build
# (and is remembered by that build directory),
# CUDA_HOME overrides the toolkit path, NO_MPI=1 builds the trainer without MPI
# (MPI=1: stop when MPI is missing), SAN=address,undefined or SAN=thread
# builds everything with sanitizers into build/san-*/.

CC ?= cc
NVCC_ARCH ?= -arch=sm_90
PREFIX ?= /usr/local
DESTDIR ?=
comma := ,
empty :=
space := $(empty) $(empty)
H := \#

ifneq ($(SAN),)
BUILD ?= build/san-$(subst $(comma),-,$(SAN))
SANFLAGS := -fsanitize=$(SAN) -fno-omit-frame-pointer
ifneq ($(findstring undefined,$(SAN)),)
SANFLAGS += -fno-sanitize-recover=undefined
endif
else
BUILD ?= build
SANFLAGS :=
endif

OPT ?= -O2
# Frame pointers in every function, leaves included, so that the CPU capture's call stacks (the
# kernel's frame-pointer walk, and the signal sampler's) reach through this project's own code;
# FRAME_POINTERS=0 leaves them out (bench/RESULTS.md has what they cost a range).
FRAME_POINTERS ?= 1
FPFLAGS := $(if $(filter 1,$(FRAME_POINTERS)),-fno-omit-frame-pointer -mno-omit-leaf-frame-pointer)
CFLAGS_BASE := -std=c11 -D_GNU_SOURCE -g $(OPT) -Wall -Wextra -Wno-unused-parameter -pthread -fPIC $(FPFLAGS)
# tracer/include is the public API (installed): stagetrace.h (recording) and
# stagetrace_reader.h (reading). tracer/ holds the library's internal headers
# (st_*.h, encoding.h, ring.h), for its own files, the tests and the trainer.
# analyze/ and bench/ are built against the public headers only (the
# benchmarks' test knobs and clock: tracer/st_testing.h, included by path).
INCLUDES := -Itracer/include -Itracer -Ikernels
PUBLIC_INCLUDES := -Itracer/include
LDLIBS := -lsqlite3 -lpthread -lm -ldl

# A build directory made with NO_CUDA=1 remembers it ($(BUILD)/.no_cuda): a
# later make of the same BUILD without the flag (make install, make test,
# tests/it_install.sh) stays CPU-only instead of mixing in CUDA objects.
# NO_CUDA=0 on the command line turns the directory back into a CUDA build.
NO_CUDA_WHY := NO_CUDA=1
ifeq ($(origin NO_CUDA),undefined)
ifneq ($(wildcard $(BUILD)/.no_cuda),)
NO_CUDA := 1
NO_CUDA_WHY := $(BUILD)/.no_cuda: made with NO_CUDA=1; NO_CUDA=0 undoes it
endif
endif
ifeq ($(NO_CUDA),1)
$(shell mkdir -p $(BUILD) && touch $(BUILD)/.no_cuda)
else ifneq ($(NO_CUDA),)
$(shell rm -f $(BUILD)/.no_cuda)
endif

# ---- dependency probes ------------------------------------------------------
CUDA_HOME ?= $(shell d=$$(dirname $$(dirname $$(command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc))); echo $$d)
ifeq ($(NO_CUDA),1)
HAVE_CUDA :=
else ifneq ($(SAN),)
HAVE_CUDA :=
SAN_NO_CUDA := 1
else
HAVE_CUDA := $(shell test -x $(CUDA_HOME)/bin/nvcc && echo 1)
endif
CUDA_LIBDIR := $(firstword $(wildcard $(CUDA_HOME)/lib64 $(CUDA_HOME)/targets/x86_64-linux/lib))
NVTX_INC := $(firstword $(foreach d,$(CUDA_HOME)/include /usr/include /usr/local/include,$(if $(wildcard $(d)/nvtx3/nvToolsExt.h),$(d))))
ifneq ($(HAVE_CUDA),)
HAVE_CUBLAS := $(shell test -e $(CUDA_LIBDIR)/libcublas.so && echo 1)
HAVE_NCCL := $(shell (test -e $(CUDA_HOME)/include/nccl.h || test -e /usr/include/nccl.h) && (test -e $(CUDA_LIBDIR)/libnccl.so || ls /usr/lib/x86_64-linux-gnu/libnccl.so >/dev/null 2>&1) && echo 1)
CUPTI_INC := $(firstword $(foreach d,$(CUDA_HOME)/include $(CUDA_HOME)/extras/CUPTI/include,$(if $(wildcard $(d)/cupti.h),$(d))))
CUPTI_LIB := $(firstword $(foreach d,$(CUDA_LIBDIR) $(CUDA_HOME)/extras/CUPTI/lib64,$(if $(wildcard $(d)/libcupti.so),$(d))))
HAVE_CUPTI := $(if $(and $(CUPTI_INC),$(CUPTI_LIB)),1)
endif
# MPI (Open MPI): the trainer's multi-process runs (trainer/dist.c). Found through
# `mpicc --showme:compile/--showme:link`, else pkg-config ompi-c. Off with NO_MPI=1 and in
# sanitizer builds (Open MPI's own threads and allocations are not instrumented).
ifeq ($(NO_MPI),1)
HAVE_MPI :=
else ifneq ($(SAN),)
HAVE_MPI :=
SAN_NO_MPI := 1
else
MPI_CFLAGS := $(shell mpicc --showme:compile 2>/dev/null || pkg-config --cflags ompi-c 2>/dev/null)
MPI_LIBS := $(shell mpicc --showme:link 2>/dev/null || pkg-config --libs ompi-c 2>/dev/null)
HAVE_MPI := $(if $(MPI_LIBS),$(shell printf '$(H)include <mpi.h>\nint main(void){return MPI_Init(0, 0);}' | $(CC) -x c - -o /dev/null $(MPI_CFLAGS) $(MPI_LIBS) 2>/dev/null && echo 1))
endif
HAVE_SQLITE := $(shell printf '$(H)include <sqlite3.h>\nint main(void){return 0;}' | $(CC) -x c - -o /dev/null -lsqlite3 2>/dev/null && echo 1)
# Python headers for the extension in python/ (make python); not in
# sanitizer builds (an instrumented extension does not load into python3).
PYTHON ?= python3
PY_INC := $(if $(SAN),,$(shell $(PYTHON) -c "import sysconfig; print(sysconfig.get_paths()['include'])" 2>/dev/null))
HAVE_PYTHON_DEV := $(if $(PY_INC),$(shell test -e $(PY_INC)/Python.h && echo 1))
# zlib (optional): `analyze export --pprof` gzips its profile with it.
HAVE_ZLIB := $(shell printf '$(H)include <zlib.h>\nint main(void){return deflateInit2(0, 0, 0, 0, 0, 0);}' | $(CC) -x c - -o /dev/null -lz 2>/dev/null && echo 1)
# elfutils libdw (optional): the CPU capture's source lines and inline chains of frames
# (cpu_lines, tracer/cpu_lines.c). Found through pkg-config libdw, else libdw's header and
# library; NO_LIBDW=1 leaves it out (the trace then says cpu_lines none).
ifeq ($(NO_LIBDW),1)
HAVE_LIBDW :=
else
LIBDW_CFLAGS := $(shell pkg-config --cflags libdw 2>/dev/null)
LIBDW_LIBS := $(or $(shell pkg-config --libs libdw 2>/dev/null),-ldw -lelf)
HAVE_LIBDW := $(shell printf '$(H)include <elfutils/libdwfl.h>\nint main(void){return dwfl_begin(0) != 0;}' | $(CC) -x c - -o /dev/null $(LIBDW_CFLAGS) $(LIBDW_LIBS) 2>/dev/null && echo 1)
endif
ifneq ($(HAVE_LIBDW),)
LDLIBS += $(LIBDW_LIBS)
endif
HAVE_CMOCKA := $(shell printf '$(H)include <stdarg.h>\n$(H)include <stddef.h>\n$(H)include <setjmp.h>\n$(H)include <stdint.h>\n$(H)include <cmocka.h>\nint main(void){return 0;}' | $(CC) -x c - -o /dev/null -lcmocka 2>/dev/null && echo 1)

# Asked for and missing: stop with a message.
ifeq ($(WITH_CUDA),1)
ifeq ($(HAVE_CUDA),)
$(error WITH_CUDA=1, but there is no CUDA toolkit under CUDA_HOME=$(CUDA_HOME): install one or set CUDA_HOME)
endif
endif
ifeq ($(MPI),1)
ifeq ($(HAVE_MPI),)
$(error MPI=1, but $(if $(NO_MPI),NO_MPI=1 turns it off,$(if $(SAN),sanitizer builds leave it out,no usable MPI was found (mpicc --showme or pkg-config ompi-c): apt-get install openmpi-bin libopenmpi-dev)))
endif
endif
ifeq ($(WITH_NVTX),1)
ifeq ($(NVTX_INC),)
$(error WITH_NVTX=1, but no nvtx3/nvToolsExt.h was found: install the CUDA toolkit or the NVTX headers)
endif
endif

ifneq ($(NVTX_INC),)
CFLAGS_BASE += -DST_HAVE_NVTX -isystem $(NVTX_INC)
endif
ifeq ($(NO_CUDA),1)
CFLAGS_BASE += -DST_NO_CUDA
endif
ifneq ($(HAVE_CUDA),)
CFLAGS_BASE += -DST_HAVE_CUDA_HEADERS -isystem $(CUDA_HOME)/include
endif
CFLAGS ?=
CFLAGS_ALL = $(CFLAGS_BASE) $(SANFLAGS) $(CFLAGS) $(INCLUDES)
# Header dependencies: every compile (cc and nvcc) writes the headers it read
# to <target>.d beside its target (-MP: a header that goes away breaks no
# build), and the end of this file includes them. A target not built yet
# has no .d and is built anyway. An object is also built again when its .d
# is missing (each object names its .d as a prerequisite, and the empty
# rule of the .d files at the end makes a missing one count as new), so an
# object left by a build that wrote no .d never outlives a header change.
DEPFLAGS = -MMD -MP -MF $@.d
LDFLAGS_ALL := $(SANFLAGS) $(LDFLAGS)

ok = @printf '  %s %-14s %s\n'
.PHONY: all deps lib programs tests test test-gpu gpu-tests bench demo install clean fuzz python
all: deps lib programs tests gpu-tests $(if $(HAVE_PYTHON_DEV),python)

deps:
	@echo "stagetrace build ($(BUILD)):"
ifneq ($(HAVE_SQLITE),)
	$(ok) "✓" "SQLite" "libsqlite3"
else
	@echo "  ✗ SQLite         missing: apt-get install libsqlite3-dev (required)"; exit 1
endif
ifneq ($(NVTX_INC),)
	$(ok) "✓" "NVTX headers" "$(NVTX_INC)/nvtx3"
else
	$(ok) "✗" "NVTX headers" "not found: ranges are not emitted to NVTX"
endif
ifneq ($(HAVE_CUDA),)
	$(ok) "✓" "CUDA toolkit" "$(CUDA_HOME)"
else ifeq ($(NO_CUDA),1)
	$(ok) "✗" "CUDA toolkit" "off ($(NO_CUDA_WHY)): CPU backend only"
else ifeq ($(SAN_NO_CUDA),1)
	$(ok) "✗" "CUDA toolkit" "off in sanitizer builds (SAN=$(SAN)): CPU code only"
else
	$(ok) "✗" "CUDA toolkit" "not found under CUDA_HOME=$(CUDA_HOME): CPU backend only"
endif
	$(ok) "$(if $(HAVE_CUBLAS),✓,✗)" "cuBLAS" "$(if $(HAVE_CUBLAS),$(CUDA_LIBDIR),not built)"
	$(ok) "$(if $(HAVE_NCCL),✓,✗)" "NCCL" "$(if $(HAVE_NCCL),found,not built)"
	$(ok) "$(if $(HAVE_CUPTI),✓,✗)" "CUPTI" "$(if $(HAVE_CUPTI),$(CUPTI_LIB),not built)"
ifneq ($(HAVE_PYTHON_DEV),)
	$(ok) "✓" "Python headers" "$(PY_INC): make python"
else ifneq ($(SAN),)
	$(ok) "✗" "Python headers" "not used in sanitizer builds: no Python extension"
else
	$(ok) "✗" "Python headers" "not found for $(PYTHON): no Python extension (apt-get install python3-dev)"
endif
ifneq ($(HAVE_MPI),)
	$(ok) "✓" "MPI" "$(firstword $(MPI_LIBS)) $(lastword $(MPI_LIBS)): multi-process trainer"
else ifeq ($(NO_MPI),1)
	$(ok) "✗" "MPI" "off (NO_MPI=1): single-process trainer"
else ifeq ($(SAN_NO_MPI),1)
	$(ok) "✗" "MPI" "off in sanitizer builds (SAN=$(SAN)): single-process trainer"
else
	$(ok) "✗" "MPI" "not found: single-process trainer (apt-get install openmpi-bin libopenmpi-dev)"
endif
	$(ok) "$(if $(HAVE_ZLIB),✓,✗)" "zlib" "$(if $(HAVE_ZLIB),export --pprof gzipped,missing: export --pprof writes it uncompressed (apt-get install zlib1g-dev))"
ifneq ($(HAVE_LIBDW),)
	$(ok) "✓" "libdw" "lines and inlines of CPU frames"
else ifeq ($(NO_LIBDW),1)
	$(ok) "✗" "libdw" "off (NO_LIBDW=1): CPU frames without lines (cpu_lines none)"
else
	$(ok) "✗" "libdw" "missing: apt-get install libdw-dev (CPU frames without lines)"
endif
	$(ok) "$(if $(HAVE_CMOCKA),✓,✗)" "cmocka" "$(if $(HAVE_CMOCKA),found,missing: apt-get install libcmocka-dev (tests))"

# ---- the library ------------------------------------------------------------
TRACER_SRC := $(filter-out tracer/gpu_cupti.c,$(sort $(wildcard tracer/*.c)))
TRACER_OBJ := $(patsubst %.c,$(BUILD)/obj/%.o,$(TRACER_SRC))
# the reader's files (reader_int.h says which job each does)
READER_SRC := tracer/reader.c tracer/reader_check.c tracer/reader_clock.c tracer/reader_iter.c tracer/reader_gpu.c tracer/reader_cpu.c \
	tracer/reader_set.c
EXT_SRC := tracer/vtab.c $(READER_SRC) tracer/encoding.c tracer/intervals.c tracer/error.c tracer/cpu_account.c
EXT_OBJ := $(patsubst %.c,$(BUILD)/obj/ext/%.o,$(filter $(wildcard $(EXT_SRC)),$(EXT_SRC)))
LIB_A := $(BUILD)/libstagetrace.a
# The shared library: libstagetrace.so.$(ST_VERSION) with SONAME
# libstagetrace.so.$(ST_SOVERSION) (the ABI: bumped when stagetrace.h's
# ST_API functions or types change incompatibly), and the links
# libstagetrace.so.$(ST_SOVERSION) and libstagetrace.so beside it. The
# version is written once, ST_VERSION_STRING in stagetrace.h (the trace's
# tool_version, the pkg-config files and python/setup.py read it too).
ST_VERSION := $(shell sed -n 's/^$(H)define ST_VERSION_STRING "\(.*\)"$$/\1/p' tracer/include/stagetrace.h)
ST_SOVERSION := 0
LIB_SO_REAL := $(BUILD)/libstagetrace.so.$(ST_VERSION)
LIB_SO := $(BUILD)/libstagetrace.so
EXT_SO := $(BUILD)/stagetrace_ext.so

# GPU activity (CUPTI) in its own archive: CPU programs never need libcupti.
LIB_GPU := $(BUILD)/libstagetrace_gpu.a
$(LIB_GPU): $(BUILD)/obj/tracer/gpu_cupti.o
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

lib: $(LIB_A) $(LIB_GPU) $(LIB_SO) $(if $(wildcard tracer/vtab.c),$(EXT_SO)) $(BUILD)/stagetrace.pc $(BUILD)/stagetrace-gpu.pc

$(BUILD)/obj/%.o: %.c $(BUILD)/obj/%.o.d
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $(DEPFLAGS) -c $< -o $@

# The library's objects: only what stagetrace.h marks ST_API is exported by
# libstagetrace.so; the archive still links every internal symbol (analyze,
# the tests and the benchmarks use them).
$(BUILD)/obj/tracer/%.o: tracer/%.c $(BUILD)/obj/tracer/%.o.d
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $(DEPFLAGS) -fvisibility=hidden -c $< -o $@

# The SQLite extension exports its entry points only (ST_API empty).
$(BUILD)/obj/ext/%.o: %.c $(BUILD)/obj/ext/%.o.d
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $(DEPFLAGS) -DST_SQLITE_EXTENSION -fvisibility=hidden -DST_API= -c $< -o $@

# cpu_lines.c with or without libdw: a stamp per choice, so that changing it
# (NO_LIBDW=1, or libdw installed since) builds the object again.
LIBDW_STAMP := $(BUILD)/obj/tracer/cpu_lines.libdw-$(if $(HAVE_LIBDW),on,off)
$(BUILD)/obj/tracer/cpu_lines.o $(BUILD)/obj/tracer/cpu_unwind.o: CFLAGS_BASE += $(if $(HAVE_LIBDW),-DST_HAVE_LIBDW $(LIBDW_CFLAGS))
$(BUILD)/obj/tracer/cpu_lines.o $(BUILD)/obj/tracer/cpu_unwind.o: $(LIBDW_STAMP)
$(LIBDW_STAMP):
	@mkdir -p $(dir $@)
	@rm -f $(BUILD)/obj/tracer/cpu_lines.libdw-*
	@touch $@

# test_cpu_symbols checks cpu_lines as the library was built, test_cpu_unwind the unwinding
$(BUILD)/tests/test_cpu_symbols $(BUILD)/tests/test_cpu_unwind: CFLAGS_BASE += $(if $(HAVE_LIBDW),-DST_HAVE_LIBDW)
$(BUILD)/tests/test_cpu_symbols $(BUILD)/tests/test_cpu_unwind: $(LIBDW_STAMP)

$(LIB_A): $(TRACER_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(LIB_SO_REAL): $(TRACER_OBJ)
	$(CC) -shared -Wl,-soname,libstagetrace.so.$(ST_SOVERSION) -o $@ $^ $(LDFLAGS_ALL) $(LDLIBS)
$(LIB_SO): $(LIB_SO_REAL)
	ln -sf $(notdir $<) $(BUILD)/libstagetrace.so.$(ST_SOVERSION)
	ln -sf libstagetrace.so.$(ST_SOVERSION) $@

$(EXT_SO): $(EXT_OBJ)
	$(CC) -shared -Wl,-Bsymbolic -o $@ $^ $(LDFLAGS_ALL) -lpthread -lm -ldl

# pkg-config: stagetrace (the library; SQLite and the rest are private, for
# static links) and stagetrace-gpu (libstagetrace_gpu.a with CUPTI, for
# st_gpu_start in CUDA builds; it requires stagetrace).
# stagetrace.pc: the shared library, with an rpath to its directory (a program built with
# `pkg-config --libs stagetrace` runs from any prefix, no LD_LIBRARY_PATH or ldconfig needed).
# stagetrace-gpu.pc: the GPU part is an archive that uses the library's internal functions,
# which libstagetrace.so does not export; so it names both archives by path (never the shared
# library) and everything they link, in Libs: `--libs` and `--static --libs` give the same
# line, libstagetrace linked statically into the program. docs/tracer.md, "Installing".
$(BUILD)/stagetrace.pc: Makefile tracer/include/stagetrace.h $(LIBDW_STAMP)
	@mkdir -p $(dir $@)
	@printf 'prefix=$(PREFIX)\nlibdir=$${prefix}/lib\nincludedir=$${prefix}/include\n\nName: stagetrace\nDescription: stage tracing for multi-threaded, multi-GPU training pipelines\nVersion: $(ST_VERSION)\nLibs: -L$${libdir} -Wl,-rpath,$${libdir} -lstagetrace\nLibs.private: -lsqlite3 -lpthread -lm -ldl$(if $(HAVE_LIBDW), $(LIBDW_LIBS))\nCflags: -I$${includedir}\n' > $@
$(BUILD)/stagetrace-gpu.pc: Makefile tracer/include/stagetrace.h $(LIBDW_STAMP)
	@mkdir -p $(dir $@)
	@printf 'prefix=$(PREFIX)\nlibdir=$${prefix}/lib\nincludedir=$${prefix}/include\n\nName: stagetrace-gpu\nDescription: libstagetrace with GPU activity (CUPTI: st_gpu_start), linked statically\nVersion: $(ST_VERSION)\nLibs: $${libdir}/libstagetrace_gpu.a $${libdir}/libstagetrace.a $(if $(HAVE_CUPTI),-L$(CUPTI_LIB) -Wl$(comma)-rpath$(comma)$(CUPTI_LIB) -lcupti )$(strip $(LDLIBS))\nCflags: -I$${includedir}\n' > $@

# ---- the Python package (python/) --------------------------------------------
# build/python/stagetrace/: the package's Python files and the C extension on
# the stable ABI (_stagetrace.abi3.so, Python 3.9+), with libstagetrace linked
# in statically (and libstagetrace_gpu with CUPTI when this build has it).
# PYTHONPATH=build/python imports it. This is the extension's one recipe:
# `pip install ./python` (python/setup.py) runs `make python` in a build
# directory of its own and packs what it built.
PY_BUILD := $(BUILD)/python/stagetrace
PY_FILES := $(patsubst python/stagetrace/%,$(PY_BUILD)/%,$(wildcard python/stagetrace/*.py))
PY_EXT := $(PY_BUILD)/_stagetrace.abi3.so
python: $(PY_EXT) $(PY_FILES)
	@$(if $(HAVE_PYTHON_DEV),true,echo "make python needs the headers of $(PYTHON): apt-get install python3-dev"; exit 1)
$(PY_BUILD)/%.py: python/stagetrace/%.py
	@mkdir -p $(dir $@)
	cp $< $@
# CUPTI is loaded lazily (dlopen at open(gpu=True)): the extension does not
# link libcupti, so it imports where CUPTI is absent.
PY_CUPTI_OBJ := $(BUILD)/obj/python/gpu_cupti_dlopen.o
$(PY_CUPTI_OBJ): tracer/gpu_cupti.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $(DEPFLAGS) -DST_CUPTI_DLOPEN -DST_CUPTI_LIBDIR='"$(CUPTI_LIB)"' -Itracer -fvisibility=hidden -c $< -o $@
# The extension's own files (python/stagetrace/*.c: the module and recording,
# the reader), against the public headers only.
PY_EXT_OBJ := $(patsubst python/stagetrace/%.c,$(BUILD)/obj/python/%.o,$(wildcard python/stagetrace/*.c))
$(BUILD)/obj/python/%.o: python/stagetrace/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(CFLAGS) $(PUBLIC_INCLUDES) $(DEPFLAGS) -isystem $(PY_INC) -fvisibility=hidden -Wno-cast-function-type \
		$(if $(HAVE_CUPTI),-DSTP_HAVE_CUPTI) -c $< -o $@
$(PY_EXT): $(PY_EXT_OBJ) $(LIB_A) $(if $(HAVE_CUPTI),$(PY_CUPTI_OBJ))
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(CFLAGS) -shared $(PY_EXT_OBJ) -o $@ $(if $(HAVE_CUPTI),$(PY_CUPTI_OBJ)) $(LIB_A) \
		-Wl,--exclude-libs,ALL $(LDFLAGS) $(LDLIBS) -ldl

# ---- kernels (CPU references; CUDA half when the toolkit exists) -----------
KERNELS_SRC := $(sort $(wildcard kernels/*.c))
KERNELS_OBJ := $(patsubst %.c,$(BUILD)/obj/%.o,$(KERNELS_SRC))
LIB_KERNELS := $(BUILD)/libkernels.a
$(LIB_KERNELS): $(KERNELS_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^ $(if $(KERNELS_OBJ),,/dev/null 2>/dev/null || true)

# CUDA half: kernels/*.cu (and trainer/*.cu) with nvcc, when the toolkit exists.
NVCC := $(CUDA_HOME)/bin/nvcc
NVCCFLAGS ?= -O3 $(NVCC_ARCH) -std=c++17 -Xcompiler -fPIC,-Wall$(if $(FPFLAGS),$(comma)$(subst $(space),$(comma),$(FPFLAGS))) -lineinfo
KERNELS_CU := $(if $(HAVE_CUDA),$(sort $(wildcard kernels/*.cu)))
KERNELS_CU_OBJ := $(patsubst %.cu,$(BUILD)/obj/%.cu.o,$(KERNELS_CU))
LIB_KERNELS_CUDA := $(if $(KERNELS_CU),$(BUILD)/libkernels_cuda.a)
CUDA_LDLIBS := $(if $(HAVE_CUDA),-L$(CUDA_LIBDIR) -Wl$(comma)-rpath$(comma)$(CUDA_LIBDIR) -lcudart $(if $(HAVE_CUBLAS),-lcublas -lcublasLt) $(if $(HAVE_NCCL),-lnccl) $(if $(HAVE_CUPTI),-L$(CUPTI_LIB) -lcupti) -lstdc++)
ifneq ($(HAVE_CUDA),)
CFLAGS_BASE += -DST_WITH_CUDA $(if $(HAVE_CUBLAS),-DST_WITH_CUBLAS) $(if $(HAVE_NCCL),-DST_WITH_NCCL) $(if $(HAVE_CUPTI),-DST_WITH_CUPTI -isystem $(CUPTI_INC))
endif
$(BUILD)/obj/%.cu.o: %.cu $(BUILD)/obj/%.cu.o.d
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) $(INCLUDES) -Itrainer $(DEPFLAGS) -c $< -o $@
$(BUILD)/libkernels_cuda.a: $(KERNELS_CU_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

# ---- programs -----------------------------------------------------------------
PROGRAMS :=
SAMPLES_SRC := $(sort $(wildcard samples/*.c))
SAMPLES_BIN := $(patsubst samples/%.c,$(BUILD)/samples/%,$(SAMPLES_SRC))
PROGRAMS += $(SAMPLES_BIN)
$(BUILD)/samples/%: samples/%.c $(LIB_A)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $(DEPFLAGS) $< -o $@ $(LIB_A) $(LDFLAGS_ALL) $(LDLIBS)

# libanalyze.a holds analyze/ but its main.c (the commands and the analysis
# code), which `analyze`, the tests and the fuzz targets link; libtrainer.a
# holds the C half of trainer/ but its main.c and dist.c (MPI), for the tests
# (the trainer program links its objects, C and CUDA, directly). dist.c is
# compiled with MPI's flags and -DST_HAVE_MPI when MPI was found, and without
# them (a single-process stub) otherwise; its object records which, so a
# change of NO_MPI rebuilds it.
TRAINER_SRC := $(sort $(wildcard trainer/*.c))
TRAINER_CU := $(if $(HAVE_CUDA),$(sort $(wildcard trainer/*.cu)))
LIB_TRAINER := $(BUILD)/libtrainer.a
TRAINER_MPI_TAG := $(BUILD)/obj/trainer/mpi-$(if $(HAVE_MPI),on,off)
$(TRAINER_MPI_TAG):
	@mkdir -p $(dir $@)
	@rm -f $(BUILD)/obj/trainer/mpi-on $(BUILD)/obj/trainer/mpi-off && touch $@
$(BUILD)/obj/trainer/dist.o: trainer/dist.c $(BUILD)/obj/trainer/dist.o.d $(TRAINER_MPI_TAG)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $(DEPFLAGS) $(if $(HAVE_MPI),-DST_HAVE_MPI $(MPI_CFLAGS)) -c $< -o $@
$(LIB_TRAINER): $(patsubst %.c,$(BUILD)/obj/%.o,$(filter-out trainer/main.c trainer/dist.c,$(TRAINER_SRC)))
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^
ifneq ($(TRAINER_SRC),)
PROGRAMS += $(BUILD)/trainer
$(BUILD)/trainer: $(patsubst %.c,$(BUILD)/obj/%.o,$(TRAINER_SRC)) $(patsubst %.cu,$(BUILD)/obj/%.cu.o,$(TRAINER_CU)) $(LIB_KERNELS_CUDA) $(LIB_KERNELS) $(LIB_GPU) $(LIB_A)
	$(CC) -o $@ $^ $(LDFLAGS_ALL) $(CUDA_LDLIBS) $(if $(HAVE_MPI),$(MPI_LIBS)) $(LDLIBS)
endif

ANALYZE_SRC := $(sort $(wildcard analyze/*.c))
LIB_ANALYZE := $(BUILD)/libanalyze.a
# analyze/ sees libstagetrace through its public headers only.
$(BUILD)/obj/analyze/%.o: INCLUDES := $(PUBLIC_INCLUDES)
# zlib for export --pprof only (the fuzz build's copy of analyze/ leaves it out);
# libstdc++ for its demangler (__cxa_demangle, analyze/demangle.c).
ANALYZE_LDLIBS := $(if $(HAVE_ZLIB),-lz) -lstdc++
$(BUILD)/obj/analyze/export_pprof.o: CFLAGS_BASE += $(if $(HAVE_ZLIB),-DAN_HAVE_ZLIB)
$(LIB_ANALYZE): $(patsubst %.c,$(BUILD)/obj/%.o,$(filter-out analyze/main.c,$(ANALYZE_SRC)))
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^
ifneq ($(ANALYZE_SRC),)
PROGRAMS += $(BUILD)/analyze
$(BUILD)/analyze: $(BUILD)/obj/analyze/main.o $(LIB_ANALYZE) $(LIB_A)
	$(CC) -o $@ $^ $(LDFLAGS_ALL) $(LDLIBS) $(ANALYZE_LDLIBS)
endif

programs: $(PROGRAMS)

# ---- tests --------------------------------------------------------------------
TESTS_SRC := $(sort $(wildcard tests/test_*.c))
TESTS_BIN := $(patsubst tests/%.c,$(BUILD)/tests/%,$(TESTS_SRC))
TEST_HELPERS_SO := $(patsubst tests/%.c,$(BUILD)/tests/lib%.so,$(sort $(wildcard tests/nvtx_*.c)))
# The trace writer (tests/tracegen.c) and the traces with exactly known
# contents (tests/traces.c) go into every test; the tracegen program writes
# those traces for the integration scripts and the benchmarks. Compiled once
# each (build/obj/tests/), linked into every test.
TRACEGEN_OBJ := $(BUILD)/obj/tests/tracegen.o $(BUILD)/obj/tests/traces.o
TEST_COMMON := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard tests/common.c)) $(TRACEGEN_OBJ)
.SECONDARY: $(TEST_COMMON) # named by pattern rules only: kept, not deleted as intermediate
tests: $(if $(HAVE_CMOCKA),$(TESTS_BIN)) $(TEST_HELPERS_SO) $(BUILD)/tests/tracegen

$(BUILD)/tests/tracegen: tests/tracegen_main.c $(TRACEGEN_OBJ) $(LIB_A)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $(DEPFLAGS) -Itests $< $(TRACEGEN_OBJ) -o $@ $(LIB_A) $(LDFLAGS_ALL) $(LDLIBS)

# Every test links the libraries (only what it uses is pulled in) and may
# include their internal headers; none compiles their sources in.
$(BUILD)/tests/test_%: tests/test_%.c $(TEST_COMMON) $(LIB_ANALYZE) $(LIB_TRAINER) $(LIB_A) $(LIB_KERNELS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $(DEPFLAGS) -Itests $< $(TEST_COMMON) $(TEST_EXTRA_OBJ) -o $@ $(LIB_ANALYZE) $(LIB_TRAINER) $(LIB_KERNELS) $(LIB_A) $(LDFLAGS_ALL) -lcmocka $(LDLIBS) $(ANALYZE_LDLIBS)

# test_cpu_unwind's call chain a -> b -> c -> spin (tests/cpu_nofp.c) is built as the PyTorch
# wheels are, without frame pointers (the later flags win over FPFLAGS and SANFLAGS'), so that
# only DWARF unwinding finds it.
NOFP_OBJ := $(BUILD)/obj/tests/cpu_nofp.o
$(NOFP_OBJ): tests/cpu_nofp.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $(DEPFLAGS) -O2 -fomit-frame-pointer -momit-leaf-frame-pointer -c $< -o $@
# The same chain as a library that the test loads once its first stacks were unwound
# (-Bsymbolic: its calls stay inside it, whatever the program defines).
NOFP_SO := $(BUILD)/tests/libcpu_nofp.so
$(NOFP_SO): tests/cpu_nofp.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $(DEPFLAGS) -O2 -fomit-frame-pointer -momit-leaf-frame-pointer -shared -Wl,-Bsymbolic $< -o $@
$(BUILD)/tests/test_cpu_unwind: TEST_EXTRA_OBJ := $(NOFP_OBJ)
$(BUILD)/tests/test_cpu_unwind: $(NOFP_OBJ) $(NOFP_SO)

$(BUILD)/tests/lib%.so: tests/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $(DEPFLAGS) -shared $< -o $@ $(LDFLAGS_ALL) -lpthread

test: all
	@$(if $(HAVE_CMOCKA),true,echo "make test needs cmocka: apt-get install libcmocka-dev"; exit 1)
	@ST_BUILD=$(BUILD) bash tests/run.sh $(BUILD)

# GPU tests: tests/gpu/*.cu and tests/gpu/*.c, one program each, run by
# tests/run_gpu.sh on a machine with a GPU. cmocka is copied beside them
# (build/lib) so the build directory runs on a machine without it.
GPU_TESTS_SRC := $(if $(HAVE_CUDA),$(sort $(wildcard tests/gpu/*.cu tests/gpu/*.c)))
GPU_TESTS_BIN := $(patsubst tests/gpu/%,$(BUILD)/tests/gpu/%,$(basename $(GPU_TESTS_SRC)))
$(BUILD)/lib/libcmocka.so.0:
	@mkdir -p $(dir $@)
	cp -L $$(ldconfig -p | awk '/libcmocka.so.0 /{print $$NF; exit}') $@
$(BUILD)/tests/gpu/%: tests/gpu/%.cu $(LIB_KERNELS_CUDA) $(LIB_KERNELS) $(LIB_GPU) $(LIB_A) $(BUILD)/lib/libcmocka.so.0
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) $(INCLUDES) -Itrainer -Itests $(DEPFLAGS) $< -o $@ $(LIB_KERNELS_CUDA) $(LIB_KERNELS) $(LIB_GPU) $(LIB_A) -L$(BUILD)/lib -l:libcmocka.so.0 -Xlinker -rpath='$$ORIGIN/../../lib' $(if $(HAVE_CUBLAS),-lcublas -lcublasLt) $(if $(HAVE_NCCL),-lnccl) $(if $(HAVE_CUPTI),-L$(CUPTI_LIB) -lcupti -Xlinker -rpath=$(CUPTI_LIB)) $(LDLIBS)
$(BUILD)/tests/gpu/%: tests/gpu/%.c $(TEST_COMMON) $(LIB_KERNELS_CUDA) $(LIB_KERNELS) $(LIB_GPU) $(LIB_A) $(BUILD)/lib/libcmocka.so.0
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $(DEPFLAGS) -Itrainer -Itests $< $(TEST_COMMON) -o $@ $(LIB_KERNELS_CUDA) $(LIB_KERNELS) $(LIB_GPU) $(LIB_A) -L$(BUILD)/lib -l:libcmocka.so.0 -Wl,-rpath,'$$ORIGIN/../../lib' $(LDFLAGS_ALL) $(CUDA_LDLIBS) $(LDLIBS)
# GPU tests link cmocka: without it `make` builds everything else.
gpu-tests: $(if $(HAVE_CMOCKA),$(GPU_TESTS_BIN))

test-gpu: all gpu-tests
	@ST_BUILD=$(BUILD) bash tests/run_gpu.sh $(BUILD)

# ---- benchmarks ---------------------------------------------------------------
BENCH_SRC := $(sort $(wildcard bench/bench_*.c))
BENCH_BIN := $(patsubst bench/%.c,$(BUILD)/bench/%,$(BENCH_SRC))
# Benchmarks see the public headers (and tests/tracegen.h, which uses only
# them); the trace writer is compiled on its own, with the internal headers.
$(BUILD)/bench/%: bench/%.c $(BUILD)/obj/tests/tracegen.o $(LIB_A) $(LIB_KERNELS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(SANFLAGS) $(CFLAGS) $(PUBLIC_INCLUDES) $(DEPFLAGS) -Itests $< $(BUILD)/obj/tests/tracegen.o -o $@ $(LIB_KERNELS) $(LIB_A) $(LDFLAGS_ALL) $(LDLIBS)
bench: all $(BENCH_BIN)
	@ST_BUILD=$(BUILD) bash bench/run.sh $(BUILD)

# The demo needs the library and the programs only (no cmocka, no tests).
demo: deps lib programs
	@ST_BUILD=$(BUILD) bash samples/demo.sh $(BUILD)

# make install PREFIX=/usr/local DESTDIR=: the libraries (shared with its
# SONAME links, static, GPU), the public headers (tracer/include), the
# pkg-config files, the SQLite extension, and the analyze and trainer programs. Run by root
# with no DESTDIR into a directory of the dynamic linker's cache (/usr/local/lib, /usr/lib),
# it runs ldconfig too (the .pc's rpath makes that optional).
INSTALL_PROGRAMS := $(filter $(BUILD)/analyze $(BUILD)/trainer,$(PROGRAMS))
install: lib $(INSTALL_PROGRAMS)
	install -d $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/bin
	install -m 644 $(LIB_A) $(LIB_GPU) $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(LIB_SO_REAL) $(DESTDIR)$(PREFIX)/lib/
	ln -sf libstagetrace.so.$(ST_VERSION) $(DESTDIR)$(PREFIX)/lib/libstagetrace.so.$(ST_SOVERSION)
	ln -sf libstagetrace.so.$(ST_SOVERSION) $(DESTDIR)$(PREFIX)/lib/libstagetrace.so
	install -m 644 tracer/include/*.h $(DESTDIR)$(PREFIX)/include/
	sed 's|^prefix=.*|prefix=$(PREFIX)|' $(BUILD)/stagetrace.pc > $(DESTDIR)$(PREFIX)/lib/pkgconfig/stagetrace.pc
	sed 's|^prefix=.*|prefix=$(PREFIX)|' $(BUILD)/stagetrace-gpu.pc > $(DESTDIR)$(PREFIX)/lib/pkgconfig/stagetrace-gpu.pc
	$(if $(wildcard $(EXT_SO)),install -m 755 $(EXT_SO) $(DESTDIR)$(PREFIX)/lib/)
	$(if $(INSTALL_PROGRAMS),install -m 755 $(INSTALL_PROGRAMS) $(DESTDIR)$(PREFIX)/bin/)
	@if [ -z "$(DESTDIR)" ] && [ "$$(id -u)" = 0 ] && ldconfig -v -N 2>/dev/null | grep -q '^$(PREFIX)/lib:'; then \
		echo ldconfig; ldconfig; fi

clean:
	rm -rf build

# ---- fuzzing: libFuzzer targets over the reader and the chunk decoders -------
# `make fuzz` builds build/fuzz/* with clang (-fsanitize=fuzzer,address,undefined)
# and runs each target FUZZ_SECONDS seconds on a seed corpus it generates
# (fuzz/run.sh). libFuzzer's runtime: Debian's libclang-rt-14-dev (clang 14).
FUZZ_SECONDS ?= 30
FUZZ_CC ?= clang
FUZZ_DIR := build/fuzz
FUZZ_CFLAGS := -std=c11 -D_GNU_SOURCE -g -O1 -Wall -Wextra -Wno-unused-parameter -pthread $(INCLUDES)
FUZZ_SAN := -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
# the SQL extension's own sources (EXT_SRC) carry what vtab.c needs
FUZZ_READER_SRC := fuzz/fuzz_reader.c $(sort $(EXT_SRC))
# libanalyze.a again, instrumented for the fuzzer (only what a target uses is linked)
FUZZ_LIB_ANALYZE := $(FUZZ_DIR)/libanalyze.a
FUZZ_ANALYZE_OBJ := $(patsubst %.c,$(FUZZ_DIR)/obj/%.o,$(filter-out analyze/main.c,$(sort $(wildcard analyze/*.c))))
$(FUZZ_DIR)/obj/%.o: %.c
	@command -v $(FUZZ_CC) >/dev/null || { echo "make fuzz needs clang: apt-get install clang libclang-rt-14-dev"; exit 1; }
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) $(subst fuzzer$(comma),fuzzer-no-link$(comma),$(FUZZ_SAN)) $(DEPFLAGS) -c $< -o $@
# make_seeds runs uninstrumented: its objects apart.
$(FUZZ_DIR)/seeds-obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -Itests $(DEPFLAGS) -c $< -o $@
$(FUZZ_LIB_ANALYZE): $(FUZZ_ANALYZE_OBJ)
	rm -f $@ && ar rcs $@ $^
FUZZ_PROBE := printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { return 0; }' | \
	$(FUZZ_CC) -fsanitize=fuzzer -x c - -o /dev/null 2>/dev/null
FUZZ_READER_OBJ := $(patsubst %.c,$(FUZZ_DIR)/obj/%.o,$(FUZZ_READER_SRC))
FUZZ_CHUNKS_OBJ := $(patsubst %.c,$(FUZZ_DIR)/obj/%.o,fuzz/fuzz_chunks.c tracer/encoding.c tracer/error.c)
FUZZ_SEEDS_OBJ := $(patsubst %.c,$(FUZZ_DIR)/seeds-obj/%.o,fuzz/make_seeds.c tests/tracegen.c tracer/encoding.c tracer/error.c)
$(FUZZ_DIR)/fuzz_reader: $(FUZZ_READER_OBJ) $(FUZZ_LIB_ANALYZE)
	@command -v $(FUZZ_CC) >/dev/null || { echo "make fuzz needs clang: apt-get install clang libclang-rt-14-dev"; exit 1; }
	@$(FUZZ_PROBE) || { echo "make fuzz: $(FUZZ_CC) cannot link libFuzzer: apt-get install libclang-rt-14-dev"; exit 1; }
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) $(FUZZ_SAN) $(FUZZ_READER_OBJ) $(FUZZ_LIB_ANALYZE) -o $@ -lsqlite3 -lm -lstdc++
$(FUZZ_DIR)/fuzz_chunks: $(FUZZ_CHUNKS_OBJ)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) $(FUZZ_SAN) $^ -o $@
$(FUZZ_DIR)/make_seeds: $(FUZZ_SEEDS_OBJ)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) $^ -o $@ -lsqlite3
fuzz: $(FUZZ_DIR)/fuzz_reader $(FUZZ_DIR)/fuzz_chunks $(FUZZ_DIR)/make_seeds
	@bash fuzz/run.sh $(FUZZ_DIR) $(FUZZ_SECONDS)

# The headers each target read at its last build (DEPFLAGS above), and an
# empty rule for the .d of every object built in $(BUILD)/obj.
OBJ_DEPS := $(patsubst %.c,$(BUILD)/obj/%.o.d,$(wildcard */*.c */*/*.c)) \
	$(patsubst %.c,$(BUILD)/obj/ext/%.o.d,$(EXT_SRC)) \
	$(patsubst %.cu,$(BUILD)/obj/%.cu.o.d,$(wildcard */*.cu */*/*.cu))
$(OBJ_DEPS):
-include $(wildcard $(BUILD)/obj/*/*.d $(BUILD)/obj/ext/*/*.d $(BUILD)/samples/*.d $(BUILD)/tests/*.d \
	$(BUILD)/tests/gpu/*.d $(BUILD)/bench/*.d \
	$(FUZZ_DIR)/obj/*/*.d $(FUZZ_DIR)/seeds-obj/*/*.d)
