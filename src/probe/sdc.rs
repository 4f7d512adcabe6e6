//! The correctness canary's host side (docs/probe.md, "Silent data corruption"): the inputs
//! whose exact results the host knows, those results, the sizes from the GPU's SM count, and
//! the digest the GPU's `digest_words` kernel computes, written the same way here so the
//! simulated CUDA and the tests compute it too. The GPU side is probe::cuda_sdc.
//!
//! Exact checks: a GEMM of small integers (-3..3 times -2..2, 512 deep) is exact in bf16,
//! fp16 and fp32 inputs with fp32 accumulation, whatever order the sums are taken in. Its
//! inputs repeat with period 7 down A's rows and 5 across B's columns, so every element of the
//! result is one of 35 values the host sums directly, yet the GEMM is large enough to run on
//! every SM. The FMA chains' results are the IEEE fused multiply-add's, which `f32::mul_add`
//! computes bit for bit.

/// Bumped whenever the canary's inputs, sizes or digest change: a new digest is then not a
/// disagreement with the old ones (it is part of `SdcKey`).
pub(crate) const CANARY_VERSION: u32 = 1;
/// Depth of the exact GEMMs: |result| <= 512 * 3 * 2 = 3072, far inside fp32's exact integers.
pub(crate) const EXACT_DEPTH: u64 = 512;
/// Period of the exact GEMM's inputs down A's rows (i) and across B's columns (j).
const PERIOD_I: u64 = 7;
const PERIOD_J: u64 = 5;
/// FMA chain: steps per thread, and the seeds' period (threads beyond it repeat a seed).
pub(crate) const FMA_STEPS: i32 = 4096;
pub(crate) const FMA_SEEDS: u64 = 1024;
/// a < 1 and b > 0 keep the chain near b / (1 - a) = 1 with every step rounded.
pub(crate) const FMA_A: f32 = 0.999;
pub(crate) const FMA_B: f32 = 0.001;
/// The agreement digest's parts (row blocks), and the most runs of its GEMM per probe.
pub(crate) const DIGEST_PARTS: u64 = 64;
pub(crate) const MAX_REPEATS: u32 = 200;
/// Threads per block of `digest_words`; each block reads 16 words per thread.
pub(crate) const DIGEST_THREADS: u32 = 256;

/// The canary's sizes for a GPU with `sms` SMs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct SdcSizes {
    /// Side of the exact GEMMs' square result: about two 128 x 128 tiles per SM.
    pub exact_side: u64,
    /// Side of the agreement GEMM (result, inputs and depth), a multiple of 512 so the
    /// digest's parts are whole spans of `digest_words`: 4608 on a 132-SM H100 or H200.
    pub agreement_side: u64,
}

impl SdcSizes {
    pub(crate) fn for_sms(sms: u32) -> SdcSizes {
        let sms = f64::from(sms.max(1));
        SdcSizes {
            exact_side: 128 * (2.0 * sms).sqrt().ceil() as u64,
            agreement_side: 512 * (sms / 2.0).sqrt().ceil().max(1.0) as u64,
        }
    }
}

/// Element (i, l) of the exact GEMM's A (rows x depth), an integer in -3..=3.
fn exact_a(i: u64, l: u64) -> i64 {
    ((i + l) % PERIOD_I) as i64 - 3
}

/// Element (l, j) of the exact GEMM's B (depth x columns), an integer in -2..=2.
fn exact_b(l: u64, j: u64) -> i64 {
    (((l % PERIOD_J) * (j % PERIOD_J)) % PERIOD_J) as i64 - 2
}

/// A and B of the exact GEMM, column-major as cuBLAS reads them, as f32 (converted to the
/// test's type by the caller: all are exact in bf16, fp16 and fp32).
pub(crate) fn exact_inputs(side: u64) -> (Vec<f32>, Vec<f32>) {
    let mut a = Vec::with_capacity((side * EXACT_DEPTH) as usize);
    for l in 0..EXACT_DEPTH {
        for i in 0..side {
            a.push(exact_a(i, l) as f32);
        }
    }
    let mut b = Vec::with_capacity((EXACT_DEPTH * side) as usize);
    for j in 0..side {
        for l in 0..EXACT_DEPTH {
            b.push(exact_b(l, j) as f32);
        }
    }
    (a, b)
}

/// The exact result's 35 values, by (i mod 7, j mod 5).
pub(crate) fn exact_table() -> [[f32; PERIOD_J as usize]; PERIOD_I as usize] {
    let mut table = [[0.0; PERIOD_J as usize]; PERIOD_I as usize];
    for (i, row) in table.iter_mut().enumerate() {
        for (j, value) in row.iter_mut().enumerate() {
            let sum: i64 = (0..EXACT_DEPTH)
                .map(|l| exact_a(i as u64, l) * exact_b(l, j as u64))
                .sum();
            *value = sum as f32;
        }
    }
    table
}

/// Compares a column-major `side` x `side` result with the exact table.
pub(crate) fn check_exact(name: &str, side: u64, got: &[f32]) -> crate::model::probe::ExactCheck {
    let table = exact_table();
    let expected = |index: u64| table[((index % side) % PERIOD_I) as usize][((index / side) % PERIOD_J) as usize];
    compare(name, got, expected)
}

/// The FMA chain's result for thread `t`, as `fma_chain` computes it.
pub(crate) fn fma_chain_result(t: u64) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU has FMA (checked just above), all the function needs.
        return unsafe { fma_chain_with_fma(t) };
    }
    fma_chain_portable(t)
}

/// The chain with the FMA instruction inlined: the same correctly rounded result as the
/// library's `fmaf`, which without it is a call per step (4 million per probe).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "fma")]
fn fma_chain_with_fma(t: u64) -> f32 {
    fma_chain_portable(t)
}

#[inline(always)]
fn fma_chain_portable(t: u64) -> f32 {
    let mut x = 1.0f32 + (t % FMA_SEEDS) as f32 * 0.000_976_562_5;
    for _ in 0..FMA_STEPS {
        x = x.mul_add(FMA_A, FMA_B);
    }
    x
}

/// Compares every thread's chain with its seed's exact result.
pub(crate) fn check_fma_chains(got: &[f32]) -> crate::model::probe::ExactCheck {
    let results: Vec<f32> = (0..FMA_SEEDS).map(fma_chain_result).collect();
    compare("fma_chain", got, |t| results[(t % FMA_SEEDS) as usize])
}

/// Every element against `expected(index)`, bit for bit.
fn compare(name: &str, got: &[f32], expected: impl Fn(u64) -> f32) -> crate::model::probe::ExactCheck {
    let mut mismatches = 0;
    let mut first = None;
    for (index, value) in got.iter().enumerate() {
        let want = expected(index as u64);
        if value.to_bits() != want.to_bits() {
            mismatches += 1;
            first.get_or_insert(crate::model::probe::Mismatch {
                index: index as u64,
                expected: want,
                got: *value,
                expected_bits: format!("{:08x}", want.to_bits()),
                got_bits: format!("{:08x}", value.to_bits()),
            });
        }
    }
    crate::model::probe::ExactCheck {
        name: name.to_string(),
        elements: got.len() as u64,
        mismatches,
        first,
    }
}

/// splitmix64's finaliser, as `digest_words` mixes each word with its index.
pub(crate) fn mix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// What `digest_words` computes: per part, the sum of mix64(index << 32 | word).
#[cfg(test)]
pub(crate) fn digest_parts(words: &[u32], parts: u64) -> Vec<u64> {
    let per_part = (words.len() as u64).div_ceil(parts.max(1)).max(1);
    let mut sums = vec![0u64; parts as usize];
    for (i, word) in words.iter().enumerate() {
        let part = (i as u64 / per_part) as usize;
        if let Some(sum) = sums.get_mut(part) {
            *sum = sum.wrapping_add(mix64(((i as u64) << 32) | u64::from(*word)));
        }
    }
    sums
}

/// The whole digest from its parts: each part mixed with its place, summed.
pub(crate) fn digest_of(parts: &[u64]) -> u64 {
    parts.iter().enumerate().fold(0u64, |acc, (i, p)| {
        acc.wrapping_add(mix64(p ^ (i as u64).rotate_left(56)))
    })
}

/// Hex, as the report carries digests.
pub(crate) fn hex(value: u64) -> String {
    format!("{value:016x}")
}

/// The agreement GEMM's inputs: bf16 values in about [-2, 2] from a fixed seed, A and B.
pub(crate) fn agreement_inputs(side: u64) -> (Vec<u16>, Vec<u16>) {
    let count = (side * side) as usize;
    (fixed_bf16(count, 0x5dc1), fixed_bf16(count, 0x5dc2))
}

/// `count` bf16 values in about [-2, 2] (a sum of two uniforms) from an xorshift generator
/// seeded with `seed`: the agreement GEMM's inputs, all `count` of them made (so every
/// multiplier sees varied bits), and the throughput GEMM's block.
pub(super) fn fixed_bf16(count: usize, seed: u64) -> Vec<u16> {
    let mut state = 0x9e37_79b9_7f4a_7c15_u64 ^ seed;
    (0..count)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let u1 = (state >> 40) as f32 / (1u64 << 24) as f32;
            let u2 = ((state >> 16) & 0xff_ffff) as f32 / (1u64 << 24) as f32;
            (((u1 + u2 - 1.0) * 2.0).to_bits() >> 16) as u16
        })
        .collect()
}

/// An f32 as bf16 (truncated: the canary's values are exact in bf16).
pub(crate) fn to_bf16(value: f32) -> u16 {
    (value.to_bits() >> 16) as u16
}

/// An f32 as IEEE half (the canary's small integers only: exact).
pub(crate) fn to_f16(value: f32) -> u16 {
    if value == 0.0 {
        return 0;
    }
    let bits = value.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let exponent = ((bits >> 23) & 0xff) as i32 - 127 + 15;
    let mantissa = ((bits >> 13) & 0x3ff) as u16;
    sign | ((exponent as u16) << 10) | mantissa
}

/// What the canary's evidence from one GPU's probe means with what else is known: the other
/// GPUs' latest digests under the same key and the digest remembered for it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Judgement {
    /// Everything wrong; empty when the GPU's results are right as far as anything tells.
    pub faults: Vec<String>,
    /// The key's reference digest as it should be kept now, when it changes.
    pub reference: Option<crate::model::probe::SdcReference>,
    /// Why the GPU is not judged yet: its digest differs from a reference only one other GPU
    /// gave (either of the two may be wrong).
    pub undecided: Option<String>,
}

/// Judges `outcome`, the canary of GPU `uuid` at `now`. `others` holds the other GPUs'
/// latest outcomes (uuid, GPU index, outcome): those of the same key are compared. The
/// reference is the digest a majority of the node's GPUs share (at least two, more than
/// half), else the one remembered; the first clean digest of a key becomes remembered, and a
/// majority that differs from what was remembered replaces it (a remembered digest may have
/// come from the one bad GPU). A GPU that differs from a remembered digest only one other
/// GPU gave is not a suspect (`undecided`): on a fresh node the first GPU probed may be the
/// bad one. A remembered digest its own GPU gave holds that GPU to it over time.
pub(crate) fn judge(
    uuid: &str,
    outcome: &crate::model::probe::SdcOutcome,
    others: &[(String, u32, crate::model::probe::SdcOutcome)],
    remembered: Option<&crate::model::probe::SdcReference>,
    now: f64,
) -> Judgement {
    use crate::model::probe::SdcReference;
    let mut faults = outcome.faults();
    let peers: Vec<&(String, u32, crate::model::probe::SdcOutcome)> = others
        .iter()
        .filter(|(other, _, o)| other != uuid && o.key == outcome.key && o.clean())
        .collect();
    let mut counts: std::collections::BTreeMap<&str, Vec<u32>> = std::collections::BTreeMap::new();
    for (_, index, o) in &peers {
        counts.entry(o.digest.as_str()).or_default().push(*index);
    }
    let compared = peers.len() + 1;
    let majority = counts
        .iter()
        .map(|(digest, gpus)| (*digest, gpus, gpus.len() + usize::from(*digest == outcome.digest)))
        .filter(|(_, _, n)| *n >= 2 && 2 * n > compared)
        .max_by_key(|(_, _, n)| *n);
    let mut reference = None;
    let mut undecided = None;
    if let Some((digest, gpus, _)) = majority {
        if digest != outcome.digest {
            let listed: Vec<String> = gpus.iter().map(|g| g.to_string()).collect();
            faults.push(format!(
                "its digest {} differs from {digest}, which GPUs {} of the same model gave{}",
                outcome.digest,
                listed.join(", "),
                differing_parts(outcome, peers.iter().map(|(_, _, o)| o).find(|o| o.digest == digest))
            ));
        }
        if remembered.is_none_or(|r| r.digest != digest) {
            let parts = peers
                .iter()
                .map(|(_, _, o)| o)
                .chain([outcome])
                .find(|o| o.digest == digest)
                .map(|o| o.parts.clone())
                .unwrap_or_default();
            let gpus = peers
                .iter()
                .filter(|(_, _, o)| o.digest == digest)
                .map(|(u, _, _)| u.clone())
                .chain((digest == outcome.digest).then(|| uuid.to_string()))
                .collect();
            reference = Some(SdcReference {
                digest: digest.to_string(),
                parts,
                since: now,
                gpus,
            });
        }
    } else if let Some(r) = remembered {
        (reference, undecided) = against_remembered(uuid, outcome, r, &mut faults);
    } else if outcome.clean() {
        reference = Some(SdcReference {
            digest: outcome.digest.clone(),
            parts: outcome.parts.clone(),
            since: now,
            gpus: vec![uuid.to_string()],
        });
    }
    Judgement {
        faults,
        reference,
        undecided,
    }
}

/// `outcome` against the digest the node kept, with no majority to go by: a fault when it
/// differs from one its own GPU or two GPUs gave, undecided when only one other GPU gave it;
/// the kept reference with this GPU added when it agrees.
fn against_remembered(
    uuid: &str,
    outcome: &crate::model::probe::SdcOutcome,
    r: &crate::model::probe::SdcReference,
    faults: &mut Vec<String>,
) -> (Option<crate::model::probe::SdcReference>, Option<String>) {
    if r.digest != outcome.digest && r.given_by_one_other(uuid) {
        // One GPU's word against another's: either may be the wrong one. Neither is a
        // suspect until a majority of the key's GPUs settles it (rejudge).
        let why = format!(
            "its digest {} differs from {}, which only one other GPU gave; neither is suspected until \
             most of the node's GPUs of the same model agree",
            outcome.digest, r.digest
        );
        return (None, Some(why));
    }
    if r.digest != outcome.digest {
        let parts = differing_part_list(&outcome.parts, &r.parts);
        faults.push(format!(
            "its digest {} differs from {}, which this node's GPUs of the same model gave since {}{}",
            outcome.digest,
            r.digest,
            crate::model::utc_seconds(r.since),
            parts
        ));
        return (None, None);
    }
    if !r.gpus.iter().any(|g| g == uuid) && outcome.clean() {
        let mut kept = r.clone();
        kept.gpus.push(uuid.to_string());
        return (Some(kept), None);
    }
    (None, None)
}

/// "; parts 5, 17 of 64 differ (rows 360-431, ...)": which row blocks differ from `other`.
fn differing_parts(
    outcome: &crate::model::probe::SdcOutcome,
    other: Option<&crate::model::probe::SdcOutcome>,
) -> String {
    other.map_or(String::new(), |o| differing_part_list(&outcome.parts, &o.parts))
}

fn differing_part_list(parts: &[String], other: &[String]) -> String {
    if parts.len() != other.len() {
        return String::new();
    }
    let differing: Vec<String> = (0..parts.len())
        .filter(|i| parts[*i] != other[*i])
        .map(|i| i.to_string())
        .collect();
    format!(
        "; parts {} of {} differ (each part is 1/{} of the result's elements, in order)",
        differing.join(", "),
        parts.len(),
        parts.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_cover_the_sms_and_make_whole_digest_parts() {
        let h200 = SdcSizes::for_sms(132);
        assert_eq!(h200.exact_side, 128 * 17);
        assert_eq!(h200.agreement_side, 4608);
        for sms in [1, 2, 4, 78, 108, 132, 144, 160] {
            let s = SdcSizes::for_sms(sms);
            // At least two 128 x 128 tiles of the exact result per SM.
            assert!((s.exact_side / 128).pow(2) >= 2 * u64::from(sms), "{sms}: {s:?}");
            let words = s.agreement_side * s.agreement_side;
            let span = u64::from(DIGEST_THREADS) * 16;
            assert_eq!(words % (DIGEST_PARTS * span), 0, "{sms}: parts are whole spans");
        }
    }

    #[test]
    fn the_exact_table_is_the_gemm_of_the_inputs() {
        // A direct GEMM of a small exact problem, against the table.
        let side = 12;
        let (a, b) = exact_inputs(side);
        let mut c = vec![0f32; (side * side) as usize];
        for j in 0..side {
            for i in 0..side {
                let mut sum = 0f32;
                for l in 0..EXACT_DEPTH {
                    sum += a[(i + l * side) as usize] * b[(l + j * EXACT_DEPTH) as usize];
                }
                c[(i + j * side) as usize] = sum;
            }
        }
        let check = check_exact("gemm_fp32_exact", side, &c);
        assert_eq!(check.mismatches, 0, "{check:?}");
        // The values are not all the same: the check can tell elements apart.
        let distinct: std::collections::BTreeSet<u32> = c.iter().map(|v| v.to_bits()).collect();
        assert!(distinct.len() > 10, "{distinct:?}");
        // One element one ulp off is found, with where and what.
        c[77] = f32::from_bits(c[77].to_bits() + 1);
        let check = check_exact("gemm_fp32_exact", side, &c);
        assert_eq!(check.mismatches, 1);
        let first = check.first.unwrap();
        assert_eq!(first.index, 77);
        assert_ne!(first.expected_bits, first.got_bits);
    }

    #[test]
    fn inputs_are_exact_in_bf16_and_fp16() {
        for v in -3..=3 {
            let v = v as f32;
            assert_eq!(f32::from_bits(u32::from(to_bf16(v)) << 16), v);
            let half = to_f16(v);
            let back = if half & 0x7fff == 0 {
                0.0
            } else {
                let sign = if half & 0x8000 != 0 { -1.0 } else { 1.0 };
                let exponent = i32::from((half >> 10) & 0x1f) - 15;
                let mantissa = 1.0 + f32::from(half & 0x3ff) / 1024.0;
                sign * mantissa * 2f32.powi(exponent)
            };
            assert_eq!(back, v, "{v} as fp16 {half:04x}");
        }
    }

    #[test]
    fn fma_chains_round_every_step_and_one_bit_off_is_found() {
        let results: Vec<f32> = (0..FMA_SEEDS).map(fma_chain_result).collect();
        // Seeds differ, and the chain is not a fixed point reached exactly by all.
        let distinct: std::collections::BTreeSet<u32> = results.iter().map(|v| v.to_bits()).collect();
        assert!(distinct.len() > 1, "{distinct:?}");
        let mut got: Vec<f32> = (0..3 * FMA_SEEDS).map(|t| results[(t % FMA_SEEDS) as usize]).collect();
        assert_eq!(check_fma_chains(&got).mismatches, 0);
        got[2000] = f32::from_bits(got[2000].to_bits() ^ 1);
        let check = check_fma_chains(&got);
        assert_eq!((check.mismatches, check.first.unwrap().index), (1, 2000));
    }

    #[test]
    fn a_digest_changes_with_one_bit_and_says_which_part() {
        let words: Vec<u32> = (0..64 * 4096u32).map(|i| i.wrapping_mul(2_654_435_761)).collect();
        let parts = digest_parts(&words, DIGEST_PARTS);
        let mut flipped = words.clone();
        flipped[5 * 4096 + 17] ^= 1 << 9;
        let other = digest_parts(&flipped, DIGEST_PARTS);
        let differing: Vec<usize> = (0..parts.len()).filter(|i| parts[*i] != other[*i]).collect();
        assert_eq!(differing, [5]);
        assert_ne!(digest_of(&parts), digest_of(&other));
        // The same words give the same digest (nothing depends on order or time).
        assert_eq!(digest_of(&parts), digest_of(&digest_parts(&words, DIGEST_PARTS)));
        // Swapped words are not the same result.
        let mut swapped = words.clone();
        swapped.swap(0, 1);
        assert_ne!(digest_parts(&swapped, DIGEST_PARTS)[0], parts[0]);
    }

    fn outcome(digest: &str) -> crate::model::probe::SdcOutcome {
        crate::model::probe::SdcOutcome {
            exact: vec![],
            side: 512,
            key: crate::model::probe::SdcKey {
                model: "NVIDIA H200".into(),
                sms: 132,
                driver: "580.159.04".into(),
                cublas: "130100".into(),
                canary: CANARY_VERSION,
            },
            digest: digest.into(),
            parts: vec![digest.into(), "0".into()],
            repeats: 200,
            repeats_differing: 0,
        }
    }

    #[test]
    fn the_node_majority_names_the_odd_gpu_out_and_replaces_a_wrong_memory() {
        let others = vec![
            ("GPU-b".to_string(), 1, outcome("aaaa")),
            ("GPU-c".to_string(), 2, outcome("aaaa")),
        ];
        // The odd one: faulted, naming the GPUs that agree and the part that differs.
        let j = judge("GPU-a", &outcome("bbbb"), &others, None, 10.0);
        assert_eq!(j.faults.len(), 1, "{j:?}");
        assert!(
            j.faults[0].contains("differs from aaaa, which GPUs 1, 2"),
            "{}",
            j.faults[0]
        );
        assert!(j.faults[0].contains("parts 0 of 2 differ"), "{}", j.faults[0]);
        // The majority becomes the reference.
        let reference = j.reference.unwrap();
        assert_eq!((reference.digest.as_str(), reference.gpus.len()), ("aaaa", 2));
        // A remembered digest that the majority does not share is replaced, and a GPU that
        // agrees with the majority is not faulted.
        let wrong_memory = crate::model::probe::SdcReference {
            digest: "bbbb".into(),
            parts: vec![],
            since: 1.0,
            gpus: vec!["GPU-a".into()],
        };
        let j = judge("GPU-d", &outcome("aaaa"), &others, Some(&wrong_memory), 10.0);
        assert!(j.faults.is_empty(), "{j:?}");
        assert_eq!(j.reference.unwrap().gpus, ["GPU-b", "GPU-c", "GPU-d"]);
    }

    #[test]
    fn a_single_gpu_is_held_to_its_remembered_digest() {
        // First probe: nothing to compare with; the clean digest is remembered.
        let j = judge("GPU-a", &outcome("aaaa"), &[], None, 10.0);
        assert!(j.faults.is_empty());
        let remembered = j.reference.unwrap();
        assert_eq!(remembered.gpus, ["GPU-a"]);
        // The same digest later: fine, nothing to change.
        let j = judge("GPU-a", &outcome("aaaa"), &[], Some(&remembered), 20.0);
        assert_eq!(
            j,
            Judgement {
                faults: vec![],
                reference: None,
                undecided: None,
            }
        );
        // Another digest later: wrong, against the remembered one.
        let j = judge("GPU-a", &outcome("cccc"), &[], Some(&remembered), 20.0);
        assert!(
            j.faults[0].contains("differs from aaaa, which this node's GPUs"),
            "{:?}",
            j.faults
        );
        assert!(j.reference.is_none(), "a wrong digest never becomes the reference");
    }

    #[test]
    fn other_keys_and_wrong_peers_are_not_compared_and_a_split_without_majority_uses_memory() {
        let mut other_model = outcome("aaaa");
        other_model.key.model = "NVIDIA H100 80GB HBM3".into();
        let mut wrong_peer = outcome("aaaa");
        wrong_peer.repeats_differing = 3;
        let others = vec![
            ("GPU-b".to_string(), 1, other_model),
            ("GPU-c".to_string(), 2, wrong_peer),
        ];
        let j = judge("GPU-a", &outcome("bbbb"), &others, None, 10.0);
        assert!(j.faults.is_empty(), "no peer of its key with clean results: {j:?}");
        // Two GPUs that disagree: no majority. A remembered digest only the other one gave
        // does not decide (either may be wrong); one that two GPUs gave does.
        let mut remembered = judge("GPU-b", &outcome("aaaa"), &[], None, 1.0).reference.unwrap();
        let peers = vec![("GPU-b".to_string(), 1, outcome("aaaa"))];
        let j = judge("GPU-a", &outcome("bbbb"), &peers, Some(&remembered), 10.0);
        assert!(j.faults.is_empty() && j.reference.is_none(), "{j:?}");
        assert!(j.undecided.is_some(), "{j:?}");
        remembered.gpus.push("GPU-c".into());
        let j = judge("GPU-a", &outcome("bbbb"), &peers, Some(&remembered), 10.0);
        assert_eq!(j.faults.len(), 1, "{j:?}");
        assert!(j.undecided.is_none(), "{j:?}");
        // Its own wrong results are faults even with nothing to compare.
        let mut own = outcome("aaaa");
        own.repeats_differing = 1;
        assert!(judge("GPU-a", &own, &[], None, 1.0).faults[0].contains("another digest in 1 of 200 runs"));
        assert!(judge("GPU-a", &own, &[], None, 1.0).reference.is_none());
    }
}
