//! The boot's own clock (CLOCK_BOOTTIME: seconds since boot, suspend included), for spans
//! that the wall clock must not stretch or shrink: a wall clock set forward a day must not
//! give a GPU a fresh reset budget (remediation.max_resets_per_day).

/// Seconds since boot; None where the clock cannot be read.
pub(crate) fn boot_seconds() -> Option<f64> {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime(2) writes one timespec into the value we own.
    let read = unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut now) };
    (read == 0).then(|| now.tv_sec as f64 + now.tv_nsec as f64 / 1e9)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_boot_clock_runs_forward() {
        let a = super::boot_seconds().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let b = super::boot_seconds().unwrap();
        assert!(b > a && a > 0.0, "{a} {b}");
    }
}
