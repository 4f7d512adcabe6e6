#!/usr/bin/env bash
# Regenerates src/probe/kernels.ptx from src/probe/kernels.cu; with --check, only says whether
# the committed PTX is what kernels.cu compiles to (scripts/ci/test.sh runs that, so a kernel
# edited without its PTX does not land). The build itself needs neither: the PTX is committed.
#
# The compiler is NVRTC 13.0.88 from PyPI (nvidia-cuda-nvrtc, installed into target/test-venv
# here; PYTHON names another Python that has it) through scripts/gen/nvrtc-ptx.py: the same front
# end and NVVM as nvcc 13.0.88 (`nvcc -ptx -arch=compute_75 -O3`, which made the PTX before),
# byte for byte the same PTX, and no CUDA toolkit or GPU machine needed.
#
# compute_75 is the oldest target CUDA 13 still emits. It stamps the PTX with its own ISA
# version (9.0), which drivers older than CUDA 13 refuse; the kernels use nothing newer than
# ISA 7.0, so the stamp is lowered to 7.0 and any driver from CUDA 11.0 on compiles them.
set -euo pipefail
cd "$(dirname "$0")/../.."
NVRTC_WHEEL='nvidia-cuda-nvrtc==13.0.88'
PYTHON=${PYTHON:-target/test-venv/bin/python3}

if ! "$PYTHON" -c 'import glob, os, sys; sys.exit(not glob.glob(os.path.join(sys.prefix, "lib", "python3*", "site-packages", "nvidia", "cu13", "lib", "libnvrtc.so.13")))' 2>/dev/null; then
  if [ ! -x "$PYTHON" ] && [ "$PYTHON" = target/test-venv/bin/python3 ]; then
    mkdir -p target
    python3 -m venv target/test-venv
  fi
  "$PYTHON" -m pip install -q --disable-pip-version-check "$NVRTC_WHEEL"
fi

ptx=$(mktemp)
trap 'rm -f "$ptx"' EXIT
"$PYTHON" scripts/gen/nvrtc-ptx.py src/probe/kernels.cu compute_75 | sed 's/^\.version [0-9.]*$/.version 7.0/' > "$ptx"
grep -q '^\.version 7\.0$' "$ptx"
if [ "${1:-}" = --check ]; then
  if ! diff -u src/probe/kernels.ptx "$ptx"; then
    echo "src/probe/kernels.ptx is not what src/probe/kernels.cu compiles to: run scripts/gen/gen-probe-ptx.sh" >&2
    exit 1
  fi
  echo "src/probe/kernels.ptx is what src/probe/kernels.cu compiles to"
else
  cp "$ptx" src/probe/kernels.ptx
  echo "wrote src/probe/kernels.ptx"
fi
