#!/usr/bin/env bash
# Where the build finds NCCL and cuDNN (the Makefile's find_home): the CUDA
# toolkit, then /usr as NVIDIA's Debian/Ubuntu packages and NGC containers
# lay them out (nccl.h in include/, cudnn.h in include/MULTIARCH/ as cuDNN
# >= 9.10 has it, libraries in lib/MULTIARCH/), then pip's nvidia-nccl and
# nvidia-cudnn packages (site-packages/nvidia/nccl, nvidia/cudnn: what
# PyTorch brings, libraries only as .so.N). Fake trees of each layout (the
# toolkit's headers copied, its libraries linked) stand in for /usr and
# site-packages through LIB_SEARCH and FIND_PYTHON; for each, `make config`
# must name the files found and the compile and link lines (make -n) must
# carry their folders: -I, -L and the rpath the lazily loaded libraries are
# found by. Then: NCCL_HOME given wins; nothing found is NCCL=0, said so.
# Skips, saying why, without the CUDA toolkit or its NCCL and cuDNN.
source "$(dirname "$0")/../lib/e2e.sh"
cd "$(dirname "$0")/../.." || exit 1
cuda=${CUDA_HOME:-/usr/local/cuda}
[ -x "$cuda/bin/nvcc" ] || e2e_skip "no CUDA toolkit at $cuda (the search runs only in a CUDA build)"
[ -f "$cuda/include/nccl.h" ] && [ -f "$cuda/include/cudnn.h" ] && ls "$cuda"/lib64/libnccl.so.2 "$cuda"/lib64/libcudnn.so.9 >/dev/null 2>&1 ||
    e2e_skip "the toolkit at $cuda has no NCCL or cuDNN to lay out as other installers do"
e2e_tmpdir
ma=$(make --no-print-directory config | sed -n 's/^build: .* for //p')
[ -n "$ma" ] || fail "make config names no multiarch: $(make --no-print-directory config 2>&1)"
fe=$([ -f .tools/cudnn-frontend/include/cudnn_frontend.h ] && echo 1)

# the layouts
lay() { # lay HOME INCDIR LIBDIR NAME: NAME's headers and libraries under HOME
    mkdir -p "$1/$2" "$1/$3"
    cp "$cuda"/include/$4*.h "$1/$2/"
    for f in "$cuda"/lib64/lib$4*.so.*; do ln -s "$f" "$1/$3/"; done
}
lay "$tmp/usr" include "lib/$ma" nccl
lay "$tmp/usr" "include/$ma" "lib/$ma" cudnn
lay "$tmp/site/nvidia/nccl" include lib nccl
lay "$tmp/site/nvidia/cudnn" include lib cudnn
mkdir "$tmp/nothing"
pip_python="env PYTHONPATH=$tmp/site python3"
/usr/bin/env python3 -c 'import nvidia.nccl' 2>/dev/null &&
    echo "(this machine's python3 has pip's nvidia.nccl: the searches below name their python)"

cfg() { make --no-print-directory config "$@" 2>&1; }
# flags MAKEARGS...: the compile line of comm_nccl.cu and the link line of scaletrain, as make would run them
flags() {
    make --no-print-directory -n -B BUILD="$tmp/b" "$@" "$tmp/b/obj/src/cuda/comm_nccl.o" "$tmp/b/scaletrain" 2>&1 |
        grep -E "comm_nccl.cu|-o $tmp/b/scaletrain "
}
# expect WHAT TEXT LINE...: fails unless TEXT is in the output
expect() {
    local what=$1 text=$2
    shift 2
    grep -qF -- "$text" <<<"$*" || fail "$what: no '$text' in: $*"
}

# 1. The toolkit's (this machine's, what CI builds with)
out=$(cfg)
expect "the toolkit's NCCL" "nccl:      $cuda/include/nccl.h, $cuda/lib64/" "$out"
[ -n "$fe" ] && expect "the toolkit's cuDNN" "cudnn:     $cuda/include/cudnn.h, $cuda/lib64/" "$out"

# 2. NVIDIA's Debian packages, NGC containers: /usr
out=$(cfg LIB_SEARCH="$tmp/nothing $tmp/usr" FIND_PYTHON=false)
expect "Debian layout" "nccl:      $tmp/usr/include/nccl.h, $tmp/usr/lib/$ma/" "$out"
if [ -n "$fe" ]; then
    expect "Debian layout, cuDNN >= 9.10" "cudnn:     $tmp/usr/include/$ma/cudnn.h, $tmp/usr/lib/$ma/" "$out"
else
    expect "Debian layout, no cudnn-frontend" "no cudnn-frontend" "$out"
fi
f=$(flags LIB_SEARCH="$tmp/nothing $tmp/usr" FIND_PYTHON=false)
expect "Debian layout: the compile" "-DST_HAVE_NCCL -I$tmp/usr/include " "$f"
expect "Debian layout: the link's rpath" "-Wl,-rpath,$tmp/usr/lib/$ma/" "$f"
expect "Debian layout: the soname" 'ST_NCCL_SO=\"libnccl.so.2\"' "$f"

# 3. pip's packages (PyTorch's)
out=$(cfg LIB_SEARCH="$tmp/nothing" FIND_PYTHON="$pip_python")
expect "pip layout" "nccl:      $tmp/site/nvidia/nccl/include/nccl.h, $tmp/site/nvidia/nccl/lib/" "$out"
[ -n "$fe" ] && expect "pip layout" "cudnn:     $tmp/site/nvidia/cudnn/include/cudnn.h, $tmp/site/nvidia/cudnn/lib/" "$out"
f=$(flags LIB_SEARCH="$tmp/nothing" FIND_PYTHON="$pip_python")
expect "pip layout: the compile" "-I$tmp/site/nvidia/nccl/include" "$f"
expect "pip layout: the link's rpath" "-Wl,-rpath,$tmp/site/nvidia/nccl/lib/" "$f"

# 4. NCCL_HOME given wins over the search (which would find the toolkit's)
out=$(cfg NCCL_HOME="$tmp/usr")
expect "NCCL_HOME given" "nccl:      $tmp/usr/include/nccl.h, $tmp/usr/lib/$ma/" "$out"

# 5. Nothing: built without NCCL and cuDNN, said so
out=$(cfg LIB_SEARCH="$tmp/nothing" FIND_PYTHON=false)
expect "nothing found" "nccl:      none (no nccl.h in $tmp/nothing or pip's nvidia.nccl; NCCL_HOME says where)" "$out"
expect "nothing found" "cudnn:     none (no cudnn.h in $tmp/nothing or pip's nvidia.cudnn; CUDNN_HOME says where)" "$out"
f=$(flags LIB_SEARCH="$tmp/nothing" FIND_PYTHON=false)
grep -q -- "-DST_HAVE_NCCL" <<<"$f" && fail "nothing found, yet comm_nccl.cu is compiled with NCCL: $f"
echo "$out" | sed 's/^/  /'
e2e_finish "NCCL and cuDNN are found in the toolkit, in /usr's Debian layout and in pip's packages"
