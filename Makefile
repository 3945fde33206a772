# clef — build, test and sanitizer builds.
#
#   make            optimized library, CLI and tests in build/
#   make asan       the same with ASan+UBSan in build-asan/
#   make test       run the whole suite against build/
#   make check      build both, run the whole suite on each (what CI runs)
#   make tiny       write the tiny release-layout checkpoint to models/tiny/
#
# Sources are discovered: every src/**/*.c except src/cli (the CLI's main) and
# src/compute/cuda (built only with CUDA=1) goes into libclef.a; every
# tests/unit/test_*.c and tests/tools/*.c becomes its own program.

CC      ?= cc
BUILD   ?= build
PKGS    := oniguruma libutf8proc libmicrohttpd libpng libjpeg libwebp libwebpdemux libgif libavformat libavcodec libswscale libavutil
WARN    := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wno-unused-parameter
OPT     ?= -O2 -g -march=x86-64-v2 -mtune=native
CFLAGS_ALL = -std=c11 -D_GNU_SOURCE $(WARN) $(OPT) -pthread -Iinclude -Isrc \
             $(shell pkg-config --cflags $(PKGS)) $(EXTRA_CFLAGS)
LDLIBS_ALL = $(shell pkg-config --libs $(PKGS)) -lm -pthread $(EXTRA_LDLIBS)

ifeq ($(SAN),1)
  OPT := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all
  EXTRA_LDLIBS += -fsanitize=address,undefined
endif

LIB_SRC  := $(shell find src -name '*.c' -not -path 'src/cli/*' -not -path 'src/compute/cuda/*' | sort)
CLI_SRC  := $(sort $(wildcard src/cli/*.c))
TEST_SRC := $(sort $(wildcard tests/unit/test_*.c))
TOOL_SRC := $(sort $(wildcard tests/tools/*.c))

LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/obj/%.o)
TEST_BIN := $(TEST_SRC:tests/unit/%.c=$(BUILD)/tests/%)
TOOL_BIN := $(TOOL_SRC:tests/tools/%.c=$(BUILD)/tests/%)
LIB      := $(BUILD)/libclef.a

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
  NVCCFLAGS  := -std=c++17 $(NVCC_OPT) -fmad=false $(NVCC_GENCODE) -Iinclude -Isrc \
                -Xcompiler -Wall,-Wextra,-Wno-unused-parameter,-Werror $(EXTRA_NVCCFLAGS)
  CUDA_SRC   := $(sort $(wildcard src/compute/cuda/*.cu))
  CUDA_OBJ   := $(CUDA_SRC:%.cu=$(BUILD)/obj/%.o)
  LIB_OBJ    += $(CUDA_OBJ)
  CFLAGS_ALL += -DCLEF_HAVE_CUDA
  LDLIBS_ALL += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublasLt -lcublas -lcudart -lstdc++ -ldl -lrt
all: $(BUILD)/bench/bench_cuda

$(BUILD)/obj/%.o: %.cu $(wildcard src/compute/cuda/*.cuh) src/compute/cuda/cuda_ops.h src/compute/ops.h
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

$(BUILD)/bench/bench_cuda: bench/bench_cuda.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $< $(LIB) -o $@ $(LDLIBS_ALL)
else
  TEST_SRC := $(filter-out $(CUDA_TEST),$(TEST_SRC))
  TEST_BIN := $(TEST_SRC:tests/unit/%.c=$(BUILD)/tests/%)
endif


.PHONY: all asan test check tiny clean
all: $(LIB) $(BUILD)/clef $(TEST_BIN) $(TOOL_BIN)

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -MMD -MP -c $< -o $@

$(LIB): $(LIB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/clef: $(CLI_OBJ) $(LIB)
	$(CC) $(CFLAGS_ALL) $^ -o $@ $(LDLIBS_ALL)

$(BUILD)/tests/%: tests/unit/%.c $(LIB) tests/unit/test.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -Itests/unit $< $(LIB) -o $@ $(LDLIBS_ALL)

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

asan:
	$(MAKE) BUILD=build-asan SAN=1 all

test: all
	tests/run.sh $(BUILD)

check:
	$(MAKE) all
	$(MAKE) asan
	tests/run.sh build build-asan

tiny:
	tools/reference/make_tiny.sh models/tiny

clean:
	rm -rf build build-asan

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
