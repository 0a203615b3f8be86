# scaletrain build. `make` builds build/scaletrain and the tests; `make check`
# (scripts/test.sh) installs what is missing, builds and runs the whole test
# suite; `make run` (scripts/run-default.sh) does the default training run.
# Other build folders: make BUILD=build-x; sanitizers: make asan.

BUILD ?= build
CC ?= cc
# DEPS_PREFIX: a folder holding build dependencies unpacked from .deb files
# (scripts/gpu-session.sh on a machine where they are not installed): its
# include and library folders are searched first, and OpenBLAS and OpenMPI
# come from it. Empty (the default): the system's.
DEPS_PREFIX ?=
# The target's multiarch name (x86_64-linux-gnu, aarch64-linux-gnu): the
# folder under /usr/lib and /usr/include where Debian and Ubuntu keep its
# libraries, OpenBLAS's variants among them. From the compiler, so that
# CC=aarch64-linux-gnu-gcc builds for arm64 (make arm64).
ifeq ($(origin MULTIARCH),undefined)
MULTIARCH := $(or $(shell $(CC) -print-multiarch 2>/dev/null),$(shell uname -m)-linux-gnu)
endif
DEPS_LIBDIR = $(DEPS_PREFIX)/usr/lib/$(MULTIARCH)
OPENBLAS_DIR ?= $(DEPS_LIBDIR)/openblas-openmp
OPENBLAS_INC ?= $(DEPS_PREFIX)/usr/include/$(MULTIARCH)/openblas-openmp

OPT ?= -O3 -march=native
# sqrtf and friends without errno, and floating-point operations that never
# trap (no program here enables FP exceptions), so that loops calling them or
# clamping with a comparison vectorize: without -fno-trapping-math gcc 12
# leaves core/fastmath.h's exp (and so GELU's tanh and the softmaxes)
# scalar. No other fast-math: every result is the same IEEE value, NaN and
# Inf keep their meaning, sums keep their order.
MATHFLAGS = -fno-math-errno -fno-trapping-math
# Warnings are errors here and in CI; WERROR= makes them warnings (a GPU
# machine's newer gcc found a maybe-uninitialized that gcc 12 does not:
# scripts/gpu-session.sh builds with WERROR= so that its tests still run).
WERROR ?= -Werror
WARN = -Wall -Wextra $(WERROR) -Wno-unused-parameter -Wshadow -Wstrict-prototypes -Wno-format-truncation
# MPI (src/comm/comm_mpi*.c) with the flags of OpenMPI's compiler wrapper;
# where there is no mpicc the MPI backend is built as a stub that says so.
MPI_CFLAGS := $(shell mpicc --showme:compile 2>/dev/null)
MPI_LIBS := $(shell mpicc --showme:link 2>/dev/null)
ifneq ($(DEPS_PREFIX),)
DEPS_CFLAGS := -I$(DEPS_PREFIX)/usr/include -I$(DEPS_PREFIX)/usr/include/$(MULTIARCH)
DEPS_LIBS := -L$(DEPS_LIBDIR) -Wl,-rpath,$(DEPS_LIBDIR) -L$(DEPS_PREFIX)/lib/$(MULTIARCH)
ifneq ($(wildcard $(DEPS_LIBDIR)/openmpi/include/mpi.h),)
MPI_CFLAGS := -I$(DEPS_LIBDIR)/openmpi/include -I$(DEPS_LIBDIR)/openmpi/include/openmpi
MPI_LIBS := -L$(DEPS_LIBDIR)/openmpi/lib -Wl,-rpath,$(DEPS_LIBDIR)/openmpi/lib -lmpi
endif
endif
ifeq ($(strip $(MPI_LIBS)),)
MPI_CFLAGS := -DST_NO_MPI
endif
# The CUDA backend (src/cuda/*.cu): built whenever nvcc is found, so CI
# compiles it on every submission; CUDA=0 leaves it out. A binary built with
# it still runs on a machine without a GPU, on the CPU, and says so.
CUDA_HOME ?= /usr/local/cuda
NVCC ?= $(CUDA_HOME)/bin/nvcc
CUDA ?= $(if $(wildcard $(NVCC)),1,0)
CUDA_ARCH ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
	-gencode arch=compute_90,code=compute_90
# NCCL and cuDNN are found where their installers put them, unless
# NCCL_HOME / CUDNN_HOME say where: the toolkit (CUDA_HOME); /usr, as
# NVIDIA's Debian and Ubuntu packages and NGC containers have them (headers
# in include/ or include/$(MULTIARCH)/, libraries in lib/$(MULTIARCH)/); or
# pip's nvidia-nccl / nvidia-cudnn packages of the python3 on PATH (PyTorch's:
# site-packages/nvidia/nccl, nvidia/cudnn, libraries only as .so.N). The
# first that has the header is taken; `make config` prints what was found.
# LIB_SEARCH: the homes looked in before pip's; FIND_PYTHON: the python
# whose pip packages are looked in (tests/e2e/build_find_libs.sh sets both).
LIB_SEARCH ?= $(CUDA_HOME) /usr
FIND_PYTHON ?= python3
# find_home HEADER,PIP_MODULE: the first home holding HEADER
find_home = $(or $(firstword $(foreach h,$(LIB_SEARCH),$(if $(wildcard $(h)/include/$(1) $(h)/include/$(MULTIARCH)/$(1)),$(h)))),$(shell $(FIND_PYTHON) -c 'import os, nvidia.$(2) as m; d = list(m.__path__)[0]; print(d if os.path.isfile(os.path.join(d, "include", "$(1)")) else "")' 2>/dev/null))
# the folder of a home's HEADER, and of its LIB (libX.so or libX.so.N)
find_inc = $(patsubst %/,%,$(firstword $(dir $(wildcard $(1)/include/$(2) $(1)/include/$(MULTIARCH)/$(2)))))
find_lib = $(firstword $(dir $(wildcard $(1)/lib64/$(2).so* $(1)/lib/$(2).so* $(1)/lib/$(MULTIARCH)/$(2).so*)))
# -I for a header folder, but none for the compiler's own (/usr/include and its multiarch folder)
inc_flag = $(if $(filter /usr/include /usr/include/$(MULTIARCH),$(1)),,-I$(1))
# NCCL (the communicator between GPUs, src/cuda/comm_nccl.cu): nccl.h and
# libnccl.so (or only libnccl.so.2); NCCL=0 when nccl.h is not found, and
# the NCCL communicator then says it was left out.
ifeq ($(origin NCCL_HOME),undefined)
NCCL_HOME := $(or $(if $(filter 1,$(CUDA)),$(call find_home,nccl.h,nccl)),$(firstword $(LIB_SEARCH)))
endif
NCCL_INC := $(call find_inc,$(NCCL_HOME),nccl.h)
NCCL ?= $(if $(NCCL_INC),1,0)
NCCL_LIBDIR := $(call find_lib,$(NCCL_HOME),libnccl)
# cuDNN's fused attention (src/cuda/attention_cudnn.cpp, model.attention_kernel):
# cudnn.h and libcudnn.so (or only libcudnn.so.9), NVIDIA's header-only
# cudnn-frontend from CUDNN_FE (scripts/deps.sh fetches it), and the
# toolkit's NVRTC (which the frontend's headers reference); CUDNN=0 when any
# is missing, and model.attention_kernel=cudnn then says it was left out.
# The file is host code: the host compiler builds it, at -O1 (graph set-up,
# run once per shape; nvcc took minutes on its headers).
# why a build has no cuDNN attention (make config)
CUDNN_WHY = $(if $(CUDNN_INC),$(if $(wildcard $(CUDNN_FE)/cudnn_frontend.h),$(if $(CUDNN_LIBDIR),$(if $(wildcard $(CUDA_HOME)/lib64/libnvrtc.so),(CUDNN=0 given),(no libnvrtc.so in $(CUDA_HOME)/lib64)),(no libcudnn.so in $(CUDNN_HOME))),(no cudnn-frontend in $(CUDNN_FE): scripts/deps.sh fetches it)),(no cudnn.h in $(LIB_SEARCH) or pip's nvidia.cudnn; CUDNN_HOME says where))
ifeq ($(origin CUDNN_HOME),undefined)
CUDNN_HOME := $(or $(if $(filter 1,$(CUDA)),$(call find_home,cudnn.h,cudnn)),$(firstword $(LIB_SEARCH)))
endif
CUDNN_FE ?= .tools/cudnn-frontend/include
CUDNN_INC := $(call find_inc,$(CUDNN_HOME),cudnn.h)
CUDNN_LIBDIR := $(call find_lib,$(CUDNN_HOME),libcudnn)
CUDNN ?= $(if $(and $(CUDNN_INC),$(wildcard $(CUDNN_FE)/cudnn_frontend.h),$(CUDNN_LIBDIR),$(wildcard $(CUDA_HOME)/lib64/libnvrtc.so)),1,0)
# CUDA_LAZY=1 (the default on x86-64 and arm64, the two that
# src/core/jump.h has jumps for): the CUDA runtime linked statically (as
# nvcc links it), cuBLASLt, NCCL, cuDNN and NVRTC loaded when first needed
# by the sonames read off the toolkit's files here (src/cuda/libs.h), so
# that a CUDA build starts on a machine without them and says what is
# missing; the rpath still names their folders. 0: linked as shared
# libraries, which the loader then requires at start.
CUDA_LAZY ?= $(if $(filter x86_64-% aarch64-%,$(MULTIARCH)),1,0)
# CUDART_DIR: the folder of the static CUDA runtime linked when CUDA_LAZY=1
# (make arm64-cuda points it at an arm64 one).
CUDART_DIR ?= $(CUDA_HOME)/lib64
comma := ,
soname = $(shell readelf -d $(firstword $(wildcard $(1))) 2>/dev/null | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
ifeq ($(CUDA),1)
CUDA_CFLAGS := -DST_HAVE_CUDA -I$(CUDA_HOME)/include
CUDA_LIBS := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublasLt -lcudart -lstdc++
CU_SRC := $(sort $(wildcard src/cuda/*.cu))
ifeq ($(NCCL),1)
NCCL_FLAGS := -DST_HAVE_NCCL $(call inc_flag,$(NCCL_INC))
CUDA_CFLAGS += -DST_HAVE_NCCL
CUDA_LIBS := -L$(NCCL_LIBDIR) -Wl,-rpath,$(NCCL_LIBDIR) $(if $(wildcard $(NCCL_LIBDIR)libnccl.so),-lnccl,-l:libnccl.so.2) $(CUDA_LIBS)
endif
ifeq ($(CUDNN),1)
CUDNN_FLAGS := -DST_HAVE_CUDNN
CUDA_CFLAGS += -DST_HAVE_CUDNN
CUDNN_SRC := src/cuda/attention_cudnn.cpp
CUDA_LIBS := -L$(CUDNN_LIBDIR) -Wl,-rpath,$(CUDNN_LIBDIR) $(if $(wildcard $(CUDNN_LIBDIR)libcudnn.so),-lcudnn,-l:libcudnn.so.9) -lnvrtc $(CUDA_LIBS)
endif
ifeq ($(CUDA_LAZY),1)
CUDA_CFLAGS += -DST_CUDA_LAZY_LIBS \
	-DST_CUBLASLT_SO=\"$(call soname,$(CUDA_HOME)/lib64/libcublasLt.so*)\" \
	-DST_NCCL_SO=\"$(or $(call soname,$(NCCL_LIBDIR)libnccl.so*),libnccl.so.2)\" \
	-DST_CUDNN_SO=\"$(or $(call soname,$(CUDNN_LIBDIR)libcudnn.so*),libcudnn.so.9)\" \
	-DST_NVRTC_SO=\"$(call soname,$(CUDA_HOME)/lib64/libnvrtc.so*)\"
CUDA_LIBS := -L$(CUDART_DIR) -Wl,-rpath,$(CUDA_HOME)/lib64 $(if $(NCCL_LIBDIR),-Wl$(comma)-rpath$(comma)$(NCCL_LIBDIR)) \
	$(if $(CUDNN_LIBDIR),-Wl$(comma)-rpath$(comma)$(CUDNN_LIBDIR)) -lcudart_static -ldl -lrt -lstdc++
endif
endif
# CUDA_EMU=1 (`make emu`, into build-emu): the same CUDA sources compiled
# with g++ against tests/cudaemu/, which runs their kernels on the CPU and
# stands in for the CUDA runtime and cuBLASLt (tests/cudaemu/README.md), so
# the CUDA tests run where no GPU is. Never a user's build. NCCL is
# tests/cudaemu/nccl.cpp: the real nccl.h's API done with MPI between the
# ranks (no libnccl is linked), so src/cuda/comm_nccl.cu runs too.
# -fno-strict-aliasing: kernels move bf16 data as uint4 or 32-bit words
# through casts, as CUDA code does; g++ at -O2 may otherwise reorder them.
# cuDNN is not emulated: model.attention_kernel=cudnn says so there. The
# driver's libcuda.so.1, which the hardware probe loads, is the emulator's
# (tests/cudaemu/driver/libcuda.cpp, built into $(BUILD)/driver, the
# binaries' run path), so check, plan and bench see the emulated devices.
CUDA_EMU ?= 0
ifeq ($(CUDA_EMU),1)
CUDA := 1
NCCL := 1
CUDNN := 0
CUDNN_FLAGS :=
CUDNN_SRC :=
NCCL_FLAGS := -DST_HAVE_NCCL
CUDA_CFLAGS := -DST_HAVE_CUDA -DST_HAVE_NCCL -DST_CUDA_EMU -I$(CUDA_HOME)/include
EMU_DRIVER := $(BUILD)/driver/libcuda.so.1
# (DT_RPATH, not RUNPATH: searched before LD_LIBRARY_PATH, which a CUDA
# container points at the real driver)
CUDA_LIBS := -lstdc++ -Wl,--disable-new-dtags,-rpath,$(abspath $(BUILD))/driver
CU_SRC := $(sort $(wildcard src/cuda/*.cu))
EMU_SRC := $(sort $(wildcard tests/cudaemu/*.cpp))
EMU_CU := $(sort $(wildcard tests/cudaemu/*.cu)) # the emulator's own kernels (selftest.cu)
EMU_CXXFLAGS = -std=c++17 -O2 -g -ffp-contract=off -fno-strict-aliasing -D_GNU_SOURCE -DST_HAVE_CUDA -DST_CUDA_EMU -Wall -Wextra -Werror \
	-Wno-unused-parameter -Wno-format-truncation -Wno-missing-field-initializers -Wno-unknown-pragmas \
	-Iinclude -Isrc -Isrc/cuda \
	-Itests/cudaemu -I$(CUDA_HOME)/include $(DEPS_CFLAGS) -I$(OPENBLAS_INC) $(NCCL_FLAGS) $(MPI_CFLAGS) $(EXTRA_CXXFLAGS)
endif
# libdeflate (Debian's libdeflate-dev): a gzip-compressed IDX file is
# decompressed whole by it, about three times as fast as zlib's inflate
# (src/data/idx.c; a Fashion-MNIST start 0.17 s sooner), zlib still reading
# what it refuses, with the precise error; LIBDEFLATE=0 when its header or
# the target's library is missing.
LIBDEFLATE ?= $(if $(and $(wildcard $(DEPS_PREFIX)/usr/include/libdeflate.h /usr/include/libdeflate.h),$(wildcard $(DEPS_LIBDIR)/libdeflate.so /usr/lib/$(MULTIARCH)/libdeflate.so)),1,0)
ifeq ($(LIBDEFLATE),1)
LIBDEFLATE_CFLAGS := -DST_HAVE_LIBDEFLATE
LIBDEFLATE_LIBS := -ldeflate
endif
NVCC_WERROR = $(if $(strip $(WERROR)),-Werror all-warnings -Xcompiler -Werror)
# --threads 0: the architectures of one file compiled side by side (the
# flash attention file alone took 56 s of a 194 s build on 2 cores; 182 s with).
NVCCFLAGS = -std=c++17 -O3 -g -lineinfo --threads 0 $(CUDA_ARCH) -DST_HAVE_CUDA $(NCCL_FLAGS) $(CUDNN_FLAGS) -D_GNU_SOURCE -Iinclude -Isrc \
	-Xcompiler -Wall,-Wextra,-Wno-unused-parameter,-Wno-format-truncation $(NVCC_WERROR)

CFLAGS_ALL = -std=c11 -D_GNU_SOURCE $(OPT) $(MATHFLAGS) -g -fopenmp $(WARN) -Iinclude -Isrc $(DEPS_CFLAGS) -I$(OPENBLAS_INC) $(MPI_CFLAGS) $(CUDA_CFLAGS) $(LIBDEFLATE_CFLAGS) $(EXTRA_CFLAGS)
LDLIBS_ALL = $(DEPS_LIBS) -L$(OPENBLAS_DIR) -Wl,-rpath,$(OPENBLAS_DIR) -lopenblas -lyaml -lcjson $(LIBDEFLATE_LIBS) -lz -lm -fopenmp $(MPI_LIBS) $(CUDA_LIBS) -lpthread $(EXTRA_LDFLAGS)

LIB_SRC := $(sort $(wildcard src/*/*.c))
TOOL_SRC := $(sort $(wildcard tools/*.c))
# tests/mpi/*.c are multi-rank programs that tests/e2e scripts start with mpirun.
TEST_SRC := $(sort $(wildcard tests/test_*.c tests/mpi/*.c))
BENCH_SRC := $(sort $(wildcard bench/*.c))
HEADERS := $(wildcard include/scaletrain/*.h src/*/*.h tests/*.h)

# The slowest objects first: make -j starts them in this order, and the
# short ones fill the other cores beside them, where in name order
# attention_cudnn.cpp (43 s) and the flash attention files (51 and 36 s)
# ran last, alone on one of 2 cores (a fresh build with sm_80: nvcc 2-3 s a
# file for the others).
SLOW_CU := $(filter $(CU_SRC),src/cuda/attention_flash_f32.cu src/cuda/attention_flash.cu src/cuda/layernorm.cu \
	src/cuda/embedding.cu)
CU_ORDER := $(SLOW_CU) $(filter-out $(SLOW_CU),$(CU_SRC))
LIB_OBJ := $(CUDNN_SRC:%.cpp=$(BUILD)/obj/%.o) $(CU_ORDER:%.cu=$(BUILD)/obj/%.o) $(LIB_SRC:%.c=$(BUILD)/obj/%.o) \
	$(EMU_SRC:%.cpp=$(BUILD)/obj/%.o) $(EMU_CU:%.cu=$(BUILD)/obj/%.o)
TOOL_OBJ := $(TOOL_SRC:%.c=$(BUILD)/obj/%.o)
TESTS := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
BENCHES := $(BENCH_SRC:bench/%.c=$(BUILD)/bench/%)

.PHONY: all tests benches check run deps config asan tsan emu emu-asan arm64 arm64-cuda fuzz analyze analyze-record clean format
all: $(BUILD)/scaletrain tests

# -MMD: each object depends on exactly the headers it includes.
$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -MMD -MP -c $< -o $@

ifeq ($(CUDA_EMU),1)
$(BUILD)/emu/%.cpp: %.cu tests/cudaemu/rewrite.py
	@mkdir -p $(dir $@)
	python3 tests/cudaemu/rewrite.py $< $@

CUH_EMU := $(patsubst %.cuh,$(BUILD)/emu/%.cuh,$(wildcard src/cuda/*.cuh))
.PRECIOUS: $(BUILD)/emu/%.cpp $(BUILD)/emu/%.cuh # kept: the objects' dependency files name them
$(BUILD)/emu/%.cuh: %.cuh tests/cudaemu/rewrite.py
	@mkdir -p $(dir $@)
	python3 tests/cudaemu/rewrite.py $< $@

$(BUILD)/obj/%.o: $(BUILD)/emu/%.cpp tests/cudaemu/emu.h $(CUH_EMU)
	@mkdir -p $(dir $@)
	$(CXX) $(EMU_CXXFLAGS) -include tests/cudaemu/emu.h -MMD -MP -c $< -o $@

$(BUILD)/obj/%.o: %.cpp
	@mkdir -p $(dir $@)
	$(CXX) $(EMU_CXXFLAGS) -MMD -MP -c $< -o $@

$(EMU_DRIVER): tests/cudaemu/driver/libcuda.cpp tests/cudaemu/machine.h
	@mkdir -p $(dir $@)
	$(CXX) $(EMU_CXXFLAGS) -shared -fPIC -Wl,-soname,libcuda.so.1 $< -o $@
else
# The architectures the folder's CUDA objects were built for (CUDA_ARCH),
# kept beside them: objects built for others are rebuilt, not linked as they
# are (scripts/test.sh builds for one architecture; a plain `make` after it
# builds the list above).
CUDA_ARCH_STAMP := $(BUILD)/cuda_arch
ifeq ($(CUDA),1)
ifneq ($(file < $(CUDA_ARCH_STAMP)),$(strip $(CUDA_ARCH)))
$(shell mkdir -p $(BUILD) && printf '%s' '$(strip $(CUDA_ARCH))' >$(CUDA_ARCH_STAMP))
endif
endif
$(BUILD)/obj/%.o: %.cu $(CUDA_ARCH_STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/obj/src/cuda/attention_cudnn.o: src/cuda/attention_cudnn.cpp
	@mkdir -p $(dir $@)
	$(CXX) -std=c++17 -O1 -D_GNU_SOURCE -DCUDNN_FRONTEND_SKIP_JSON_LIB -Wall -Wextra $(if $(strip $(WERROR)),-Werror) \
		-Iinclude -Isrc $(call inc_flag,$(CUDNN_INC)) -I$(CUDA_HOME)/include -isystem $(CUDNN_FE) -MMD -MP -c $< -o $@
endif

$(BUILD)/libscaletrain.a: $(LIB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && $(AR) rcs $@ $^

$(BUILD)/scaletrain: $(BUILD)/libscaletrain.a $(TOOL_OBJ) | $(EMU_DRIVER) # (the library's objects first: the slow ones)
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
# What this build would use and where it found it (no file is built).
config:
	@echo "build:     $(BUILD), $(CC) for $(MULTIARCH)"
	@echo "openblas:  $(OPENBLAS_DIR)$(if $(wildcard $(OPENBLAS_DIR)/libopenblas.so),, (no libopenblas.so there: apt-get install libopenblas-openmp-dev))"
	@echo "gzip:      $(if $(filter 1,$(LIBDEFLATE)),libdeflate (whole files)$(comma) zlib for the rest,zlib (no libdeflate: apt-get install libdeflate-dev reads gzip files about three times as fast))"
	@echo "mpi:       $(if $(filter -DST_NO_MPI,$(MPI_CFLAGS)),none (no mpicc: apt-get install libopenmpi-dev openmpi-bin),$(MPI_LIBS))"
	@echo "cuda:      $(if $(filter 1,$(CUDA)),$(NVCC)$(if $(filter 1,$(CUDA_EMU)), (the emulator: make emu),$(if $(filter 1,$(CUDA_LAZY)), (libraries loaded when first needed))),none (no $(NVCC); CUDA_HOME says where the toolkit is))"
	@echo "nccl:      $(if $(filter 1,$(CUDA_EMU)),the emulator's (tests/cudaemu/nccl.cpp$(comma) over MPI),$(if $(filter 1,$(CUDA)),$(if $(filter 1,$(NCCL)),$(NCCL_INC)/nccl.h$(comma) $(or $(NCCL_LIBDIR),no library folder: the loader's search path),none $(if $(NCCL_INC),(NCCL=0 given),(no nccl.h in $(LIB_SEARCH) or pip's nvidia.nccl; NCCL_HOME says where))),none (no CUDA)))"
	@echo "cudnn:     $(if $(filter 1,$(CUDA_EMU)),none (not emulated),$(if $(filter 1,$(CUDA)),$(if $(filter 1,$(CUDNN)),$(CUDNN_INC)/cudnn.h$(comma) $(CUDNN_LIBDIR)$(comma) cudnn-frontend in $(CUDNN_FE),none $(CUDNN_WHY)),none (no CUDA)))"

run:
	scripts/run-default.sh

check:
	scripts/test.sh

# The sanitizer build leaves CUDA out (ASan and the CUDA runtime disagree
# about the address space); the CUDA code is built and run by `make`.
asan:
	@$(MAKE) --no-print-directory BUILD=build-asan CUDA=0 OPT="-O1 -fno-omit-frame-pointer" \
	  EXTRA_CFLAGS="-fsanitize=address,undefined -fno-sanitize-recover=undefined" \
	  EXTRA_LDFLAGS="-fsanitize=address,undefined" tests

# ThreadSanitizer (CPU only): tests/tsan.sh runs the tests and runs whose
# code starts threads in it (scripts/test.sh does, through tests/run.sh).
# With clang and LLVM's OpenMP runtime (Debian's clang and libomp-dev) the
# OpenMP regions are checked too: libomp's Archer tool tells TSan about the
# regions' forks and barriers, and OpenBLAS's libgomp.so.1 resolves to libomp
# (build-tsan/omp/, searched first: DT_RPATH also serves the libraries' own
# dependencies and libomp's dlopen of libarcher.so), so one runtime, seen by
# TSan, runs every region. Without them gcc, and the regions run unchecked
# on one thread (libgomp is not instrumented). build-tsan/cc names the
# compiler; a different one rebuilds the folder.
TSAN_CC ?= clang
TSAN_OMP := $(realpath $(shell $(TSAN_CC) -print-file-name=libomp.so.5 2>/dev/null))
TSAN_ARCHER := $(if $(TSAN_OMP),$(wildcard $(dir $(TSAN_OMP))libarcher.so))
TSAN_WITH := $(if $(TSAN_ARCHER),$(TSAN_CC),$(CC))
tsan:
	@mkdir -p build-tsan
	@[ "$$(cat build-tsan/cc 2>/dev/null)" = "$(TSAN_WITH)" ] || { rm -rf build-tsan/obj build-tsan/tests; echo "$(TSAN_WITH)" >build-tsan/cc; }
ifneq ($(TSAN_ARCHER),)
	@mkdir -p build-tsan/omp && ln -sf $(TSAN_OMP) build-tsan/omp/libgomp.so.1
	@$(MAKE) --no-print-directory BUILD=build-tsan CUDA=0 CC=$(TSAN_CC) OPT="-O1 -fno-omit-frame-pointer" \
	  EXTRA_CFLAGS="-fsanitize=thread -Wno-unknown-warning-option -Wno-pass-failed" \
	  EXTRA_LDFLAGS="-fsanitize=thread -Wl,--disable-new-dtags -Wl,-rpath,$(abspath build-tsan/omp) -Wl,-rpath,$(dir $(TSAN_ARCHER))" \
	  build-tsan/scaletrain tests
else
	@rm -rf build-tsan/omp
	@$(MAKE) --no-print-directory BUILD=build-tsan CUDA=0 OPT="-O1 -fno-omit-frame-pointer" \
	  EXTRA_CFLAGS="-fsanitize=thread" EXTRA_LDFLAGS="-fsanitize=thread" build-tsan/scaletrain tests
endif

# The CUDA emulator build (tests/cudaemu/README.md): build-emu/, the CUDA
# tests run there on the CPU (tests/mpi/nccl_check: NCCL between ranks, run by
# tests/e2e/emu_nccl.sh; bench/bench_cuda_kernels: the GPU's kernel timing,
# its own run checked by tests/e2e/emu_bench_kernels.sh).
EMU_TESTS := $(patsubst tests/%.c,build-emu/tests/%,$(wildcard tests/test_cuda_*.c tests/test_cudaemu.c \
	tests/test_train_device.c tests/mpi/nccl_check.c)) build-emu/bench/bench_cuda_kernels
emu:
	@$(MAKE) --no-print-directory BUILD=build-emu CUDA_EMU=1 OPT="-O2" build-emu/scaletrain $(EMU_TESTS) \
	  build-emu/driver/libcuda.so.1
# The same under AddressSanitizer and UBSan (build-emu-asan; not in CI: about
# 4 minutes more): the CUDA backend's host code and its kernels' C++ checked
# as the CPU code is. Run with LSAN_OPTIONS=suppressions=tests/cudaemu/lsan.supp.
emu-asan:
	@$(MAKE) --no-print-directory BUILD=build-emu-asan CUDA_EMU=1 OPT="-O1 -fno-omit-frame-pointer" \
	  EXTRA_CFLAGS="-fsanitize=address,undefined -fno-sanitize-recover=undefined" \
	  EXTRA_CXXFLAGS="-fsanitize=address,undefined -fno-sanitize-recover=undefined" \
	  EXTRA_LDFLAGS="-fsanitize=address,undefined" $(EMU_TESTS:build-emu/%=build-emu-asan/%) build-emu-asan/scaletrain \
	  build-emu-asan/driver/libcuda.so.1

# arm64 (GH200's Grace, Graviton): the CPU engine and its tests built here
# by a cross compiler against Debian's arm64 libraries (scripts/deps.sh
# installs both on x86-64), into build-arm64; tests/e2e/arm64.sh runs them
# under qemu-aarch64. Without CUDA and MPI, which have no arm64 packages
# here (a build on an arm64 machine has both, as on x86-64). armv9-a, as
# Grace is, so that gcc's SVE2 code runs too.
ARM64_CC ?= aarch64-linux-gnu-gcc
ARM64_OPT ?= -O3 -march=armv9-a
arm64:
	@$(MAKE) --no-print-directory BUILD=build-arm64 CC=$(ARM64_CC) MULTIARCH=aarch64-linux-gnu CUDA=0 \
	  OPT="$(ARM64_OPT)" MPI_CFLAGS=-DST_NO_MPI MPI_LIBS= build-arm64/scaletrain tests

# The CUDA build for an arm64 host (GH200), into build-arm64-cuda: nvcc's
# host side through the arm64 cross g++, the toolkit's headers (the same on
# every host), device code as sm_90 PTX only (the host code is what
# differs; its SASS is the x86-64 build's), the library archived by the
# cross ar, and linked against the arm64 static CUDA runtime in
# ARM64_CUDART (scripts/deps.sh fetches it from PyPI's nvidia-cuda-runtime
# wheel of the toolkit's version into .tools/cuda-aarch64/lib); without it
# only the library is built. cuBLASLt, NCCL and cuDNN are loaded when first
# needed (CUDA_LAZY=1), so nothing else of CUDA's is linked.
# tests/e2e/arm64.sh runs the result under qemu-aarch64, where there is no
# GPU: the CUDA build must start there, say so and train on the CPU.
# ARM64_CUDA_GOALS: what to build in that configuration.
ARM64_CXX ?= aarch64-linux-gnu-g++
ARM64_CUDART ?= .tools/cuda-aarch64/lib
ARM64_CUDA_GOALS ?= $(if $(wildcard $(ARM64_CUDART)/libcudart_static.a),build-arm64-cuda/scaletrain tests,build-arm64-cuda/libscaletrain.a)
CUDA_INC_X86 = $(CUDA_HOME)/targets/x86_64-linux/include
arm64-cuda:
	@$(MAKE) --no-print-directory BUILD=build-arm64-cuda CC=$(ARM64_CC) CXX=$(ARM64_CXX) AR=aarch64-linux-gnu-ar \
	  MULTIARCH=aarch64-linux-gnu CUDA=1 CUDA_LAZY=1 CUDART_DIR=$(ARM64_CUDART) OPT="$(ARM64_OPT)" \
	  MPI_CFLAGS=-DST_NO_MPI MPI_LIBS= \
	  NVCC="$(NVCC) -ccbin $(ARM64_CXX) -I$(CUDA_INC_X86) -I$(CUDA_INC_X86)/cccl" \
	  CUDA_ARCH="-gencode arch=compute_90,code=compute_90" $(ARM64_CUDA_GOALS)

# The static analyzer (clang --analyze: null dereferences, leaks, reads of
# uninitialised values, use after free, along every path of a function and
# its callees in the same file) over the library and the tools, with the
# normal build's flags: a report fails the build as a warning does
# (scripts/test.sh runs it). Each file's clean pass leaves a stamp under
# build-analyze/, so only changed files are analysed again. The analyzer
# reads include/scaletrain/status.h's st_fail as returning its code.
#
# The analyzer is deterministic: the same clang given the same flags and
# the same preprocessed text says the same. Each file is preprocessed first
# (clang -E, with the analyzer's own __clang_analyzer__ defined, into
# build-analyze/FILE.i) and that text is what is analysed; each stamp holds
# the SHA-256 of clang's version, the analyzer's flags and that text (the
# key), and tests/analyze.clean the keys of every file's last
# clean pass, committed with the code (`make analyze-record` writes it from
# the stamps); a file whose key is recorded there is not analysed again (a
# clean checkout's CI analyses only what changed since the record, where the
# whole tree took over 3 minutes of its 2 cores). Another clang, other
# flags, headers or code: another key, analysed. ANALYZE_ALL=1 ignores the
# record.
ANALYZE_CC ?= clang
ANALYZE_FLAGS = --analyze -Xanalyzer -analyzer-output=text -Xanalyzer -analyzer-werror
ANALYZE_IN = -std=c11 -D_GNU_SOURCE -O2 -fopenmp -Iinclude -Isrc $(DEPS_CFLAGS) -I$(OPENBLAS_INC) $(MPI_CFLAGS) \
	$(CUDA_CFLAGS) $(LIBDEFLATE_CFLAGS)
ANALYZE_RECORD = tests/analyze.clean
ANALYZE_ALL ?= 0
ANALYZE_OK = $(LIB_SRC:%.c=build-analyze/%.ok) $(TOOL_SRC:%.c=build-analyze/%.ok)
analyze: $(ANALYZE_OK)
ANALYZE_PP = -std=c11 -fopenmp
build-analyze/%.ok: %.c
	@mkdir -p $(dir $@)
	@$(ANALYZE_CC) -E -D__clang_analyzer__ $(ANALYZE_IN) -MMD -MP -MF $(@:.ok=.d) -MT $@ $< -o $(@:.ok=.i) && \
	  key=$$({ $(ANALYZE_CC) --version | head -n 1; echo '$(ANALYZE_FLAGS) $(ANALYZE_PP)'; \
	  cat $(@:.ok=.i); } | sha256sum | cut -c1-64) && \
	  if [ "$(ANALYZE_ALL)" != 1 ] && grep -qxF "$$key $<" $(ANALYZE_RECORD) 2>/dev/null; then \
	    echo "analyze $< (its input as recorded clean in $(ANALYZE_RECORD))"; \
	  else \
	    echo "analyze $<" && $(ANALYZE_CC) $(ANALYZE_FLAGS) $(ANALYZE_PP) $(@:.ok=.i) -o /dev/null; \
	  fi && echo "$$key $<" >$@ && rm -f $(@:.ok=.i)
# tests/analyze.clean from this tree's stamps, each written by a clean pass
analyze-record: analyze
	@cat $(ANALYZE_OK) | LC_ALL=C sort -k2 >$(ANALYZE_RECORD)
	@echo "$(ANALYZE_RECORD): $$(wc -l <$(ANALYZE_RECORD)) files' analysed input"

# libFuzzer targets for the file readers (clang; not part of `all`): build
# with `make fuzz`, run each for a bounded time with tests/fuzz/run.sh SECONDS.
FUZZ_CC ?= clang
FUZZ_BUILD ?= build-fuzz
FUZZ_SRC := $(sort $(wildcard tests/fuzz/fuzz_*.c))
FUZZ_LIB := src/core/status.c src/core/atomic_file.c src/core/sniff.c src/data/npy.c src/data/idx.c src/data/tokens.c \
	src/core/safetensors.c src/core/config.c src/core/config_schema.c src/core/config_report.c
FUZZ_CFLAGS = -std=c11 -D_GNU_SOURCE -g -O1 -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined \
	-fno-sanitize-recover=undefined -Wall -Wextra -Werror -Wno-unused-parameter -Iinclude -Isrc

fuzz: $(FUZZ_SRC:tests/fuzz/%.c=$(FUZZ_BUILD)/%)

$(FUZZ_BUILD)/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/fuzz_file.h $(FUZZ_LIB) $(HEADERS)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) $(LIBDEFLATE_CFLAGS) -o $@ $< $(FUZZ_LIB) $(LIBDEFLATE_LIBS) -lz -lcjson -lyaml -lm

-include $(LIB_OBJ:.o=.d) $(TOOL_OBJ:.o=.d) $(TESTS:=.d) $(BENCHES:=.d) \
	$(wildcard build-analyze/src/*/*.d build-analyze/tools/*.d)

format:
	clang-format -i $(LIB_SRC) $(TOOL_SRC) $(TEST_SRC) $(BENCH_SRC) $(HEADERS)

clean:
	rm -rf build build-*
