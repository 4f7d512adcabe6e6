// The probe's own kernels. The binary embeds their PTX (kernels.ptx, made from this file by
// scripts/gen/gen-probe-ptx.sh with NVRTC from PyPI; the tests check that it is), which the
// driver compiles for the GPU at load time, so gpuwarden needs no CUDA toolkit to build or run.

// FP32 FMA throughput. Eight independent chains per thread keep every FMA pipe busy (one
// chain would wait on its own result); the result is stored only when it equals a value it
// never reaches, so the compiler cannot drop the work and the kernel writes no memory.
// FLOPs per thread: iterations * 8 chains * 16 unrolled * 2.
extern "C" __global__ void fma_fp32(float *out, int iterations, float a, float b) {
    float x0 = threadIdx.x, x1 = x0 + 1.0f, x2 = x0 + 2.0f, x3 = x0 + 3.0f;
    float x4 = x0 + 4.0f, x5 = x0 + 5.0f, x6 = x0 + 6.0f, x7 = x0 + 7.0f;
    for (int i = 0; i < iterations; ++i) {
#pragma unroll
        for (int j = 0; j < 16; ++j) {
            x0 = fmaf(x0, a, b); x1 = fmaf(x1, a, b); x2 = fmaf(x2, a, b); x3 = fmaf(x3, a, b);
            x4 = fmaf(x4, a, b); x5 = fmaf(x5, a, b); x6 = fmaf(x6, a, b); x7 = fmaf(x7, a, b);
        }
    }
    float sum = ((x0 + x1) + (x2 + x3)) + ((x4 + x5) + (x6 + x7));
    if (sum == -1.0f) {
        out[blockIdx.x * blockDim.x + threadIdx.x] = sum;
    }
}

// HBM copy bandwidth: one 16-byte word per thread, launched in 256-thread blocks with a grid
// that covers the whole buffer (the loop only matters if it ever does not), with streaming
// hints (__ldcs, __stcs: evict first) since no byte is touched twice. Chosen by
// scripts/gpu/hbm-copy-sweep.cu on an H200 over words per thread, block size, cache hints and
// grid-stride loops: it beat every other variant and the driver's own device-to-device
// memcpy (4273 GB/s against 4227 on 512 MiB buffers); see docs/probe.md.
extern "C" __global__ void hbm_copy(const uint4 *__restrict__ src, uint4 *__restrict__ dst,
                                    unsigned long long words) {
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
         i < words; i += stride) {
        __stcs(dst + i, __ldcs(src + i));
    }
}
