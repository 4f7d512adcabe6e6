// Sweeps device-to-device copy kernels (words per thread, block size, cache hints, grid
// shape) and the driver's own memcpy over the same buffers, timed the way the probe times
// hbm_copy: windows of about 100 ms measured with CUDA events, bytes read + bytes written.
// This is how the probe's copy kernel (src/probe/kernels.cu) was chosen; docs/probe.md has
// the results.
//
//     nvcc -O3 -arch=sm_90 -o hbm-copy-sweep scripts/gpu/hbm-copy-sweep.cu && ./hbm-copy-sweep 2
//
// The argument is the number of passes over all variants (interleaved, so no variant always
// meets the warmer GPU). Output: one line per variant and buffer size, best and mean window.
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#define CHECK(x)                                                                          \
    do {                                                                                  \
        cudaError_t e = (x);                                                              \
        if (e != cudaSuccess) {                                                           \
            fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e));                       \
            exit(2);                                                                      \
        }                                                                                 \
    } while (0)

// HINT 0: plain loads and stores; 1: streaming (evict-first) loads and stores, as the probe
// uses today; 2: read-only cache path for loads, streaming stores.
template <int HINT> __device__ __forceinline__ uint4 load(const uint4 *p) {
    if (HINT == 1) return __ldcs(p);
    if (HINT == 2) return __ldg(p);
    return *p;
}
template <int HINT> __device__ __forceinline__ void store(uint4 *p, uint4 v) {
    if (HINT == 0) {
        *p = v;
    } else {
        __stcs(p, v);
    }
}

// Each block copies N * blockDim contiguous words; each thread loads its N words first (N
// loads in flight), then stores them. The grid covers the whole buffer.
template <int N, int HINT>
__global__ void copy_block(const uint4 *__restrict__ src, uint4 *__restrict__ dst, unsigned long long words) {
    unsigned long long base = (unsigned long long)blockIdx.x * blockDim.x * N + threadIdx.x;
    uint4 v[N];
#pragma unroll
    for (int j = 0; j < N; ++j) {
        unsigned long long i = base + (unsigned long long)j * blockDim.x;
        if (i < words) v[j] = load<HINT>(src + i);
    }
#pragma unroll
    for (int j = 0; j < N; ++j) {
        unsigned long long i = base + (unsigned long long)j * blockDim.x;
        if (i < words) store<HINT>(dst + i, v[j]);
    }
}

// Grid-stride loop over a fixed grid, N words in flight per thread per iteration.
template <int N, int HINT>
__global__ void copy_stride(const uint4 *__restrict__ src, uint4 *__restrict__ dst, unsigned long long words) {
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < words;
         i += stride * N) {
        uint4 v[N];
#pragma unroll
        for (int j = 0; j < N; ++j)
            if (i + j * stride < words) v[j] = load<HINT>(src + i + j * stride);
#pragma unroll
        for (int j = 0; j < N; ++j)
            if (i + j * stride < words) store<HINT>(dst + i + j * stride, v[j]);
    }
}

struct Result {
    double best, mean;
};

// Warm-up, one timed op to size 100 ms windows, then `windows` windows.
static Result measure(const std::function<void()> &op, double bytes_per_op, int windows) {
    cudaEvent_t a, b;
    CHECK(cudaEventCreate(&a));
    CHECK(cudaEventCreate(&b));
    for (int i = 0; i < 3; ++i) op();
    CHECK(cudaEventRecord(a));
    op();
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    float ms;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    int ops = ms > 0 ? (int)(100.0 / ms) : 1;
    if (ops < 1) ops = 1;
    double best = 0, sum_bytes = 0, sum_s = 0;
    for (int w = 0; w < windows; ++w) {
        CHECK(cudaEventRecord(a));
        for (int i = 0; i < ops; ++i) op();
        CHECK(cudaEventRecord(b));
        CHECK(cudaEventSynchronize(b));
        CHECK(cudaEventElapsedTime(&ms, a, b));
        double rate = ops * bytes_per_op / (ms / 1000.0);
        if (rate > best) best = rate;
        sum_bytes += ops * bytes_per_op;
        sum_s += ms / 1000.0;
    }
    CHECK(cudaGetLastError());
    CHECK(cudaEventDestroy(a));
    CHECK(cudaEventDestroy(b));
    return {best, sum_bytes / sum_s};
}

struct Variant {
    std::string name;
    std::function<void(const uint4 *, uint4 *, unsigned long long)> launch;
};

template <int N, int HINT> static Variant block_variant(int threads) {
    return {"block N=" + std::to_string(N) + " hint=" + std::to_string(HINT) + " threads=" + std::to_string(threads),
            [threads](const uint4 *s, uint4 *d, unsigned long long words) {
                unsigned long long per_block = (unsigned long long)threads * N;
                copy_block<N, HINT><<<(unsigned)((words + per_block - 1) / per_block), threads>>>(s, d, words);
            }};
}

template <int N, int HINT> static Variant stride_variant(int sms, int blocks_per_sm) {
    return {"stride N=" + std::to_string(N) + " hint=" + std::to_string(HINT) + " grid=" +
                std::to_string(blocks_per_sm) + "/SM x1024",
            [sms, blocks_per_sm](const uint4 *s, uint4 *d, unsigned long long words) {
                copy_stride<N, HINT><<<sms * blocks_per_sm, 1024>>>(s, d, words);
            }};
}

int main(int argc, char **argv) {
    int passes = argc > 1 ? atoi(argv[1]) : 1;
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    int sms = prop.multiProcessorCount;
    printf("# %s, %d SMs\n", prop.name, sms);

    std::vector<Variant> variants;
    for (int threads : {256, 512, 1024}) {
        variants.push_back(block_variant<1, 0>(threads));
        variants.push_back(block_variant<1, 1>(threads));
        variants.push_back(block_variant<1, 2>(threads));
        variants.push_back(block_variant<2, 0>(threads));
        variants.push_back(block_variant<2, 1>(threads));
        variants.push_back(block_variant<2, 2>(threads));
        variants.push_back(block_variant<4, 0>(threads));
        variants.push_back(block_variant<4, 1>(threads));
        variants.push_back(block_variant<4, 2>(threads));
        variants.push_back(block_variant<8, 1>(threads));
    }
    for (int per_sm : {2, 4, 8, 32}) {
        variants.push_back(stride_variant<1, 1>(sms, per_sm));
        variants.push_back(stride_variant<4, 1>(sms, per_sm));
    }
    variants.push_back({"driver memcpy (cudaMemcpyAsync D2D)", [](const uint4 *s, uint4 *d, unsigned long long words) {
                            CHECK(cudaMemcpyAsync(d, s, words * 16, cudaMemcpyDeviceToDevice));
                        }});

    const unsigned long long MiB = 1ull << 20;
    for (int pass = 0; pass < passes; ++pass) {
        for (unsigned long long bytes : {512 * MiB, 1024 * MiB}) {
            uint4 *src, *dst;
            CHECK(cudaMalloc(&src, bytes));
            CHECK(cudaMalloc(&dst, bytes));
            CHECK(cudaMemset(src, 0x5a, bytes));
            CHECK(cudaMemset(dst, 0, bytes));
            unsigned long long words = bytes / 16;
            for (auto &v : variants) {
                Result r = measure([&] { v.launch(src, dst, words); }, 2.0 * bytes, 5);
                printf("pass %d  %4llu MiB  %-40s best %7.1f GB/s  mean %7.1f GB/s\n", pass, bytes / MiB,
                       v.name.c_str(), r.best / 1e9, r.mean / 1e9);
                fflush(stdout);
            }
            CHECK(cudaFree(src));
            CHECK(cudaFree(dst));
        }
    }
    return 0;
}
