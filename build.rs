//! Records the git revision for gpuwarden_build_info, and in release builds has the linker lay
//! the code the steady state runs side by side (scripts/layout/steady-code.ld).
use std::path::Path;

fn main() {
    let revision = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=GPUWARDEN_REVISION={revision}");
    println!("cargo:rerun-if-changed=.git/HEAD");
    println!("cargo:rerun-if-changed=.git/refs/heads");
    lay_out_steady_code();
}

/// The linker script that gathers the functions the daemon runs once settled into one stretch
/// of the binary, ahead of the rest of its code (docs/performance.md, "The steady state's code
/// in one place"): the kernel then keeps those pages resident, and the start-up code around
/// them can be given back (src/service/residency.rs).
const STEADY_CODE: &str = "scripts/layout/steady-code.ld";

fn lay_out_steady_code() {
    println!("cargo:rerun-if-changed={STEADY_CODE}");
    println!("cargo:rerun-if-env-changed=GPUWARDEN_STEADY_CODE");
    let env = |name: &str| std::env::var(name).unwrap_or_default();
    // Release builds for x86_64 Linux, linked by rustc's own LLD (its default there since
    // 1.90; the script was made and measured with it). A linker chosen by hand is left alone
    // (mold, for one, takes no such script), and GPUWARDEN_STEADY_CODE=0 turns it off.
    let hand_picked_linker = !env("RUSTC_LINKER").is_empty() || env("CARGO_ENCODED_RUSTFLAGS").contains("link");
    if env("PROFILE") != "release"
        || env("TARGET") != "x86_64-unknown-linux-gnu"
        || hand_picked_linker
        || env("GPUWARDEN_STEADY_CODE") == "0"
        || !rustc_links_with_lld(&env("RUSTC"))
    {
        return;
    }
    let script = Path::new(&env("CARGO_MANIFEST_DIR")).join(STEADY_CODE);
    if script.is_file() {
        println!("cargo:rustc-link-arg-bins=-Wl,-T,{}", script.display());
    }
}

/// rustc 1.90 and later link x86_64 Linux binaries with their own LLD; before, the system's
/// `cc` and GNU ld did.
fn rustc_links_with_lld(rustc: &str) -> bool {
    let version = std::process::Command::new(if rustc.is_empty() { "rustc" } else { rustc })
        .arg("-V")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .unwrap_or_default();
    // "rustc 1.95.0 (59807616e 2026-04-14)"
    let mut numbers = version
        .split_whitespace()
        .nth(1)
        .unwrap_or_default()
        .split(['.', '-'])
        .map(|n| n.parse::<u32>().unwrap_or(0));
    let (major, minor) = (numbers.next().unwrap_or(0), numbers.next().unwrap_or(0));
    (major, minor) >= (1, 90)
}
