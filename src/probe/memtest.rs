//! The HBM pattern test's plan (docs/probe.md, "HBM patterns"): the passes in the order they
//! run, each a fill and a check (or a read-and-invert sweep) of the whole region, and what a
//! word holds in each. Cheap passes that catch the most come first, so a time budget that runs
//! out leaves the long walking-bit series, not the address test, untested. The GPU side is
//! probe::cuda_memtest; the kernels are in kernels.cu.

/// How a pass writes and reads the region (`mem_fill`'s and `mem_check`'s `mode`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Fill {
    /// Every word the pattern.
    Pattern(u32),
    /// Every word its own index XOR the pattern (address in address: a wrong address line
    /// reads another word's index).
    Address(u32),
    /// The inverse of that.
    AddressInverse(u32),
}

impl Fill {
    /// (pattern, mode) as the kernels take them.
    pub(crate) fn args(self) -> (u32, i32) {
        match self {
            Fill::Pattern(p) => (p, 0),
            Fill::Address(p) => (p, 1),
            Fill::AddressInverse(p) => (p, 2),
        }
    }
}

/// One pass.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Pass {
    /// Fill, then read every word back.
    FillCheck { name: String, fill: Fill },
    /// Moving inversions: fill with `pattern`; read each word (it must hold the pattern) and
    /// write it inverted, ascending; the same descending (each must hold the inverse, and gets
    /// the pattern back); then read every word back.
    MovingInversions { name: String, pattern: u32 },
}

impl Pass {
    pub(crate) fn name(&self) -> &str {
        match self {
            Pass::FillCheck { name, .. } | Pass::MovingInversions { name, .. } => name,
        }
    }

    /// How many times the pass reads or writes the whole region.
    pub(crate) fn traversals(&self) -> u64 {
        match self {
            Pass::FillCheck { .. } => 2,
            // fill, up (read + write), down (read + write), check
            Pass::MovingInversions { .. } => 6,
        }
    }
}

/// Every pass, in the order they run: address in address and its inverse, moving inversions
/// over four patterns, then walking ones and walking zeros over the 32 bits of a word.
pub(crate) fn plan() -> Vec<Pass> {
    let mut passes = vec![
        Pass::FillCheck {
            name: "address".into(),
            fill: Fill::Address(0),
        },
        Pass::FillCheck {
            name: "address_inverse".into(),
            fill: Fill::AddressInverse(0),
        },
    ];
    for pattern in [0x0000_0000u32, 0xffff_ffff, 0xaaaa_aaaa, 0x5555_5555] {
        passes.push(Pass::MovingInversions {
            name: format!("moving_inversions_{pattern:08x}"),
            pattern,
        });
    }
    for bit in 0..32 {
        passes.push(Pass::FillCheck {
            name: format!("walking_ones_bit{bit}"),
            fill: Fill::Pattern(1 << bit),
        });
        passes.push(Pass::FillCheck {
            name: format!("walking_zeros_bit{bit}"),
            fill: Fill::Pattern(!(1 << bit)),
        });
    }
    passes
}

/// The region's size: `share` of the free memory, at most `max_bytes`, in whole 16 MiB.
pub(crate) fn region_bytes(free: u64, share: f64, max_bytes: u64) -> u64 {
    let chunk = 16u64 << 20;
    let wanted = ((free as f64 * share) as u64).min(max_bytes);
    wanted / chunk * chunk
}

/// The most words that read back wrong the kernels keep (with index, expected and got).
pub(crate) const KEPT_BAD: usize = 16;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plan_tests_addresses_first_and_every_bit_both_ways() {
        let passes = plan();
        assert_eq!(passes[0].name(), "address");
        assert_eq!(passes.len(), 2 + 4 + 64);
        let walking: Vec<u32> = passes
            .iter()
            .filter_map(|p| match p {
                Pass::FillCheck {
                    fill: Fill::Pattern(v), ..
                } => Some(*v),
                _ => None,
            })
            .collect();
        // Each bit alone set, and each bit alone clear.
        for bit in 0..32 {
            assert!(
                walking.contains(&(1 << bit)) && walking.contains(&!(1 << bit)),
                "bit {bit}"
            );
        }
        let traversals: u64 = passes.iter().map(Pass::traversals).sum();
        assert_eq!(traversals, 2 * 2 + 4 * 6 + 64 * 2);
    }

    #[test]
    fn the_region_is_a_capped_share_in_whole_chunks() {
        let gib = 1u64 << 30;
        assert_eq!(region_bytes(140 * gib, 0.5, 64 * gib), 64 * gib);
        assert_eq!(region_bytes(20 * gib, 0.5, 64 * gib), 10 * gib);
        assert_eq!(region_bytes((1 << 20) * 40, 0.5, 64 * gib), 16 << 20);
        assert_eq!(
            region_bytes(1 << 20, 0.5, 64 * gib),
            0,
            "too little free memory: nothing"
        );
    }
}
