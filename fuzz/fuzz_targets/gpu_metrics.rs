//! Fuzzes the amdgpu gpu_metrics parser: any bytes, never a panic, and whatever it accepts
//! is plausible: finite values, ratios within 0..1, a known revision.
#![no_main]

use gpuwarden::backend::amd::gpu_metrics::parse;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = parse(data) {
        assert_eq!(m.format_revision, 1);
        assert!((3..=5).contains(&m.content_revision));
        for ratio in [m.gfx_activity_ratio, m.umc_activity_ratio].into_iter().flatten() {
            assert!((0.0..=1.0).contains(&ratio), "{ratio}");
        }
        for value in [
            m.temperature_edge,
            m.temperature_hotspot,
            m.temperature_mem,
            m.temperature_hbm_max,
            m.socket_power_watts,
            m.energy_joules,
            m.gfxclk_hertz,
            m.uclk_hertz,
            m.pcie_link_speed_gts,
        ]
        .into_iter()
        .flatten()
        {
            assert!(value.is_finite() && value >= 0.0, "{value}");
        }
    }
});
