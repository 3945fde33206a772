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
PKGS    := oniguruma libutf8proc libmicrohttpd libpng libjpeg libwebp libwebpdemux libgif
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
