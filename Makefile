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

CFLAGS   ?= -O2
CFLAGS   += -std=c11 -g -Wall -Wextra -Werror -fPIC -fvisibility=hidden \
            -D_GNU_SOURCE -Iruntime/include -Iruntime $(PKG_CFLAGS)
# C++ (gloo.cc only: Gloo's API is C++), same warnings and visibility.
CXXFLAGS ?= -O2
CXXFLAGS += -std=c++17 -g -Wall -Wextra -Werror -fPIC -fvisibility=hidden \
            -D_GNU_SOURCE -Iruntime/include -Iruntime
# Kernel files: -O3 lets GCC vectorise loops with runtime alias checks, and
# fused multiply-adds (in the x86-64-v3 clones) speed up polynomials, and
# without errno, sqrt vectorises (nothing reads errno after a kernel).
KERNELS  := elementwise reduce scan optim nn_conv nn_pool nn_norm nn_embed nn_loss pg_reduce
LDLIBS   := -lopenblas -lz -lm -lpthread -ldl
GLOO_LIBS := -lgloo -lstdc++

LIB_SRC  := $(filter-out runtime/main.c runtime/repl.c runtime/launcher.c,$(wildcard runtime/*.c))
LIB_CXX  := $(wildcard runtime/*.cc)
LIB_OBJ  := $(LIB_SRC:runtime/%.c=$(BUILD)/obj/%.o) $(LIB_CXX:runtime/%.cc=$(BUILD)/obj/%.o)
CLI_OBJ  := $(BUILD)/obj/main.o $(BUILD)/obj/repl.o $(BUILD)/obj/launcher.o
LIB      := $(BUILD)/libddplua.so
CLI      := $(BUILD)/ddplua
CDEF     := $(BUILD)/lua/ddp/cdef.lua

NVCC     := $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
ifeq ($(CUDA),0)
NVCC     :=
endif
CUDA_LIB := $(if $(NVCC),$(BUILD)/libddplua_cuda.so)
CUDA_SRC := $(wildcard runtime/cuda/*.cu)
CUDA_HDR := $(wildcard runtime/cuda/*.h runtime/cuda/*.cuh) runtime/philox.h
# The same kernel sources built by g++ against runtime/cuda/emu: CUDA on
# the CPU (DDPLUA_CUDA_EMU=N), so CI runs every CUDA path without a GPU.
# NCCL needs real devices and is left out.
EMU_LIB  := $(BUILD)/libddplua_cudaemu.so
EMU_SRC  := $(filter-out runtime/cuda/nccl.cu,$(CUDA_SRC))
EMU_OBJ  := $(EMU_SRC:runtime/cuda/%.cu=$(BUILD)/emu/%.o) $(BUILD)/emu/emu.o
EMU_FLAGS := -std=c++17 -O1 -g -fPIC -fvisibility=hidden -Wall -Wextra -Werror \
            -Wno-unused-parameter -Wno-unknown-pragmas -DDLC_EMU -Iruntime/cuda/emu -Iruntime/cuda -Iruntime/include
# cudart is linked statically (nvcc's default, spelled out so it stays so):
# the library then needs only the driver's libcuda.so.1 at run time, which
# cudart dlopens itself, so it loads on any machine with an NVIDIA driver.
NVFLAGS  := -O2 -std=c++17 --cudart static -diag-suppress 186 \
            -Xcompiler -fPIC,-fvisibility=hidden -Iruntime/include -Iruntime/cuda \
            -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
            -gencode arch=compute_90,code=compute_90

.PHONY: emu all deps run test test-c test-lua bench clean install gpu-check fuzz fuzz-build gpu-bundle
all: $(LIB) $(CLI) $(CDEF) $(CUDA_LIB) $(EMU_LIB)

# `make emu`: only the emulated CUDA library (quick to rebuild).
emu: $(EMU_LIB)

deps:
	@bash scripts/install-deps.sh

$(BUILD)/obj/%.o:  runtime/%.c runtime/internal.h runtime/errmsg.h runtime/simd.h runtime/include/ddplua.h Makefile | $(BUILD)/obj
	$(CC) $(CFLAGS) $(if $(filter $*,$(KERNELS)),-O3 -ffp-contract=fast -fno-math-errno) -c $< -o $@

$(BUILD)/obj/%.o:  runtime/%.cc runtime/gloo.h runtime/include/ddplua.h Makefile | $(BUILD)/obj
	$(CXX) $(CXXFLAGS) -c $< -o $@

$(filter $(BUILD)/obj/nn_%,$(LIB_OBJ)): runtime/nn.h
$(BUILD)/obj/random.o $(BUILD)/obj/nn_embed.o: runtime/philox.h
$(filter $(BUILD)/obj/pg% $(BUILD)/obj/shm.o $(BUILD)/obj/reducer.o,$(LIB_OBJ)): runtime/pg.h runtime/gloo.h

$(BUILD)/obj:
	@mkdir -p $@

$(LIB): $(LIB_OBJ)
	$(CC) -shared -o $@ $^ $(GLOO_LIBS) $(LDLIBS) -Wl,-soname,libddplua.so

# --no-as-needed: the program calls little of the library itself, but
# LuaJIT's ffi.C must find all of it in the global namespace.
$(CLI): $(CLI_OBJ) $(LIB)
	$(CC) -o $@ $(CLI_OBJ) -L$(BUILD) -Wl,--push-state,--no-as-needed -lddplua \
	  -Wl,--pop-state $(PKG_LIBS) $(LDLIBS) \
	  -Wl,-rpath,'$$ORIGIN' -Wl,-rpath,'$$ORIGIN/../lib' -Wl,-E

$(CLI_OBJ): runtime/cli.h
$(BUILD)/obj/safetensors.o $(BUILD)/obj/safetensors_save.o: runtime/safetensors.h
$(BUILD)/obj/store.o $(BUILD)/obj/store_server.o: runtime/store.h

$(CDEF): runtime/include/ddplua.h scripts/gen_cdef.sh
	@mkdir -p $(dir $@)
	bash scripts/gen_cdef.sh $< $@

$(BUILD)/obj/nccl.o $(BUILD)/obj/device.o: runtime/nccl.h runtime/device.h

# -ldl: nccl.cu and blas.cu dlopen libnccl.so.2 and libcublas (never
# linked, so the library loads without them; a glibc before 2.34 keeps
# dlopen in libdl).
# One object per kernel file, so `make -j` compiles them side by side and
# an edit recompiles one file (each takes tens of seconds: three targets).
CUDA_OBJ := $(CUDA_SRC:runtime/cuda/%.cu=$(BUILD)/cuda/%.o)

$(BUILD)/cuda/%.o: runtime/cuda/%.cu $(CUDA_HDR) runtime/include/ddplua.h | $(BUILD)/cuda
	$(NVCC) $(NVFLAGS) -c $< -o $@

$(BUILD)/cuda:
	@mkdir -p $@

$(BUILD)/libddplua_cuda.so: $(CUDA_OBJ)
	$(NVCC) $(NVFLAGS) -shared -o $@ $(CUDA_OBJ) -ldl

$(BUILD)/emu/%.o: runtime/cuda/%.cu $(CUDA_HDR) $(wildcard runtime/cuda/emu/*.h) runtime/include/ddplua.h | $(BUILD)/emu
	$(CXX) $(EMU_FLAGS) -x c++ -c $< -o $@

$(BUILD)/emu/emu.o: runtime/cuda/emu/emu.cc $(wildcard runtime/cuda/emu/*.h) | $(BUILD)/emu
	$(CXX) $(EMU_FLAGS) -c $< -o $@

$(BUILD)/emu:
	@mkdir -p $@

$(EMU_LIB): $(EMU_OBJ)
	$(CXX) -shared -o $@ $^ -lpthread

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

# `make fuzz`: the safetensors reader, then the store's frame parser, under
# libFuzzer, ASan and UBSan for FUZZ_SECONDS each, seeded with the golden
# files and the store's dictionary (clang is installed if missing).
# The runtime is rebuilt with clang and the sanitizers under build/fuzz.
FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 60
FUZZ_DIR     := $(BUILD)/fuzz
FUZZ_CFLAGS  := -std=c11 -g -O1 -Wall -Wextra -fvisibility=hidden -D_GNU_SOURCE \
                -Iruntime/include -Iruntime $(PKG_CFLAGS) \
                -fsanitize=address,undefined -fno-sanitize-recover=undefined
# gloo.cc too (pg_gloo.c calls it); no vptr and function checks: they
# need the UBSan C++ runtime, which only clang++ links in.
FUZZ_CXX     ?= clang++
FUZZ_CXXFLAGS := -std=c++17 -g -O1 -Wall -Wextra -fvisibility=hidden -D_GNU_SOURCE \
                -Iruntime/include -Iruntime \
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

$(FUZZ_DIR)/obj/%.o: runtime/%.c runtime/internal.h runtime/errmsg.h runtime/simd.h runtime/safetensors.h runtime/store.h runtime/include/ddplua.h Makefile
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -c $< -o $@

$(FUZZ_DIR)/obj/%.o: runtime/%.cc runtime/gloo.h runtime/include/ddplua.h Makefile
	@mkdir -p $(dir $@)
	$(FUZZ_CXX) $(FUZZ_CXXFLAGS) -fsanitize=fuzzer-no-link -c $< -o $@

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

install: all
	install -d $(PREFIX)/bin $(PREFIX)/lib $(PREFIX)/share/ddplua/lua/ddp
	install -m 755 $(CLI) $(PREFIX)/bin/ddplua
	install -m 644 $(LIB) $(CUDA_LIB) $(PREFIX)/lib/
	cp -r lua/. bindings/. $(BUILD)/lua/. $(PREFIX)/share/ddplua/lua/

clean:
	rm -rf $(BUILD)
