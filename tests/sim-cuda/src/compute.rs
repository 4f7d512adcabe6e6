//! The arithmetic the probe's correctness canary checks, done for real on the CPU: cuBLAS's
//! GEMM (column-major, no transposes, alpha 1 and beta 0, fp32 out), and the `fma_chain` and
//! `digest_words` kernels of src/probe/kernels.cu, written as the kernels compute them.

/// cudaDataType_t values the canary uses.
pub const CUDA_R_32F: i32 = 0;
pub const CUDA_R_16F: i32 = 2;
pub const CUDA_R_16BF: i32 = 14;

/// The largest GEMM computed (m * n * k); a larger one (the throughput test's) only takes time.
pub const MAX_COMPUTED: u64 = 1 << 28;

/// Element `i` of a buffer of `kind` as f32.
fn element(bytes: &[u8], kind: i32, i: usize) -> f32 {
    match kind {
        CUDA_R_16BF => f32::from_bits(u32::from(u16::from_le_bytes([bytes[2 * i], bytes[2 * i + 1]])) << 16),
        CUDA_R_16F => half_to_f32(u16::from_le_bytes([bytes[2 * i], bytes[2 * i + 1]])),
        _ => f32::from_le_bytes([bytes[4 * i], bytes[4 * i + 1], bytes[4 * i + 2], bytes[4 * i + 3]]),
    }
}

pub fn element_bytes(kind: i32) -> usize {
    match kind {
        CUDA_R_16BF | CUDA_R_16F => 2,
        _ => 4,
    }
}

fn half_to_f32(h: u16) -> f32 {
    let sign = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exponent = i32::from((h >> 10) & 0x1f);
    let mantissa = f32::from(h & 0x3ff);
    match exponent {
        0 => sign * mantissa * 2f32.powi(-24),
        31 => sign * f32::INFINITY,
        e => sign * (1.0 + mantissa / 1024.0) * 2f32.powi(e - 15),
    }
}

/// C = A B, column-major, A m x k (lda), B k x n (ldb), C m x n (m), fp32 accumulation.
#[allow(clippy::too_many_arguments)]
pub fn gemm(
    m: usize,
    n: usize,
    k: usize,
    a: &[u8],
    a_kind: i32,
    lda: usize,
    b: &[u8],
    b_kind: i32,
    ldb: usize,
) -> Vec<f32> {
    // A converted once, transposed so each output's sum reads contiguous memory.
    let mut a_rows = vec![0f32; m * k];
    for l in 0..k {
        for i in 0..m {
            a_rows[i * k + l] = element(a, a_kind, i + l * lda);
        }
    }
    let mut c = vec![0f32; m * n];
    let mut column = vec![0f32; k];
    for j in 0..n {
        for (l, value) in column.iter_mut().enumerate() {
            *value = element(b, b_kind, l + j * ldb);
        }
        for i in 0..m {
            let row = &a_rows[i * k..(i + 1) * k];
            let mut sum = 0f32;
            for (x, y) in row.iter().zip(&column) {
                sum += x * y;
            }
            c[i + j * m] = sum;
        }
    }
    c
}

/// `fma_chain`'s results for `threads` threads.
pub fn fma_chain(threads: usize, steps: i32, a: f32, b: f32) -> Vec<f32> {
    let seeds: Vec<f32> = (0..1024u64).map(|t| chain(t, steps, a, b)).collect();
    (0..threads).map(|t| seeds[t % 1024]).collect()
}

fn chain(t: u64, steps: i32, a: f32, b: f32) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU has FMA (checked just above).
        return unsafe { chain_with_fma(t, steps, a, b) };
    }
    chain_portable(t, steps, a, b)
}

/// With the FMA instruction inlined instead of a library call per step.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "fma")]
fn chain_with_fma(t: u64, steps: i32, a: f32, b: f32) -> f32 {
    chain_portable(t, steps, a, b)
}

#[inline(always)]
fn chain_portable(t: u64, steps: i32, a: f32, b: f32) -> f32 {
    let mut x = 1.0f32 + t as f32 * 0.000_976_562_5;
    for _ in 0..steps {
        x = x.mul_add(a, b);
    }
    x
}

fn mix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// `digest_words`: adds each word's mix to its part's sum.
pub fn digest(words: &[u8], count: u64, per_part: u64, parts: &mut [u64]) {
    for i in 0..count.min(words.len() as u64 / 4) {
        let at = 4 * i as usize;
        let word = u32::from_le_bytes([words[at], words[at + 1], words[at + 2], words[at + 3]]);
        if let Some(sum) = parts.get_mut((i / per_part.max(1)) as usize) {
            *sum = sum.wrapping_add(mix64((i << 32) | u64::from(word)));
        }
    }
}
