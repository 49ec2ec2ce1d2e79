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
# Kernel files: -O3 lets GCC vectorise loops with runtime alias checks, and
# fused multiply-adds (in the x86-64-v3 clones) speed up polynomials.
KERNELS  := elementwise reduce scan
LDLIBS   := -lopenblas -lz -lm -lpthread -ldl

LIB_SRC  := $(filter-out runtime/main.c runtime/repl.c,$(wildcard runtime/*.c))
LIB_OBJ  := $(LIB_SRC:runtime/%.c=$(BUILD)/obj/%.o)
CLI_OBJ  := $(BUILD)/obj/main.o $(BUILD)/obj/repl.o
LIB      := $(BUILD)/libddplua.so
CLI      := $(BUILD)/ddplua
CDEF     := $(BUILD)/lua/ddp/cdef.lua

NVCC     := $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
ifeq ($(CUDA),0)
NVCC     :=
endif
CUDA_LIB := $(if $(NVCC),$(BUILD)/libddplua_cuda.so)
CUDA_SRC := $(wildcard runtime/cuda/*.cu)
# cudart is linked statically (nvcc's default, spelled out so it stays so):
# the library then needs only the driver's libcuda.so.1 at run time, which
# cudart dlopens itself, so it loads on any machine with an NVIDIA driver.
NVFLAGS  := -O2 -std=c++17 --cudart static \
            -Xcompiler -fPIC,-fvisibility=hidden -Iruntime/include \
            -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
            -gencode arch=compute_90,code=compute_90

.PHONY: all deps run test test-c test-lua bench clean install gpu-check
all: $(LIB) $(CLI) $(CDEF) $(CUDA_LIB)

deps:
	@bash scripts/install-deps.sh

$(BUILD)/obj/%.o:  runtime/%.c runtime/internal.h runtime/errmsg.h runtime/simd.h runtime/include/ddplua.h Makefile | $(BUILD)/obj
	$(CC) $(CFLAGS) $(if $(filter $*,$(KERNELS)),-O3 -ffp-contract=fast) -c $< -o $@

$(BUILD)/obj:
	@mkdir -p $@

$(LIB): $(LIB_OBJ)
	$(CC) -shared -o $@ $^ $(LDLIBS) -Wl,-soname,libddplua.so

# --no-as-needed: the program calls little of the library itself, but
# LuaJIT's ffi.C must find all of it in the global namespace.
$(CLI): $(CLI_OBJ) $(LIB)
	$(CC) -o $@ $(CLI_OBJ) -L$(BUILD) -Wl,--push-state,--no-as-needed -lddplua \
	  -Wl,--pop-state $(PKG_LIBS) $(LDLIBS) \
	  -Wl,-rpath,'$$ORIGIN' -Wl,-rpath,'$$ORIGIN/../lib' -Wl,-E

$(CLI_OBJ): runtime/cli.h

$(CDEF): runtime/include/ddplua.h scripts/gen_cdef.sh
	@mkdir -p $(dir $@)
	bash scripts/gen_cdef.sh $< $@

$(BUILD)/libddplua_cuda.so: $(CUDA_SRC) runtime/include/ddplua.h
	$(NVCC) $(NVFLAGS) -shared -o $@ $(CUDA_SRC)

run: deps all
	$(CLI) examples/tensor_tour.lua

test: deps all
	@bash scripts/run-tests.sh

bench: deps all
	@bash bench/run.sh

install: all
	install -d $(PREFIX)/bin $(PREFIX)/lib $(PREFIX)/share/ddplua/lua/ddp
	install -m 755 $(CLI) $(PREFIX)/bin/ddplua
	install -m 644 $(LIB) $(CUDA_LIB) $(PREFIX)/lib/
	cp -r lua/. bindings/. $(BUILD)/lua/. $(PREFIX)/share/ddplua/lua/

clean:
	rm -rf $(BUILD)
