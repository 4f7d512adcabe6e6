//! Fuzzes the config parser: any bytes, never a panic; an error always names the file; and a
//! config it accepts keeps the invariants the poll loop relies on.
#![no_main]

use gpuwarden::config::Config;
use libfuzzer_sys::fuzz_target;
use std::path::Path;
use std::time::Duration;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    match Config::parse(&text, Path::new("fuzz.yaml")) {
        Ok(config) => {
            assert!(config.poll.interval >= Duration::from_millis(10));
            assert!(!config.poll.timeout.is_zero() && config.poll.timeout <= config.poll.interval);
        }
        Err(e) => assert!(e.to_string().starts_with("fuzz.yaml"), "{e}"),
    }
});
