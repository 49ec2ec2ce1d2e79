# ddplua -- build, test, run.  `make` builds build/libddplua.so and
# build/ddplua (plus build/libddplua_cuda.so when nvcc is found).
# `make run` and `make test` install missing Debian packages first.

CC       ?= cc
BUILD    ?= build
PREFIX   ?= /usr/local
CUDA     ?= auto

PKGS     := openblas luajit libedit
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)

# Generated headers: the CUDA launcher table (scripts/gen_dlc_api.sh).
GEN      := $(BUILD)/gen
# -MMD -MP: every object's header dependencies are written beside it by the
# compiler (build/**/*.d, included below), so no list is kept by hand.
DEPFLAGS := -MMD -MP
# What every compiler of the runtime gets (cc, g++ for gloo.cc and the CUDA
# emulator, clang for the fuzzers; nvcc the includes and visibility): the
# warnings as errors, hidden symbols (only dl_* leave the library), and
# the include paths.
WARN     := -Wall -Wextra -Werror
INCLUDES := -Iruntime/include -Iruntime -I$(GEN)
BASE     := -g $(WARN) -fvisibility=hidden -D_GNU_SOURCE $(INCLUDES)
CFLAGS   ?= -O2
CFLAGS   += -std=c11 -fPIC $(BASE) $(PKG_CFLAGS)
# C++ (dist/gloo.cc only: Gloo's API is C++), the same base.
CXXFLAGS ?= -O2
CXXFLAGS += -std=c++17 -fPIC $(BASE)

# The library, by layer: the order of docs/architecture.md's one line
# "Layers, bottom up: ..." (scripts/check-layers.sh checks the code keeps it).
LAYERS   := $(subst [,,$(subst ],,$(shell sed -n 's/^Layers, bottom up: *//p' docs/architecture.md)))
ifeq ($(strip $(LAYERS)),)
$(error docs/architecture.md has no "Layers, bottom up:" line)
endif
# Kernel files: every file of the compute layers (ops/, nn/) and any
# *_kernels.c.  -O3 lets GCC vectorise loops with runtime alias checks, and
# fused multiply-adds (in the x86-64-v3 clones) speed up polynomials, and
# without errno, sqrt vectorises (nothing reads errno after a kernel).
KERNEL_SRC := $(wildcard runtime/ops/*.c runtime/nn/*.c runtime/*/*_kernels.c)
KERNELS  := $(KERNEL_SRC:runtime/%.c=%)
KFLAGS   := -O3 -ffp-contract=fast -fno-math-errno
# -ldnnl: oneDNN, float32 convolutions with many channels (nn/conv_onednn.c);
# -lgomp: the OpenMP runtime it runs on, whose thread count we set.
LDLIBS   := -lopenblas -ldnnl -lgomp -ljpeg -lpng16 -lz -lm -lpthread -ldl
GLOO_LIBS := -lgloo -lstdc++

LIB_SRC  := $(foreach d,$(LAYERS),$(wildcard runtime/$(d)/*.c))
LIB_CXX  := $(wildcard runtime/dist/*.cc)
LIB_OBJ  := $(LIB_SRC:runtime/%.c=$(BUILD)/obj/%.o) $(LIB_CXX:runtime/%.cc=$(BUILD)/obj/%.o)
# The ddplua program: main, REPL, launcher (cli/).
CLI_SRC  := $(wildcard cli/*.c)
CLI_OBJ  := $(CLI_SRC:cli/%.c=$(BUILD)/obj/cli/%.o)
LIB      := $(BUILD)/libddplua.so
DLC_GEN  := $(GEN)/dlc_api.h $(GEN)/dlc_table.h
# The same objects as an archive: the C tests link it, so they reach the
# runtime's internals without the shared library exporting them.
LIB_A    := $(BUILD)/libddplua.a
CLI      := $(BUILD)/ddplua
CDEF     := $(BUILD)/lua/ddp/cdef.lua
# The public headers, in the order the FFI declarations are generated.
PUBLIC_H := $(wildcard runtime/include/*.h)

NVCC     := $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
ifeq ($(CUDA),0)
NVCC     :=
endif
CUDA_LIB := $(if $(NVCC),$(BUILD)/libddplua_cuda.so)
CUDA_SRC := $(wildcard runtime/cuda/kernels/*.cu)
# The same kernel sources built by g++ against runtime/cuda/emu: CUDA on
# the CPU (DDPLUA_CUDA_EMU=N), so CI runs every CUDA path without a GPU.
# NCCL needs real devices and is left out.
EMU_LIB  := $(BUILD)/libddplua_cudaemu.so
EMU_SRC  := $(filter-out runtime/cuda/kernels/nccl.cu,$(CUDA_SRC))
EMU_OBJ  := $(EMU_SRC:runtime/cuda/kernels/%.cu=$(BUILD)/emu/%.o) $(BUILD)/emu/emu.o \
            $(BUILD)/emu/racecheck.o $(BUILD)/emu/streamcheck.o
# The race checker's build of the same (DDPLUA_CUDA_EMU_RACECHECK=1 loads
# it): the kernel files compiled with -fsanitize=thread, whose load and
# store hooks runtime/cuda/emu/racecheck.cc defines (no TSan runtime).
EMU_RACE_LIB := $(BUILD)/libddplua_cudaemu_race.so
EMU_RACE_OBJ := $(EMU_SRC:runtime/cuda/kernels/%.cu=$(BUILD)/emu-race/%.o) $(BUILD)/emu/emu.o \
            $(BUILD)/emu/racecheck.o $(BUILD)/emu/streamcheck.o
EMU_FLAGS := -std=c++17 -O1 -fPIC -Iruntime/cuda/emu $(BASE) \
            -Wno-unused-parameter -Wno-unknown-pragmas -DDLC_EMU $(DEPFLAGS)
EMU_RACE_FLAGS := $(EMU_FLAGS) -DDLC_EMU_RACE -fsanitize=thread \
            --param tsan-instrument-func-entry-exit=0
# The emulator's own tests (tests/emu/test_*.cc): racy kernels, and the
# kernels' launchers called directly, built as the checker's library builds
# kernels and linked with its objects (so the checker is on).
EMU_TESTS := $(patsubst tests/emu/%.cc,$(BUILD)/emu_%,$(wildcard tests/emu/test_*.cc))
# cudart is linked statically (nvcc's default, spelled out so it stays so):
# the library then needs only the driver's libcuda.so.1 at run time, which
# cudart dlopens itself, so it loads on any machine with an NVIDIA driver.
NVFLAGS  := -O2 -std=c++17 --cudart static -diag-suppress 186 \
            -Xcompiler -fPIC,-fvisibility=hidden $(INCLUDES) \
            -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
            -gencode arch=compute_90,code=compute_90

# C unit tests (tests/c/test_*.c): one program each, linked with the
# archive, in build/ itself (the CUDA probe looks for libddplua_cuda.so
# next to the program the runtime is linked into).
CTEST_SRC := $(wildcard tests/c/test_*.c)
CTESTS   := $(CTEST_SRC:tests/c/%.c=$(BUILD)/%)
# Test hooks the Lua specs reach through the FFI (tests/c/hooks.c): a
# library of their own, never part of libddplua.so.
HOOKS    := $(BUILD)/tests/libddplua_testhooks.so $(BUILD)/tests/libdlc_badabi.so

.PHONY: emu all deps run test ctests test-c bench clean install gpu-check fuzz fuzz-build gpu-bundle chaos mutants
all: $(LIB) $(LIB_A) $(CLI) $(CDEF) $(CUDA_LIB) $(EMU_LIB) $(EMU_RACE_LIB) $(EMU_TESTS) $(CTESTS) $(HOOKS)

# `make emu`: only the emulated CUDA library (quick to rebuild).
emu: $(EMU_LIB) $(EMU_RACE_LIB)

# `make ctests`: build the C unit tests; `make test-c` runs them alone.
ctests: $(CTESTS) $(EMU_TESTS)
test-c: $(CTESTS)
	@bash scripts/run-tests.sh c

deps:
	@bash scripts/install-deps.sh

$(BUILD)/obj/%.o: runtime/%.c Makefile
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(DEPFLAGS) $(if $(filter $*,$(KERNELS)),$(KFLAGS)) -c $< -o $@

$(BUILD)/obj/%.o: runtime/%.cc Makefile
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) $(DEPFLAGS) -c $< -o $@

$(BUILD)/obj/cli/%.o: cli/%.c Makefile
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(DEPFLAGS) -c $< -o $@

# runtime/exports.map: only dl_* leave the library (C++ template code that
# gloo.cc instantiates would otherwise be exported too);
# scripts/check-exports.sh checks they are exactly the public headers'.
# -z nodelete: the library stays mapped until the process ends, since the
# thread pool's and the DataLoader's threads may still sleep inside its code
# when a plain luajit unloads what ffi.load loaded at exit (a crash there).
$(LIB): $(LIB_OBJ) runtime/exports.map
	$(CC) -shared -o $@ $(LIB_OBJ) $(GLOO_LIBS) $(LDLIBS) -Wl,-soname,libddplua.so \
	  -Wl,--version-script,runtime/exports.map -Wl,-z,nodelete

$(LIB_A): $(LIB_OBJ)
	@rm -f $@
	$(AR) rcs $@ $^

# --no-as-needed: the program calls little of the library itself, but
# LuaJIT's ffi.C must find all of it in the global namespace.
$(CLI): $(CLI_OBJ) $(LIB)
	$(CC) -o $@ $(CLI_OBJ) -L$(BUILD) -Wl,--push-state,--no-as-needed -lddplua \
	  -Wl,--pop-state $(PKG_LIBS) $(LDLIBS) \
	  -Wl,-rpath,'$$ORIGIN' -Wl,-rpath,'$$ORIGIN/../lib' -Wl,-E

# The launcher table, from the DLC_API definitions of the kernel files; the
# script rewrites a header only when its text changes, so an edit inside a
# kernel rebuilds no glue.  Every object waits for it (order only: the
# compiler's .d files carry the real dependency once it exists: the last
# lines of this file).
$(DLC_GEN) &: $(CUDA_SRC) scripts/gen_dlc_api.sh
	@bash scripts/gen_dlc_api.sh $(GEN) --not-emulated $(filter-out $(EMU_SRC),$(CUDA_SRC)) \
	  --untraced $(addprefix runtime/cuda/kernels/,memory.cu nccl.cu selftest.cu) -- $(CUDA_SRC)

$(CDEF): $(PUBLIC_H) scripts/gen_cdef.sh
	@mkdir -p $(dir $@)
	bash scripts/gen_cdef.sh $@ $(PUBLIC_H)

# The tests compile with the runtime's flags and see its private headers;
# test_vmath is built as the kernel files are, so its loops vectorise as
# theirs do.
$(BUILD)/test_%: tests/c/test_%.c $(LIB_A) Makefile
	$(CC) $(filter-out -fvisibility=hidden,$(CFLAGS)) -O1 $(DEPFLAGS) -Icli -Itests/c \
	  $(if $(filter vmath,$*),$(KFLAGS)) $< \
	  -Wl,--whole-archive $(LIB_A) -Wl,--no-whole-archive \
	  $(GLOO_LIBS) $(LDLIBS) -o $@

$(BUILD)/tests/libddplua_testhooks.so: tests/c/hooks.c Makefile
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(DEPFLAGS) -shared -o $@ $<

# A CUDA library of another build, for the launcher-table check.
$(BUILD)/tests/libdlc_badabi.so: tests/c/badabi.c Makefile
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(DEPFLAGS) -shared -o $@ $<

# -ldl: nccl.cu and blas.cu dlopen libnccl.so.2 and libcublas (never
# linked, so the library loads without them; a glibc before 2.34 keeps
# dlopen in libdl).
# One object per kernel file, so `make -j` compiles them side by side and
# an edit recompiles one file (each takes tens of seconds: three targets).
# nvcc writes its dependency file with -MD -MF beside the object.
CUDA_OBJ := $(CUDA_SRC:runtime/cuda/kernels/%.cu=$(BUILD)/cuda/%.o)

$(BUILD)/cuda/%.o: runtime/cuda/kernels/%.cu Makefile
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -MD -MF $(@:.o=.d) -c $< -o $@

$(BUILD)/libddplua_cuda.so: $(CUDA_OBJ)
	$(NVCC) $(NVFLAGS) -shared -o $@ $(CUDA_OBJ) -ldl

$(BUILD)/emu/%.o: runtime/cuda/kernels/%.cu Makefile
	@mkdir -p $(dir $@)
	$(CXX) $(EMU_FLAGS) -x c++ -c $< -o $@

$(BUILD)/emu/%.o: runtime/cuda/emu/%.cc Makefile
	@mkdir -p $(dir $@)
	$(CXX) $(EMU_FLAGS) -c $< -o $@

$(BUILD)/emu-race/%.o: runtime/cuda/kernels/%.cu Makefile
	@mkdir -p $(dir $@)
	$(CXX) $(EMU_RACE_FLAGS) -x c++ -c $< -o $@

$(EMU_LIB): $(EMU_OBJ)
	$(CXX) -shared -Wl,--no-undefined -o $@ $^ -lpthread -ldl

$(EMU_RACE_LIB): $(EMU_RACE_OBJ)
	$(CXX) -shared -Wl,--no-undefined -o $@ $^ -lpthread -ldl

$(BUILD)/emu_%: tests/emu/%.cc $(EMU_RACE_OBJ) Makefile
	$(CXX) $(EMU_RACE_FLAGS) -o $@ $< $(EMU_RACE_OBJ) -lpthread -ldl

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)

# run, test and bench build after deps in a fresh make (which then sees the
# packages deps installed: pkg-config is read when a Makefile is parsed),
# on every core (the CUDA kernel files take a minute on one).
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
BUILD_ALL = @$(MAKE) --no-print-directory -j$(JOBS) all

run: deps
	$(BUILD_ALL)
	$(CLI) --nproc 2 examples/fashion_mnist.lua --model mlp --epochs 3 --checkpoint $(BUILD)/fashion_mnist.ckpt

test: deps
	$(BUILD_ALL)
	@bash scripts/run-tests.sh

# `make chaos`: the fault matrix (tests/chaos/run.lua) -- a rank that exits,
# segfaults, errors, loops, is stopped or killed, the launcher or the
# store's host killed -- on shm, gloo and hier (two launchers); a table of
# seconds to end, the rank named, exit codes, what was left.  A few minutes.
chaos: deps
	$(BUILD_ALL)
	@grep -m1 '^flags' /proc/cpuinfo || true
	@echo "cores: $$(nproc)"
	$(CLI) tests/chaos/run.lua

# `make mutants`: every __syncthreads of the kernel files with shared
# memory removed in turn, each mutant run through its CUDA specs on the
# emulator in shuffled order, in run-ahead order and under the race checker
# (scripts/cuda-mutants.sh; about 2 minutes a mutant).
mutants: all
	@bash scripts/cuda-mutants.sh

# `make fuzz`: the safetensors reader, then the store's frame parser, under
# libFuzzer, ASan and UBSan for FUZZ_SECONDS each, seeded with the golden
# files and the store's dictionary (clang is installed if missing).
# The runtime is rebuilt with clang and the sanitizers under build/fuzz.
FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 60
FUZZ_DIR     := $(BUILD)/fuzz
# the base without -Werror: clang warns where gcc does not
FUZZ_BASE    := $(filter-out -Werror,$(BASE))
FUZZ_CFLAGS  := -std=c11 -O1 $(FUZZ_BASE) $(PKG_CFLAGS) \
                -fsanitize=address,undefined -fno-sanitize-recover=undefined
# gloo.cc too (pg_gloo.c calls it); no vptr and function checks: they
# need the UBSan C++ runtime, which only clang++ links in.
FUZZ_CXX     ?= clang++
FUZZ_CXXFLAGS := -std=c++17 -O1 $(FUZZ_BASE) \
                -fsanitize=address,undefined -fno-sanitize=vptr,function \
                -fno-sanitize-recover=undefined
FUZZ_OBJ     := $(LIB_SRC:runtime/%.c=$(FUZZ_DIR)/obj/%.o) $(LIB_CXX:runtime/%.cc=$(FUZZ_DIR)/obj/%.o)
FUZZ_BIN     := $(FUZZ_DIR)/fuzz_safetensors
FUZZ_STORE   := $(FUZZ_DIR)/fuzz_store

fuzz: fuzz-build
	@mkdir -p $(FUZZ_DIR)/corpus
	cp tests/golden/st_*.safetensors $(FUZZ_DIR)/corpus/
	$(FUZZ_BIN) -max_total_time=$(FUZZ_SECONDS) -max_len=16384 -timeout=10 \
	  -dict=tests/fuzz/safetensors.dict -artifact_prefix=$(FUZZ_DIR)/ -print_final_stats=1 \
	  $(FUZZ_DIR)/corpus
	@mkdir -p $(FUZZ_DIR)/corpus_store
	$(FUZZ_STORE) -max_total_time=$(FUZZ_SECONDS) -max_len=4096 -timeout=10 \
	  -dict=tests/fuzz/store.dict -artifact_prefix=$(FUZZ_DIR)/store- -print_final_stats=1 \
	  $(FUZZ_DIR)/corpus_store

fuzz-build:
	@command -v $(FUZZ_CC) >/dev/null 2>&1 || bash scripts/install-deps.sh clang
	@$(MAKE) --no-print-directory $(FUZZ_BIN) $(FUZZ_STORE)

$(FUZZ_DIR)/obj/%.o: runtime/%.c Makefile
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) $(DEPFLAGS) -fsanitize=fuzzer-no-link -c $< -o $@

$(FUZZ_DIR)/obj/%.o: runtime/%.cc Makefile
	@mkdir -p $(dir $@)
	$(FUZZ_CXX) $(FUZZ_CXXFLAGS) $(DEPFLAGS) -fsanitize=fuzzer-no-link -c $< -o $@

$(FUZZ_BIN): tests/fuzz/fuzz_safetensors.c $(FUZZ_OBJ)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $^ $(GLOO_LIBS) $(LDLIBS)

$(FUZZ_STORE): tests/fuzz/fuzz_store.c $(FUZZ_OBJ)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $^ $(GLOO_LIBS) $(LDLIBS)

# `make gpu-bundle`: what tests/gpu/check.sh needs on a bare GPU machine --
# the build, the test programs and the shared libraries they link beyond a
# basic system, copied into build/gpu-libs (found there by LD_LIBRARY_PATH),
# packed into build/gpu-bundle.tar.xz, the one path to carry there.
gpu-bundle: all
	@bash tests/gpu/check.sh --stage

bench: deps
	$(BUILD_ALL)
	@bash bench/run.sh

# The library's Lua files replace any earlier install's: a file that moved
# into a folder (ddp/nn.lua -> ddp/nn/init.lua) would otherwise leave the
# old one behind, found first by package.path's ddp/?.lua.
install: all
	rm -rf $(PREFIX)/share/ddplua/lua
	install -d $(PREFIX)/bin $(PREFIX)/lib $(PREFIX)/share/ddplua/lua/ddp
	install -m 755 $(CLI) $(PREFIX)/bin/ddplua
	install -m 644 $(LIB) $(CUDA_LIB) $(PREFIX)/lib/
	cp -r lua/. bindings/. $(BUILD)/lua/. $(PREFIX)/share/ddplua/lua/
	@case ":$$PATH:" in *":$(PREFIX)/bin:"*) ;; \
	  *) echo "ddplua is in $(PREFIX)/bin, which is not on PATH: export PATH=\"$(PREFIX)/bin:\$$PATH\"";; esac

clean:
	rm -rf $(BUILD)

# Every object that may include cuda/dlc.h waits for the generated launcher
# table (here, after every list of objects is defined).
$(LIB_OBJ) $(CLI_OBJ) $(CUDA_OBJ) $(EMU_OBJ) $(EMU_RACE_OBJ) $(FUZZ_OBJ) $(CTESTS) $(EMU_TESTS): | $(DLC_GEN)
