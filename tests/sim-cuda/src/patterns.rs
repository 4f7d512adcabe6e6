//! The HBM pattern test's kernels as the simulation runs them: the region's contents are a
//! formula (every word the same function of its index, as `mem_fill` and `mem_invert` leave
//! them), so a check costs nothing whatever the region's size, and the scenario's stuck bit
//! (`hbm_stuck_bit: [word, bit, value]`) is the one word that can read back wrong.

use crate::memory::Memory;
use crate::scenario;

/// What word `i` holds under (pattern, mode), as `mem_value` in kernels.cu computes it.
pub fn value(i: u64, (pattern, mode): (u32, i32)) -> u32 {
    let address = i as u32;
    match mode {
        0 => pattern,
        1 => address ^ pattern,
        _ => !(address ^ pattern),
    }
}

/// `mem_check` (or the read half of `mem_invert`): every word of a region that holds `held`
/// against `wanted`;
/// wrong words counted in `errors` and the first 16 kept in `bad` (index, expected, got).
pub fn check(
    memory: &mut Memory,
    held: (u32, i32),
    rates: &scenario::Cuda,
    words: u64,
    wanted: (u32, i32),
    [errors, bad]: [u64; 2],
) {
    if held != wanted {
        // Not what was written: every word reads wrong (a bug in the caller, made visible).
        record(memory, errors, bad, 0, value(0, wanted), value(0, held), words);
        return;
    }
    let Some([word, bit, stuck]) = rates.hbm_stuck_bit else {
        return;
    };
    if word >= words {
        return;
    }
    let expected = value(word, wanted);
    let mask = 1u32 << (bit % 32);
    let got = if stuck == 0 { expected & !mask } else { expected | mask };
    if got != expected {
        record(memory, errors, bad, word, expected, got, 1);
    }
}

fn record(memory: &mut Memory, errors: u64, bad: u64, word: u64, expected: u32, got: u32, count: u64) {
    let before = u64::from_le_bytes(memory.read(errors, 8).try_into().unwrap_or([0; 8]));
    if before < 16 {
        let slot: Vec<u8> = [word, u64::from(expected), u64::from(got)]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        memory.write(bad + before * 24, &slot);
    }
    memory.write(errors, &(before + count).to_le_bytes());
}
