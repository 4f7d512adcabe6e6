//! The README's lists held to what they describe: every dependency in Cargo.toml, every
//! simulated library of the workspace, every package and Python package the test command
//! installs, and the number of fuzz targets (they drifted once, unnoticed).

use crate::common::repo_file as read;
use std::path::Path;

/// The crate names of one `[section]` of a Cargo.toml.
fn crates_in(toml: &str, section: &str) -> Vec<String> {
    toml.lines()
        .skip_while(|l| l.trim() != section)
        .skip(1)
        .take_while(|l| !l.starts_with('['))
        .filter(|l| !l.trim_start().starts_with('#') && l.contains('='))
        .map(|l| l.split('=').next().unwrap().trim().to_string())
        .collect()
}

#[test]
fn the_readme_names_every_dependency_and_simulated_library() {
    let readme = read("README.md");
    let toml = read("Cargo.toml");
    let mut missing = Vec::new();
    for section in ["[dependencies]", "[dev-dependencies]"] {
        for name in crates_in(&toml, section) {
            if !readme.contains(&format!("`{name}`")) {
                missing.push(format!("{section} {name}"));
            }
        }
    }
    // The workspace's members: the simulated libraries.
    let members = toml
        .lines()
        .find(|l| l.starts_with("members"))
        .unwrap()
        .split('"')
        .skip(1)
        .step_by(2)
        .filter(|m| *m != ".")
        .map(String::from)
        .collect::<Vec<_>>();
    assert!(members.len() >= 5, "{members:?}");
    for member in members {
        let name = read(&format!("{member}/Cargo.toml"))
            .lines()
            .find_map(|l| l.strip_prefix("name = "))
            .unwrap()
            .trim_matches('"')
            .to_string();
        if !readme.contains(&format!("`{name}`")) {
            missing.push(format!("workspace member {name}"));
        }
    }
    assert!(
        missing.is_empty(),
        "the README's dependency section lacks: {missing:#?}"
    );
}

#[test]
fn the_readme_names_what_the_test_command_installs_and_the_fuzz_targets() {
    let readme = read("README.md");
    let script = read("scripts/ci/test.sh");
    let apt: Vec<&str> = script
        .split("APT_PACKAGES=(")
        .nth(1)
        .unwrap()
        .split(')')
        .next()
        .unwrap()
        .split_whitespace()
        .collect();
    assert!(apt.len() >= 10, "{apt:?}");
    let pip: Vec<&str> = script
        .lines()
        .filter(|l| l.contains("-m pip install"))
        .filter_map(|l| l.split('\'').nth(1))
        .map(|spec| spec.split("==").next().unwrap())
        .collect();
    assert!(pip.len() >= 3, "{pip:?}");
    let missing: Vec<&&str> = apt
        .iter()
        .chain(pip.iter())
        .filter(|name| !readme.contains(&format!("`{name}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "the README's test command paragraph lacks: {missing:?}"
    );
    let numbers = [
        "no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
    ];
    let targets = std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/fuzz_targets"))
        .unwrap()
        .count();
    let said = format!("{} fuzz targets", numbers[targets.min(9)]);
    assert!(readme.contains(&said), "the README should say \"{said}\"");
    for wrong in numbers.iter().filter(|n| **n != numbers[targets.min(9)]) {
        assert!(
            !readme.contains(&format!("{wrong} fuzz targets")),
            "the README says {wrong} fuzz targets"
        );
    }
}

/// A first build is quiet: cargo walks a copy of the source made without git (a tarball, as
/// `git archive` makes it) for the package's files, and the sysfs fixtures' link loops (as
/// /sys has them) made it warn 25 times. Listing the package's files walks the same way.
#[test]
fn a_copy_of_the_source_outside_git_builds_without_warnings() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let copy = tempfile::tempdir().unwrap();
    let archive = std::process::Command::new("git")
        .args(["archive", "--format=tar", "HEAD"])
        .current_dir(root)
        .output()
        .expect("git");
    assert!(archive.status.success(), "{}", String::from_utf8_lossy(&archive.stderr));
    let mut tar = std::process::Command::new("tar")
        .args(["-x", "-C"])
        .arg(copy.path())
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(tar.stdin.as_mut().unwrap(), &archive.stdout).unwrap();
    drop(tar.stdin.take());
    assert!(tar.wait().unwrap().success());
    // The manifest as it is now (the archive is the last commit's).
    std::fs::copy(root.join("Cargo.toml"), copy.path().join("Cargo.toml")).unwrap();
    let out = std::process::Command::new(env!("CARGO"))
        .args(["package", "--list", "--allow-dirty", "--offline", "-p", "gpuwarden"])
        .current_dir(copy.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        copy.path()
            .join("tests/fixtures/sysfs/hdr-ib/sys/class/infiniband/mlx5_0")
            .is_symlink(),
        "the copy holds the fixtures' links"
    );
    // (`cargo package` warns of its own about a manifest without a homepage; a build does not.)
    assert!(!stderr.contains("File system loop"), "{stderr}");
}

/// The top of the repository holds what a reader expects there and nothing a session left
/// behind (a `cfg.yaml` with paths under target/ and /tmp, an `out.log` were committed once):
/// every tracked name at the top level is one of these.
#[test]
fn the_top_level_holds_no_stray_artefacts() {
    const EXPECTED: &[&str] = &[
        ".ci",
        ".gitignore",
        "Cargo.lock",
        "Cargo.toml",
        "LICENSE",
        "README.md",
        "benches",
        "build.rs",
        "config",
        "dashboards",
        "debian",
        "deploy",
        "docs",
        "fuzz",
        "rustfmt.toml",
        "scripts",
        "src",
        "systemd",
        "tests",
    ];
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = std::process::Command::new("git")
        .args(["ls-files"])
        .current_dir(root)
        .output()
        .expect("git");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let top: std::collections::BTreeSet<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|path| path.split('/').next().unwrap_or(path).to_string())
        .collect();
    let stray: Vec<&String> = top.iter().filter(|name| !EXPECTED.contains(&name.as_str())).collect();
    assert!(stray.is_empty(), "stray files at the top of the repository: {stray:?}");
}

/// The README's count of unit tests is the count of `#[test]`s in src/, within a tenth.
#[test]
fn the_readmes_unit_test_count_is_the_real_one() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let said: usize = readme
        .split("runs the unit tests (about ")
        .nth(1)
        .and_then(|rest| rest.split(';').next())
        .and_then(|n| n.trim().parse().ok())
        .expect("the README says how many unit tests `cargo test --lib` runs");
    fn count(dir: &Path) -> usize {
        std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .map(|e| {
                let path = e.path();
                if path.is_dir() {
                    count(&path)
                } else if path.extension().is_some_and(|x| x == "rs") {
                    std::fs::read_to_string(&path).unwrap().matches("#[test]").count()
                } else {
                    0
                }
            })
            .sum()
    }
    let real = count(&root.join("src"));
    assert!(
        said.abs_diff(real) * 10 <= real,
        "the README says about {said} unit tests; src/ has {real}"
    );
}
