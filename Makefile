# clef — build, test and sanitizer builds.
#
#   make            optimized library, CLI and tests in build/
#   make asan       the same with ASan+UBSan in build-asan/
#   make test       run the whole suite against build/
#   make check      build both, run the whole suite on each (what CI runs)
#   make tiny       write the tiny release-layout checkpoint to models/tiny/
#   make install    PREFIX=/usr/local (LIBDIR, BINDIR, INCLUDEDIR, DESTDIR): the clef binary,
#                   libclef.so.N (soname) and libclef.a exporting only the clef.h API, clef.h and
#                   clef.pc for pkg-config; `make uninstall` removes exactly those files
#
# Sources are discovered: every src/**/*.c except src/cli (the CLI's main) and
# src/compute/cuda (built only with CUDA=1) goes into libclef.a; every
# tests/unit/test_*.c and tests/tools/*.c becomes its own program.
#
# Two forms of the library: $(BUILD)/libclef.a holds every object as compiled, internal symbols
# included (what the CLI, tests, bench and tools link); $(BUILD)/dist/ holds what is shipped
# (make install, the Python package): libclef.so and libclef.a whose only global symbols are the
# API of include/clef.h (CLEF_API). Library objects are compiled -fPIC -fvisibility=hidden for
# that: Debian's gcc already makes position-independent (PIE) code, and hidden symbols are reached
# directly, so the code the CLI runs is the same.

CC      ?= cc
BUILD   ?= build
PKGS    := oniguruma libutf8proc libmicrohttpd libpng libjpeg libwebp libwebpdemux libgif zlib
# VIDEO=0: a build without FFmpeg (videos are refused with UnsupportedMedia). FFmpeg's libraries pull
# ~160 MB of codec libraries at load time; tools/device-check.sh builds its carried binaries so.
VIDEO   ?= 1
ifeq ($(VIDEO),1)
  PKGS  += libavformat libavcodec libswscale libavutil
else
  EXTRA_CFLAGS += -DCLEF_NO_VIDEO
endif
# CLI_PKGS: linked into the clef binary only (clef pull, src/cli/pull.c); the library never touches the network
CLI_PKGS := libcurl
WARN    := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wno-unused-parameter
OPT     ?= -O2 -g -march=x86-64-v2 -mtune=native
LIB_CFLAGS := -fPIC -fvisibility=hidden
CFLAGS_ALL = -std=c11 -D_GNU_SOURCE $(WARN) $(OPT) -pthread -Iinclude -Isrc \
             $(shell pkg-config --cflags $(PKGS) $(CLI_PKGS)) $(EXTRA_CFLAGS)
LDLIBS_ALL = $(shell pkg-config --libs $(PKGS)) -lm -pthread $(EXTRA_LDLIBS)

ifeq ($(SAN),1)
  OPT := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all
  EXTRA_LDLIBS += -fsanitize=address,undefined
endif

LIB_SRC  := $(shell find -H src -name '*.c' -not -path 'src/cli/*' -not -path 'src/compute/cuda/*' | sort)
CLI_SRC  := $(sort $(wildcard src/cli/*.c))
TEST_SRC := $(sort $(wildcard tests/unit/test_*.c))
TOOL_SRC := $(sort $(wildcard tests/tools/*.c))
ifneq ($(VIDEO),1) # test_video writes its clips with FFmpeg itself
  TEST_SRC := $(filter-out tests/unit/test_video.c,$(TEST_SRC))
endif

LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/obj/%.o)
TEST_BIN := $(TEST_SRC:tests/unit/%.c=$(BUILD)/tests/%)
TOOL_BIN := $(TOOL_SRC:tests/tools/%.c=$(BUILD)/tests/%)
LIB      := $(BUILD)/libclef.a
FLAGS_STAMP := $(BUILD)/obj/flags

# ---- CUDA backend (docs/cuda.md): `make CUDA=1 BUILD=build-cuda`. Compiles src/compute/cuda/*.cu
# with nvcc into libclef.a, defines CLEF_HAVE_CUDA for the C side, links cudart + cuBLAS(Lt), and
# builds tests/unit/test_cuda_ops and bench/bench_cuda. Without CUDA=1 none of this exists.
#   CUDA_HOME=/usr/local/cuda   CUDA_ARCHS="80 89 90" (one arch while iterating: CUDA_ARCHS=90)
CUDA_TEST := tests/unit/test_cuda_ops.c
ifeq ($(CUDA),1)
  CUDA_HOME  ?= /usr/local/cuda
  NVCC       ?= $(CUDA_HOME)/bin/nvcc
  CUDA_ARCHS ?= 80 89 90
  NVCC_GENCODE := $(foreach a,$(CUDA_ARCHS),-gencode arch=compute_$(a),code=sm_$(a))
  NVCC_OPT   ?= -O3 -g -lineinfo
  # -fno-gnu-unique: libstdc++'s inline statics (std::piecewise_construct) become weak, not
  # STB_GNU_UNIQUE, so that the shipped libclef.a can make them local (objcopy keeps unique ones global).
  NVCCFLAGS  := -std=c++17 $(NVCC_OPT) -fmad=false $(NVCC_GENCODE) -Iinclude -Isrc \
                -Xcompiler -Wall,-Wextra,-Wno-unused-parameter,-Werror,-fPIC,-fvisibility=hidden,-fno-gnu-unique \
                $(EXTRA_NVCCFLAGS)
  CUDA_SRC   := $(sort $(wildcard src/compute/cuda/*.cu))
  CUDA_OBJ   := $(CUDA_SRC:%.cu=$(BUILD)/obj/%.o)
  LIB_OBJ    += $(CUDA_OBJ)
  CFLAGS_ALL += -DCLEF_HAVE_CUDA
  CUDA_LIBS  := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublasLt -lcublas -lcudart -lstdc++ -ldl -lrt
  LDLIBS_ALL += $(CUDA_LIBS)
all: $(BUILD)/bench/bench_cuda

$(BUILD)/obj/%.o: %.cu $(FLAGS_STAMP) $(wildcard src/compute/cuda/*.cuh) src/compute/cuda/cuda_ops.h src/compute/ops.h
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

$(BUILD)/bench/bench_cuda: bench/bench_cuda.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $< $(LIB) -o $@ $(LDLIBS_ALL)
else
  TEST_SRC := $(filter-out $(CUDA_TEST),$(TEST_SRC))
  TEST_BIN := $(TEST_SRC:tests/unit/%.c=$(BUILD)/tests/%)
endif


.PHONY: all asan test check tiny clean dist install uninstall
all: $(LIB) $(BUILD)/clef $(TEST_BIN) $(TOOL_BIN)

# Objects depend on a record of the flags they were compiled with, so that changing the flags
# (OPT, EXTRA_CFLAGS, LIB_CFLAGS, a pkg-config path) recompiles them instead of mixing two builds.
FLAGS_NOW   := $(CC) $(CFLAGS_ALL) $(LIB_CFLAGS) $(NVCCFLAGS)
$(shell mkdir -p $(BUILD)/obj && { [ "$$(cat $(FLAGS_STAMP) 2>/dev/null)" = '$(FLAGS_NOW)' ] || echo '$(FLAGS_NOW)' > $(FLAGS_STAMP); })

$(LIB_OBJ): OBJ_CFLAGS := $(LIB_CFLAGS)
$(BUILD)/obj/%.o: %.c $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $(OBJ_CFLAGS) -MMD -MP -c $< -o $@

$(LIB): $(LIB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

# The git commit `clef version` reports: rewritten only when it changes (so a new commit relinks
# the CLI, an unchanged tree rebuilds nothing); "unknown" outside a git checkout. CLEF_COMMIT=C
# names it where the tree is built without its .git (deploy/Containerfile, tools/build-image.sh).
$(BUILD)/gen/cli/clef_commit.h: FORCE
	@mkdir -p $(dir $@)
	@c='$(CLEF_COMMIT)'; \
	 if [ -z "$$c" ]; then c=$$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown); \
	   if [ "$$c" != unknown ] && ! git diff --quiet HEAD -- 2>/dev/null; then c="$$c-dirty"; fi; fi; \
	 printf '#define CLEF_GIT_COMMIT "%s"\n' "$$c" > $@.tmp; \
	 if cmp -s $@.tmp $@; then rm -f $@.tmp; else mv $@.tmp $@; fi
$(BUILD)/obj/src/cli/cmd_version.o: $(BUILD)/gen/cli/clef_commit.h
$(BUILD)/obj/src/cli/cmd_version.o: CFLAGS_ALL += -I$(BUILD)/gen
.PHONY: FORCE
FORCE:

$(BUILD)/clef: $(CLI_OBJ) $(LIB)
	$(CC) $(CFLAGS_ALL) $^ -o $@ $(shell pkg-config --libs $(CLI_PKGS)) $(LDLIBS_ALL)

$(BUILD)/tests/%: tests/unit/%.c $(LIB) tests/unit/test.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -Itests/unit $< $(TEST_EXTRA) $(LIB) -o $@ $(TEST_LDFLAGS) $(LDLIBS_ALL)

# The scalar references of the CPU token mixers live outside the library (not run by the engine);
# test_cpu_mixers compiles them in, as bench/build.sh does for bench_mixers.
$(BUILD)/tests/test_cpu_mixers: tests/unit/ref_mixers.c tests/unit/ref_mixers.h
$(BUILD)/tests/test_cpu_mixers: TEST_EXTRA := tests/unit/ref_mixers.c

# tests/unit/test_alloc_fail.c fails the N-th allocation: its link wraps the allocators, and since
# libclef.a's objects call them directly, every allocation site of the library goes through its hook.
ALLOC_WRAP := -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=posix_memalign,--wrap=aligned_alloc,--wrap=strdup,--wrap=mmap,--wrap=mprotect
$(BUILD)/tests/test_alloc_fail: TEST_LDFLAGS := $(ALLOC_WRAP)
$(BUILD)/tests/test_bufpool: TEST_LDFLAGS := -Wl,--wrap=posix_memalign,--wrap=mmap,--wrap=mprotect

$(BUILD)/tests/%: tests/tools/%.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $< $(LIB) -o $@ $(LDLIBS_ALL)

# The web playground (src/serve/playground.c): each web/ file becomes a byte array
# (web/playground.html -> web_playground_html[]) in $(BUILD)/gen/serve/web_assets.h, served as it is.
WEB_SRC := $(sort $(wildcard web/*))
$(BUILD)/gen/serve/web_assets.h: $(WEB_SRC)
	@mkdir -p $(dir $@)
	for f in $(WEB_SRC); do echo "static const unsigned char $$(echo "$$f" | tr -c 'A-Za-z0-9\n' _)[] = {"; \
	  od -An -v -tx1 "$$f" | sed 's/ \([0-9a-f][0-9a-f]\)/0x\1,/g'; echo "};"; done > $@.tmp && mv $@.tmp $@
$(BUILD)/obj/src/serve/playground.o: $(BUILD)/gen/serve/web_assets.h
$(BUILD)/obj/src/serve/playground.o: CFLAGS_ALL += -I$(BUILD)/gen

# ---- What is shipped: $(BUILD)/dist/ (see the top of this file) and make install / uninstall.
VERSION  := $(shell sed -n 's/^\#define CLEF_VERSION "\(.*\)"/\1/p' include/clef.h)
SOMAJOR  := $(firstword $(subst ., ,$(VERSION)))
DIST     := $(BUILD)/dist
SO_REAL  := $(DIST)/libclef.so.$(VERSION)
SO_NAME  := libclef.so.$(SOMAJOR)
PREFIX   ?= /usr/local
BINDIR   ?= $(PREFIX)/bin
LIBDIR   ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
INSTALL  ?= install

# The sanitizer build ships nothing (its objects need the ASan runtime).
ifneq ($(SAN),1)
all: dist
endif
dist: $(SO_REAL) $(DIST)/libclef.so $(DIST)/libclef.a

# The version script is a second guard behind -fvisibility=hidden: whatever else a compiler or a
# C++ header marks default (CUDA's runtime stubs, libstdc++ templates) stays local.
$(DIST)/libclef.map: include/clef.h Makefile
	@mkdir -p $(dir $@)
	printf '{\n  global: clef_*;\n  local: *;\n};\n' > $@

$(SO_REAL): $(LIB_OBJ) $(DIST)/libclef.map
	$(CC) -shared -Wl,-soname,$(SO_NAME) -Wl,--version-script=$(DIST)/libclef.map -Wl,-z,defs \
	    $(OPT) $(LIB_OBJ) -o $@ $(LDLIBS_ALL)

$(DIST)/libclef.so: $(SO_REAL)
	ln -sf libclef.so.$(VERSION) $(DIST)/$(SO_NAME)
	ln -sf $(SO_NAME) $@

# The static library as one relocatable object whose only global symbols are the API (the
# defined, default-visibility clef_* symbols): every internal global (json_*, bpe_*, utf8_*,
# and the library's own clef_* internals) is made local, so nothing collides with the program
# or its other libraries (json-c's json_object_get ...). A program linking it pulls in the whole
# engine, which it would anyway through clef_open.
$(DIST)/libclef.a: $(LIB_OBJ)
	@mkdir -p $(dir $@)
	ld -r -o $(DIST)/clef.o $(LIB_OBJ)
	readelf -sW $(DIST)/clef.o | awk '$$5 == "GLOBAL" && $$6 == "DEFAULT" && $$7 != "UND" && $$8 ~ /^clef_/ { print $$8 }' \
	    | sort -u > $(DIST)/clef.keep
	objcopy --keep-global-symbols=$(DIST)/clef.keep $(DIST)/clef.o
	rm -f $@ && ar rcs $@ $(DIST)/clef.o && rm -f $(DIST)/clef.o

# clef.pc: Libs.private names the libraries the engine links (PKGS as `pkg-config --libs` gives
# them, -lm, -pthread, CUDA's), so that `pkg-config --static --libs clef` is what linking libclef.a
# against the system's shared libraries needs. Not Requires.private: pkg-config --static then also
# pulls each package's own private libraries (libmicrohttpd -> gnutls -> -lunistring -lp11-kit ...),
# which Debian 12 does not install for linking, and the link fails.
# Written straight to its destination, never into the build: PREFIX is part of its content, and two
# installs of one build with different prefixes (the README test beside test_install) would otherwise
# race on one shared file.
CLEF_PC_SED = sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(LIBDIR)|' -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|' \
    -e 's|@VERSION@|$(VERSION)|' -e 's|@LIBS_PRIVATE@|$(strip $(shell pkg-config --libs $(PKGS)) -lm -pthread $(CUDA_LIBS))|'

install: dist $(BUILD)/clef
	$(INSTALL) -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(PKGCONFIGDIR)
	$(INSTALL) -m 755 $(BUILD)/clef $(DESTDIR)$(BINDIR)/clef
	$(INSTALL) -m 755 $(SO_REAL) $(DESTDIR)$(LIBDIR)/libclef.so.$(VERSION)
	ln -sf libclef.so.$(VERSION) $(DESTDIR)$(LIBDIR)/$(SO_NAME)
	ln -sf $(SO_NAME) $(DESTDIR)$(LIBDIR)/libclef.so
	$(INSTALL) -m 644 $(DIST)/libclef.a $(DESTDIR)$(LIBDIR)/libclef.a
	$(INSTALL) -m 644 include/clef.h $(DESTDIR)$(INCLUDEDIR)/clef.h
	$(CLEF_PC_SED) clef.pc.in > $(DESTDIR)$(PKGCONFIGDIR)/clef.pc
	chmod 644 $(DESTDIR)$(PKGCONFIGDIR)/clef.pc

uninstall:
	rm -f $(DESTDIR)$(BINDIR)/clef $(DESTDIR)$(LIBDIR)/libclef.so.$(VERSION) \
	      $(DESTDIR)$(LIBDIR)/$(SO_NAME) $(DESTDIR)$(LIBDIR)/libclef.so $(DESTDIR)$(LIBDIR)/libclef.a \
	      $(DESTDIR)$(INCLUDEDIR)/clef.h $(DESTDIR)$(PKGCONFIGDIR)/clef.pc

asan:
	$(MAKE) BUILD=build-asan SAN=1 all

test: all
	tests/run.sh $(BUILD)

# check builds with every core even when called without -j (CI runs a plain `make check`: the
# ASan build alone took minutes one file at a time).
NPROC := $(shell nproc 2>/dev/null || echo 2)
check:
	$(MAKE) -j$(NPROC) all
	$(MAKE) -j$(NPROC) asan
	tests/run.sh build build-asan

tiny:
	tools/reference/make_tiny.sh models/tiny

clean:
	rm -rf build build-asan

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
