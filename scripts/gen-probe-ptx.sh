#!/usr/bin/env bash
# Regenerates src/probe/kernels.ptx from src/probe/kernels.cu. Needs nvcc (any CUDA 12 or
# 13 toolkit); the build itself does not, because the PTX is committed.
#
# compute_75 is the oldest target nvcc 13 still emits. nvcc stamps the PTX with its own ISA
# version (9.0 for CUDA 13), which drivers older than CUDA 13 refuse; the kernels use nothing
# newer than ISA 7.0, so the stamp is lowered to 7.0 and any driver from CUDA 11.0 on
# compiles them.
set -euo pipefail
cd "$(dirname "$0")/.."
nvcc -ptx -arch=compute_75 -O3 -o src/probe/kernels.ptx src/probe/kernels.cu
sed -i 's/^\.version [0-9.]*$/.version 7.0/' src/probe/kernels.ptx
grep -q '^\.version 7\.0$' src/probe/kernels.ptx
echo "wrote src/probe/kernels.ptx"
