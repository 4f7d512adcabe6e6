#!/usr/bin/env python3
"""Compiles a CUDA source file to PTX with NVRTC and prints the PTX: what `nvcc -ptx` does,
without a CUDA toolkit. NVRTC comes from the PyPI wheel nvidia-cuda-nvrtc, installed in the
Python that runs this script; scripts/gen/gen-probe-ptx.sh pins its version.

    python3 scripts/gen/nvrtc-ptx.py src/probe/kernels.cu compute_75 > kernels.ptx
"""
import ctypes
import glob
import os
import sys


def load_nvrtc():
    """NVRTC and its builtins library from the wheel; the builtins first, so that NVRTC's
    dlopen of it by soname finds it loaded (the wheel's folder is on no search path)."""
    pattern = os.path.join(sys.prefix, "lib", "python3*", "site-packages", "nvidia", "cu13", "lib")
    folders = glob.glob(pattern)
    if not folders:
        sys.exit(f"no NVRTC under {pattern}: pip install nvidia-cuda-nvrtc (scripts/gen/gen-probe-ptx.sh)")
    folder = folders[0]
    for builtins in sorted(glob.glob(os.path.join(folder, "libnvrtc-builtins.so.*"))):
        ctypes.CDLL(builtins, mode=ctypes.RTLD_GLOBAL)
    return ctypes.CDLL(os.path.join(folder, "libnvrtc.so.13"))


def compile_to_ptx(nvrtc, source_path, arch):
    with open(source_path, "rb") as f:
        source = f.read()
    program = ctypes.c_void_p()
    name = os.path.basename(source_path).encode()
    check(nvrtc, nvrtc.nvrtcCreateProgram(ctypes.byref(program), source, name, 0, None, None), "nvrtcCreateProgram")
    options = [f"-arch={arch}".encode()]
    status = nvrtc.nvrtcCompileProgram(program, len(options), (ctypes.c_char_p * len(options))(*options))
    size = ctypes.c_size_t()
    nvrtc.nvrtcGetProgramLogSize(program, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    nvrtc.nvrtcGetProgramLog(program, log)
    if status != 0:
        sys.exit(f"{source_path} does not compile:\n{log.value.decode(errors='replace')}")
    check(nvrtc, nvrtc.nvrtcGetPTXSize(program, ctypes.byref(size)), "nvrtcGetPTXSize")
    ptx = ctypes.create_string_buffer(size.value)
    check(nvrtc, nvrtc.nvrtcGetPTX(program, ptx), "nvrtcGetPTX")
    nvrtc.nvrtcDestroyProgram(ctypes.byref(program))
    return ptx.value.decode()


def check(nvrtc, status, what):
    if status != 0:
        nvrtc.nvrtcGetErrorString.restype = ctypes.c_char_p
        sys.exit(f"{what}: {nvrtc.nvrtcGetErrorString(status).decode()}")


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.stdout.write(compile_to_ptx(load_nvrtc(), sys.argv[1], sys.argv[2]))


if __name__ == "__main__":
    main()
