//! The `gpu_metrics` file amdgpu exposes in sysfs: a binary table whose layout the kernel
//! defines per (format, content) revision in include/kgd_pp_interface.h. Every revision
//! starts with the same 4-byte header (structure size, format revision, content revision);
//! the fields after it move between revisions, so each supported revision has its own
//! offsets here. An unknown revision is an error the caller logs once and then skips.
//!
//! Supported: v1.3 (Instinct MI200 / Aldebaran, RDNA2/3 boards), v1.4 and v1.5 (Instinct
//! MI300). 0xFFFF (0xFFFFFFFF, ...) in a field means "not provided" and becomes `None`.

use std::fmt;

/// What gpuwarden takes from one gpu_metrics table, in base units.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GpuMetrics {
    pub format_revision: u8,
    pub content_revision: u8,
    pub temperature_edge: Option<f64>,
    pub temperature_hotspot: Option<f64>,
    pub temperature_mem: Option<f64>,
    /// The hottest HBM stack (v1.3 reports each).
    pub temperature_hbm_max: Option<f64>,
    pub socket_power_watts: Option<f64>,
    pub energy_joules: Option<f64>,
    pub gfx_activity_ratio: Option<f64>,
    pub umc_activity_ratio: Option<f64>,
    pub gfxclk_hertz: Option<f64>,
    pub uclk_hertz: Option<f64>,
    /// ASIC-independent throttler bits (amdgpu_smu.h SMU_THROTTLER_*), v1.3 only: v1.4 and
    /// v1.5 carry only the ASIC-dependent status, whose bits differ per chip.
    pub throttle_independent: Option<u64>,
    pub pcie_link_width: Option<u32>,
    /// GT/s per lane.
    pub pcie_link_speed_gts: Option<f64>,
    pub pcie_replay_count: Option<u64>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum ParseError {
    /// Fewer bytes than the header, or than the header says or the revision needs.
    Truncated {
        have: usize,
        need: usize,
    },
    UnknownRevision {
        format: u8,
        content: u8,
    },
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseError::Truncated { have, need } => {
                write!(f, "gpu_metrics is {have} bytes, its layout needs {need}")
            }
            ParseError::UnknownRevision { format, content } => {
                write!(
                    f,
                    "gpu_metrics revision v{format}.{content} is not one gpuwarden reads (it reads v1.3, v1.4, v1.5)"
                )
            }
        }
    }
}

/// Energy accumulator unit: 15.259 uJ (2^-16 J), the same in every v1 revision.
const ENERGY_UNIT_JOULES: f64 = 1.0 / 65536.0;

struct Table<'a>(&'a [u8]);

impl Table<'_> {
    fn u16(&self, at: usize) -> Option<u16> {
        let b = self.0.get(at..at + 2)?;
        Some(u16::from_le_bytes([b[0], b[1]])).filter(|v| *v != u16::MAX)
    }
    fn u64(&self, at: usize) -> Option<u64> {
        let b: [u8; 8] = self.0.get(at..at + 8)?.try_into().ok()?;
        Some(u64::from_le_bytes(b)).filter(|v| *v != u64::MAX)
    }
    fn celsius(&self, at: usize) -> Option<f64> {
        self.u16(at).map(f64::from)
    }
    fn percent(&self, at: usize) -> Option<f64> {
        self.u16(at).filter(|p| *p <= 100).map(|p| f64::from(p) / 100.0)
    }
    fn mhz(&self, at: usize) -> Option<f64> {
        self.u16(at).filter(|v| *v > 0).map(|v| f64::from(v) * 1e6)
    }
    /// The largest valid value of `count` u16 fields from `at`.
    fn max_celsius(&self, at: usize, count: usize) -> Option<f64> {
        (0..count)
            .filter_map(|i| self.celsius(at + 2 * i).filter(|t| *t > 0.0))
            .reduce(f64::max)
    }
}

/// Sizes of the supported layouts (the C structs with their natural alignment).
const SIZE_V1_3: usize = 120;
const SIZE_V1_4: usize = 288;
const SIZE_V1_5: usize = 360;

pub fn parse(bytes: &[u8]) -> Result<GpuMetrics, ParseError> {
    if bytes.len() < 4 {
        return Err(ParseError::Truncated {
            have: bytes.len(),
            need: 4,
        });
    }
    let declared = usize::from(u16::from_le_bytes([bytes[0], bytes[1]]));
    let (format, content) = (bytes[2], bytes[3]);
    let need = match (format, content) {
        (1, 3) => SIZE_V1_3,
        (1, 4) => SIZE_V1_4,
        (1, 5) => SIZE_V1_5,
        _ => return Err(ParseError::UnknownRevision { format, content }),
    };
    // The kernel writes the struct size into the header; a shorter file or header means a
    // torn read or a layout that is not the one we know.
    if bytes.len() < need || declared < need {
        return Err(ParseError::Truncated {
            have: bytes.len().min(declared),
            need,
        });
    }
    let t = Table(bytes);
    let mut m = GpuMetrics {
        format_revision: format,
        content_revision: content,
        ..GpuMetrics::default()
    };
    match content {
        3 => {
            m.temperature_edge = t.celsius(4);
            m.temperature_hotspot = t.celsius(6);
            m.temperature_mem = t.celsius(8);
            m.gfx_activity_ratio = t.percent(16);
            m.umc_activity_ratio = t.percent(18);
            m.socket_power_watts = t.u16(22).map(f64::from);
            m.energy_joules = t.u64(24).map(|e| e as f64 * ENERGY_UNIT_JOULES);
            m.gfxclk_hertz = t.mhz(54);
            m.uclk_hertz = t.mhz(58);
            m.pcie_link_width = t.u16(74).map(u32::from);
            m.pcie_link_speed_gts = t.u16(76).map(|s| f64::from(s) / 10.0);
            m.temperature_hbm_max = t.max_celsius(88, 4);
            m.throttle_independent = t.u64(112);
        }
        _ => {
            // v1.4 and v1.5 share everything but the JPEG activity array (v1.5) and the
            // NAK counters (v1.5), which shift what follows.
            let jpeg = if content == 5 { 64 } else { 0 };
            m.temperature_hotspot = t.celsius(4);
            m.temperature_mem = t.celsius(6);
            m.socket_power_watts = t.u16(10).map(f64::from);
            m.gfx_activity_ratio = t.percent(12);
            m.umc_activity_ratio = t.percent(14);
            m.energy_joules = t.u64(24 + jpeg).map(|e| e as f64 * ENERGY_UNIT_JOULES);
            m.pcie_link_width = t.u16(48 + jpeg).map(u32::from);
            m.pcie_link_speed_gts = t.u16(50 + jpeg).map(|s| f64::from(s) / 10.0);
            m.pcie_replay_count = t.u64(88 + jpeg);
            let clocks = if content == 5 { 312 } else { 240 };
            // The first XCD's clock stands for the GPU's, as rocm-smi shows it.
            m.gfxclk_hertz = t.mhz(clocks);
            m.uclk_hertz = t.mhz(clocks + 40);
        }
    }
    Ok(m)
}

/// PCIe generation from the per-lane rate.
pub fn pcie_generation(gts: f64) -> Option<u32> {
    [(2.5, 1), (5.0, 2), (8.0, 3), (16.0, 4), (32.0, 5), (64.0, 6)]
        .iter()
        .find(|(rate, _)| (gts - rate).abs() < 0.5)
        .map(|(_, generation)| *generation)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A table of `size` bytes with the header set and every other byte 0xff ("absent").
    fn table(size: usize, content: u8) -> Vec<u8> {
        let mut t = vec![0xff; size];
        t[0..2].copy_from_slice(&(size as u16).to_le_bytes());
        t[2] = 1;
        t[3] = content;
        t
    }

    fn put16(t: &mut [u8], at: usize, v: u16) {
        t[at..at + 2].copy_from_slice(&v.to_le_bytes());
    }
    fn put64(t: &mut [u8], at: usize, v: u64) {
        t[at..at + 8].copy_from_slice(&v.to_le_bytes());
    }

    #[test]
    fn v1_3_fields_land_where_the_kernel_puts_them() {
        let mut t = table(SIZE_V1_3, 3);
        put16(&mut t, 4, 45); // edge
        put16(&mut t, 6, 52); // hotspot
        put16(&mut t, 8, 48); // mem
        put16(&mut t, 16, 87); // gfx activity %
        put16(&mut t, 22, 301); // socket power W
        put64(&mut t, 24, 65536 * 1000); // 1000 J
        put16(&mut t, 54, 1700); // current gfxclk MHz
        put16(&mut t, 58, 1600); // current uclk MHz
        put16(&mut t, 74, 16);
        put16(&mut t, 76, 160); // 16.0 GT/s
        for (i, c) in [50u16, 53, 51, 49].iter().enumerate() {
            put16(&mut t, 88 + 2 * i, *c);
        }
        put64(&mut t, 112, 1 << 36 | 1); // hotspot temperature + PPT0
        let m = parse(&t).unwrap();
        assert_eq!(m.temperature_edge, Some(45.0));
        assert_eq!(m.temperature_hotspot, Some(52.0));
        assert_eq!(m.temperature_mem, Some(48.0));
        assert_eq!(m.temperature_hbm_max, Some(53.0));
        assert_eq!(m.gfx_activity_ratio, Some(0.87));
        assert_eq!(m.umc_activity_ratio, None, "0xffff is absent");
        assert_eq!(m.socket_power_watts, Some(301.0));
        assert_eq!(m.energy_joules, Some(1000.0));
        assert_eq!(m.gfxclk_hertz, Some(1.7e9));
        assert_eq!(m.uclk_hertz, Some(1.6e9));
        assert_eq!((m.pcie_link_width, m.pcie_link_speed_gts), (Some(16), Some(16.0)));
        assert_eq!(m.throttle_independent, Some(1 << 36 | 1));
        assert_eq!(m.pcie_replay_count, None);
    }

    #[test]
    fn v1_4_and_v1_5_differ_by_the_jpeg_array() {
        for (content, size, shift, clocks) in [(4u8, SIZE_V1_4, 0usize, 240usize), (5, SIZE_V1_5, 64, 312)] {
            let mut t = table(size, content);
            put16(&mut t, 4, 61); // hotspot
            put16(&mut t, 6, 55); // mem (HBM)
            put16(&mut t, 10, 550); // socket power W
            put16(&mut t, 12, 99);
            put64(&mut t, 24 + shift, 65536 * 5);
            put16(&mut t, 48 + shift, 16);
            put16(&mut t, 50 + shift, 320); // 32 GT/s: Gen5
            put64(&mut t, 88 + shift, 7);
            put16(&mut t, clocks, 2100);
            put16(&mut t, clocks + 40, 1300);
            let m = parse(&t).unwrap();
            assert_eq!(m.temperature_hotspot, Some(61.0), "v1.{content}");
            assert_eq!(m.temperature_mem, Some(55.0), "v1.{content}");
            assert_eq!(m.temperature_edge, None, "v1.{content} has no edge sensor");
            assert_eq!(m.socket_power_watts, Some(550.0), "v1.{content}");
            assert_eq!(m.gfx_activity_ratio, Some(0.99), "v1.{content}");
            assert_eq!(m.energy_joules, Some(5.0), "v1.{content}");
            assert_eq!(m.pcie_link_speed_gts.and_then(pcie_generation), Some(5), "v1.{content}");
            assert_eq!(m.pcie_replay_count, Some(7), "v1.{content}");
            assert_eq!(m.gfxclk_hertz, Some(2.1e9), "v1.{content}");
            assert_eq!(m.uclk_hertz, Some(1.3e9), "v1.{content}");
            assert_eq!(m.throttle_independent, None);
        }
    }

    #[test]
    fn unknown_revisions_and_short_tables_are_errors() {
        let mut t = table(SIZE_V1_3, 3);
        t[3] = 9;
        assert_eq!(parse(&t), Err(ParseError::UnknownRevision { format: 1, content: 9 }));
        assert!(parse(&t).unwrap_err().to_string().contains("v1.9"));
        assert!(matches!(
            parse(&table(SIZE_V1_3, 3)[..100]),
            Err(ParseError::Truncated { .. })
        ));
        let mut short_header = table(SIZE_V1_4, 4);
        short_header[0..2].copy_from_slice(&100u16.to_le_bytes());
        assert!(matches!(
            parse(&short_header),
            Err(ParseError::Truncated { need: 288, .. })
        ));
        assert!(matches!(parse(&[1, 2]), Err(ParseError::Truncated { need: 4, .. })));
        assert!(matches!(parse(&[]), Err(ParseError::Truncated { .. })));
    }

    #[test]
    fn link_rates_give_generations() {
        assert_eq!(pcie_generation(2.5), Some(1));
        assert_eq!(pcie_generation(16.0), Some(4));
        assert_eq!(pcie_generation(32.0), Some(5));
        assert_eq!(pcie_generation(7.0), None);
    }
}
