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

// SDC canary (probe::sdc), exact check: one chain of fp32 FMAs per thread, x = fmaf(x, a, b),
// from a seed that repeats every 1024 threads. fmaf is IEEE 754's correctly rounded fused
// multiply-add, as is Rust's f32::mul_add, so the host computes the 1024 exact results and
// every thread on every SM must give its seed's result bit for bit.
extern "C" __global__ void fma_chain(float *out, int steps, float a, float b) {
    unsigned long long t = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    float x = 1.0f + (float)(t & 1023) * 0.0009765625f;
    for (int i = 0; i < steps; ++i) {
        x = fmaf(x, a, b);
    }
    out[t] = x;
}

// SDC canary, digest of a result: each 32-bit word mixed with its index (splitmix64's
// finaliser) and summed modulo 2^64 per part (a contiguous range of `words_per_part` words,
// a multiple of blockDim.x * 16). A sum does not depend on the order threads run in, so the
// digest of the same bits is the same on every run; one flipped bit changes its part's sum.
// Each block reads a span of blockDim.x * 16 words coalesced, a warp adds its lanes, and
// lane 0 adds the warp's sum to its part: one atomic per 512 words.
__device__ unsigned long long mix64(unsigned long long z) {
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

extern "C" __global__ void digest_words(const unsigned int *__restrict__ words, unsigned long long count,
                                        unsigned long long words_per_part, unsigned long long *parts) {
    unsigned long long span = (unsigned long long)blockDim.x * 16;
    for (unsigned long long start = (unsigned long long)blockIdx.x * span; start < count;
         start += (unsigned long long)gridDim.x * span) {
        unsigned long long sum = 0;
        for (int j = 0; j < 16; ++j) {
            unsigned long long i = start + (unsigned long long)j * blockDim.x + threadIdx.x;
            if (i < count) {
                sum += mix64((i << 32) | words[i]);
            }
        }
        for (int offset = 16; offset > 0; offset /= 2) {
            sum += __shfl_down_sync(0xffffffffu, sum, offset);
        }
        if ((threadIdx.x & 31) == 0) {
            atomicAdd(parts + start / words_per_part, sum);
        }
    }
}

// HBM pattern test (probe::memtest). A word's value under `mode`: 0 the pattern itself, 1 its
// own index XOR the pattern (address in address), 2 the inverse of that.
__device__ unsigned int mem_value(unsigned long long i, unsigned int pattern, int mode) {
    unsigned int address = (unsigned int)i;
    return mode == 0 ? pattern : (mode == 1 ? address ^ pattern : ~(address ^ pattern));
}

// Records a word that read back wrong: counted, and the first 16 kept (index, expected, got).
__device__ void mem_bad(unsigned long long i, unsigned int expected, unsigned int got,
                        unsigned long long *errors, unsigned long long *bad) {
    unsigned long long slot = atomicAdd(errors, 1ULL);
    if (slot < 16) {
        bad[3 * slot] = i;
        bad[3 * slot + 1] = expected;
        bad[3 * slot + 2] = got;
    }
}

// Writes every word of the region (grid-stride, coalesced).
extern "C" __global__ void mem_fill(unsigned int *buf, unsigned long long words, unsigned int pattern, int mode) {
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < words; i += stride) {
        buf[i] = mem_value(i, pattern, mode);
    }
}

// Reads every word back and records those that differ.
extern "C" __global__ void mem_check(const unsigned int *buf, unsigned long long words, unsigned int pattern,
                                     int mode, unsigned long long *errors, unsigned long long *bad) {
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < words; i += stride) {
        unsigned int expected = mem_value(i, pattern, mode);
        unsigned int got = buf[i];
        if (got != expected) {
            mem_bad(i, expected, got, errors, bad);
        }
    }
}

// Moving inversions: each word read (it must hold `expect`) and at once written inverted, in
// ascending or descending order of each thread's words, so a cell disturbed by its neighbours'
// writes in either direction is caught by the next pass.
extern "C" __global__ void mem_invert(unsigned int *buf, unsigned long long words, unsigned int expect,
                                      int descending, unsigned long long *errors, unsigned long long *bad) {
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    unsigned long long first = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (first >= words) {
        return;
    }
    unsigned long long count = (words - 1 - first) / stride + 1;
    for (unsigned long long k = 0; k < count; ++k) {
        unsigned long long i = first + (descending ? count - 1 - k : k) * stride;
        unsigned int got = buf[i];
        if (got != expect) {
            mem_bad(i, expect, got, errors, bad);
        }
        buf[i] = ~expect;
    }
}
