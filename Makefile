# scaletrain build. `make` builds build/scaletrain and the tests; `make check`
# (scripts/test.sh) installs what is missing, builds and runs the whole test
# suite; `make run` (scripts/run-default.sh) does the default training run.
# Other build folders: make BUILD=build-x; sanitizers: make asan.

BUILD ?= build
CC ?= cc
OPENBLAS_DIR ?= /usr/lib/x86_64-linux-gnu/openblas-openmp
OPENBLAS_INC ?= /usr/include/x86_64-linux-gnu/openblas-openmp

OPT ?= -O3 -march=native
WARN = -Wall -Wextra -Werror -Wno-unused-parameter -Wshadow -Wstrict-prototypes -Wno-format-truncation
CFLAGS_ALL = -std=c11 -D_GNU_SOURCE $(OPT) -g -fopenmp $(WARN) -Iinclude -Isrc -I$(OPENBLAS_INC) $(EXTRA_CFLAGS)
LDLIBS_ALL = -L$(OPENBLAS_DIR) -Wl,-rpath,$(OPENBLAS_DIR) -lopenblas -lyaml -lcjson -lz -lm -fopenmp $(EXTRA_LDFLAGS)

LIB_SRC := $(sort $(wildcard src/*/*.c))
TOOL_SRC := $(sort $(wildcard tools/*.c))
TEST_SRC := $(sort $(wildcard tests/test_*.c))
BENCH_SRC := $(sort $(wildcard bench/*.c))
HEADERS := $(wildcard include/scaletrain/*.h src/*/*.h tests/*.h)

LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
TOOL_OBJ := $(TOOL_SRC:%.c=$(BUILD)/obj/%.o)
TESTS := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
BENCHES := $(BENCH_SRC:bench/%.c=$(BUILD)/bench/%)

.PHONY: all tests benches check run deps asan clean format
all: $(BUILD)/scaletrain tests

# -MMD: each object depends on exactly the headers it includes.
$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -MMD -MP -c $< -o $@

$(BUILD)/libscaletrain.a: $(LIB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/scaletrain: $(TOOL_OBJ) $(BUILD)/libscaletrain.a
	$(CC) $(CFLAGS_ALL) -o $@ $(TOOL_OBJ) $(BUILD)/libscaletrain.a $(LDLIBS_ALL)

$(BUILD)/tests/%: tests/%.c $(BUILD)/libscaletrain.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -MMD -MP -o $@ $< $(BUILD)/libscaletrain.a $(LDLIBS_ALL)

$(BUILD)/bench/%: bench/%.c $(BUILD)/libscaletrain.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -MMD -MP -o $@ $< $(BUILD)/libscaletrain.a $(LDLIBS_ALL)

tests: $(TESTS)
benches: $(BENCHES)

deps:
	@scripts/deps.sh

# The README's two commands.
run:
	scripts/run-default.sh

check:
	scripts/test.sh

asan:
	@$(MAKE) --no-print-directory BUILD=build-asan OPT="-O1 -fno-omit-frame-pointer" \
	  EXTRA_CFLAGS="-fsanitize=address,undefined -fno-sanitize-recover=undefined" \
	  EXTRA_LDFLAGS="-fsanitize=address,undefined" tests

-include $(LIB_OBJ:.o=.d) $(TOOL_OBJ:.o=.d) $(TESTS:=.d) $(BENCHES:=.d)

format:
	clang-format -i $(LIB_SRC) $(TOOL_SRC) $(TEST_SRC) $(BENCH_SRC) $(HEADERS)

clean:
	rm -rf build build-*
