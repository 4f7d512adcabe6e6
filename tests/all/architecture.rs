//! The layers of docs/architecture.md hold: no two source files import each other, directly
//! or through others, and the model (the bottom layer) imports nothing of the crate.
//!
//! Imports are read from the source text: `crate::a::b` paths (also inside `use crate::{..}`
//! groups) and `super::` paths, resolved to the longest module path that is a file. Test
//! modules (`#[cfg(test)]` and after) are left out: tests may reach anywhere.

use crate::common::repo_file as read;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Module path ("backend::nvml") -> source text without its tests.
fn modules() -> BTreeMap<String, String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = BTreeMap::new();
    for (path, text) in source_files() {
        let relative = path.strip_prefix(&root).unwrap().with_extension("");
        let mut parts: Vec<String> = relative.iter().map(|p| p.to_string_lossy().into_owned()).collect();
        if matches!(parts.last().map(String::as_str), Some("mod" | "lib" | "main")) {
            parts.pop();
        }
        // Comments may name paths that are not imports.
        let code: String = text
            .lines()
            .map(|l| l.split("//").next().unwrap_or(""))
            .collect::<Vec<_>>()
            .join("\n");
        out.insert(parts.join("::"), code);
    }
    out
}

/// The identifiers of a path that starts at `at` in `text`: `a::b::{c, d::e}` gives
/// [a, b, c] and [a, b, d, e].
fn paths_at(text: &str, at: usize) -> Vec<Vec<String>> {
    let rest = &text[at..];
    let mut base = Vec::new();
    let mut word = String::new();
    for (i, c) in rest.char_indices() {
        if c.is_alphanumeric() || c == '_' {
            word.push(c);
        } else if c == ':' {
            if !word.is_empty() {
                base.push(std::mem::take(&mut word));
            }
        } else if c == '{' {
            let end = rest[i..].find('}').map(|e| i + e).unwrap_or(rest.len());
            return rest[i + 1..end]
                .split(',')
                .map(|item| {
                    let mut p = base.clone();
                    p.extend(
                        item.trim()
                            .split("::")
                            .map(|s| s.trim().to_string())
                            .filter(|s| !s.is_empty()),
                    );
                    p
                })
                .collect();
        } else {
            break;
        }
    }
    if !word.is_empty() {
        base.push(word);
    }
    vec![base]
}

fn imports(modules: &BTreeMap<String, String>) -> BTreeMap<String, BTreeSet<String>> {
    let mut edges = BTreeMap::new();
    for (module, text) in modules {
        let here: Vec<String> = module.split("::").filter(|s| !s.is_empty()).map(String::from).collect();
        let mut targets = Vec::new();
        for (at, _) in text.match_indices("crate::") {
            targets.extend(paths_at(text, at + "crate::".len()));
        }
        for (at, _) in text.match_indices("super::") {
            // Take each chain `super::super::x` once, from its start.
            if text[..at].ends_with("super::") {
                continue;
            }
            let mut ups = 0;
            let mut after = at;
            while text[after..].starts_with("super::") {
                ups += 1;
                after += "super::".len();
            }
            let parent = &here[..here.len().saturating_sub(ups)];
            for path in paths_at(text, after) {
                targets.push(parent.iter().cloned().chain(path).collect());
            }
        }
        let mut found = BTreeSet::new();
        for target in targets {
            for k in (1..=target.len()).rev() {
                let candidate = target[..k].join("::");
                if modules.contains_key(&candidate) {
                    if &candidate != module {
                        found.insert(candidate);
                    }
                    break;
                }
            }
        }
        edges.insert(module.clone(), found);
    }
    edges
}

/// The module paths that reach `from` again through `edges`, if any: one cycle.
fn cycle_through(from: &str, edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    let mut stack = vec![(from.to_string(), vec![from.to_string()])];
    let mut seen = BTreeSet::new();
    while let Some((node, path)) = stack.pop() {
        for next in edges.get(&node).into_iter().flatten() {
            if next == from {
                return Some(path);
            }
            if seen.insert(next.clone()) {
                let mut longer = path.clone();
                longer.push(next.clone());
                stack.push((next.clone(), longer));
            }
        }
    }
    None
}

#[test]
fn no_source_file_imports_itself_through_others() {
    let modules = modules();
    assert!(modules.len() > 40, "found only {:?}", modules.keys());
    let edges = imports(&modules);
    let cycles: Vec<String> = modules
        .keys()
        .filter_map(|m| cycle_through(m, &edges))
        .map(|c| c.join(" -> "))
        .collect();
    assert!(cycles.is_empty(), "import cycles:\n{}", cycles.join("\n"));
}

#[test]
fn the_model_is_the_bottom_layer() {
    let modules = modules();
    let edges = imports(&modules);
    for (module, targets) in &edges {
        if module == "model" || module.starts_with("model::") {
            let outside: Vec<&String> = targets.iter().filter(|t| !t.starts_with("model")).collect();
            assert!(outside.is_empty(), "{module} imports {outside:?}");
        }
    }
}

#[test]
fn the_poller_names_no_vendor() {
    let modules = modules();
    for shared in [
        "sources::poller",
        "snapshot::publisher",
        "backend",
        "model",
        "snapshot::store",
    ] {
        let text = modules[shared].to_lowercase();
        for vendor in ["nvml", "rocm", "amdgpu", "sysfs"] {
            // `backend` declares its vendor modules and picks them from the settings.
            if shared == "backend" {
                continue;
            }
            assert!(!text.contains(vendor), "{shared}.rs names {vendor}");
        }
    }
    let edges = imports(&modules);
    assert!(
        edges["sources::poller"].iter().all(|t| !t.starts_with("backend::")),
        "the poller reaches into a backend: {:?}",
        edges["sources::poller"]
    );
}

/// The reader itself finds what it should: a cycle made on purpose is reported.
#[test]
fn a_made_up_cycle_is_found() {
    let mut modules = BTreeMap::new();
    modules.insert("a".to_string(), "use crate::b::Thing;".to_string());
    modules.insert("b".to_string(), "use crate::{c::X, d};".to_string());
    modules.insert("c".to_string(), "fn f() { crate::a::g() }".to_string());
    modules.insert("d".to_string(), String::new());
    let edges = imports(&modules);
    assert_eq!(edges["b"], ["c".to_string(), "d".to_string()].into_iter().collect());
    assert!(cycle_through("a", &edges).is_some());
    assert!(cycle_through("d", &edges).is_none());
}

/// docs/architecture.md's layers, bottom first: a module imports only from its own layer or
/// those below it. The longest listed prefix of a module's path decides its layer.
const LAYERS: &[(&str, u32)] = &[
    ("model", 1),
    ("input", 2),
    ("service", 2),
    ("config", 2),
    ("custom_rules", 2),
    ("xid", 2),
    ("metrics", 3),
    ("health", 3),
    ("lifecycle", 3),
    ("attribution", 3),
    ("backend", 3),
    ("sources", 4),
    ("journal", 4),
    ("snapshot", 4),
    ("serve", 4),
    ("probe", 4),
    ("remediation", 4),
    ("kube", 4),
    ("daemon", 5),
    ("cli", 5),
    ("", 6),
];

fn layer_of(module: &str) -> u32 {
    LAYERS
        .iter()
        .filter(|(prefix, _)| prefix.is_empty() || module == *prefix || module.starts_with(&format!("{prefix}::")))
        .max_by_key(|(prefix, _)| prefix.len())
        .map(|(_, layer)| *layer)
        .unwrap_or(6)
}

#[test]
fn every_import_goes_down_the_layers_or_stays_in_its_own() {
    let modules = modules();
    let edges = imports(&modules);
    let upward: Vec<String> = edges
        .iter()
        .flat_map(|(module, targets)| targets.iter().map(move |t| (module, t)))
        .filter(|(module, target)| layer_of(target) > layer_of(module))
        .map(|(module, target)| {
            format!(
                "{module} (layer {}) imports {target} (layer {})",
                layer_of(module),
                layer_of(target)
            )
        })
        .collect();
    assert!(upward.is_empty(), "imports against the layers:\n{}", upward.join("\n"));
    // Every module has a place in the table other than the catch-all top.
    let unplaced: Vec<&String> = modules
        .keys()
        .filter(|m| layer_of(m) == 6 && !matches!(m.as_str(), "" | "main"))
        .collect();
    assert!(unplaced.is_empty(), "modules missing from LAYERS: {unplaced:?}");
}

#[test]
fn vendor_libraries_are_called_only_under_backend() {
    let modules = modules();
    let outside: Vec<&String> = modules
        .iter()
        .filter(|(m, text)| !m.starts_with("backend") && text.contains("nvml_wrapper"))
        .map(|(m, _)| m)
        .collect();
    assert!(outside.is_empty(), "NVML called outside backend/: {outside:?}");
}

#[test]
fn the_layer_table_reads_prefixes_as_modules() {
    assert_eq!(layer_of("xid::kmsg"), 2);
    assert_eq!(layer_of("probe::cuda"), 4);
    assert_eq!(layer_of("backend::nvml::events"), 3);
    assert_eq!(layer_of("cli::check"), 5);
    assert_eq!(layer_of("storeroom"), 6, "a prefix must end at a module boundary");
}

/// Each source file under src/ with its text up to its tests module.
fn source_files() -> Vec<(std::path::PathBuf, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = Vec::new();
    let mut stack = vec![root];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().and_then(|e| e.to_str()) == Some("rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                let text = text.split("#[cfg(test)]").next().unwrap_or("").to_string();
                out.push((path, text));
            }
        }
    }
    out.sort();
    out
}

/// The top of src/ is main, lib, the daemon's wiring and what is truly shared; everything
/// else lives in the folder of its pipeline stage.
#[test]
fn the_top_of_src_holds_at_most_twelve_files() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let top: Vec<String> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().and_then(|e| e.to_str()) == Some("rs"))
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert!(top.len() <= 12, "{} files at the top of src/: {top:?}", top.len());
}

/// Each `fn` with a body and the number of lines from its signature to its closing brace
/// (rustfmt closes a body at the signature's indentation).
fn function_lengths(text: &str) -> Vec<(String, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        let signature = trimmed
            .trim_start_matches("pub(crate) ")
            .trim_start_matches("pub(super) ")
            .trim_start_matches("pub ")
            .trim_start_matches("const ")
            .trim_start_matches("async ")
            .trim_start_matches("unsafe ")
            .trim_start_matches("extern \"C\" ");
        if !signature.starts_with("fn ") {
            continue;
        }
        // A declaration without a body (in a trait): its signature ends with `;` before any `{`.
        let signature_end = lines[i..]
            .iter()
            .find(|l| l.contains('{') || l.trim_end().ends_with(';'));
        if signature_end.is_none_or(|l| !l.contains('{')) {
            continue;
        }
        let close = format!("{}}}", " ".repeat(indent));
        let Some(end) = lines[i..]
            .iter()
            .position(|l| *l == close || l.starts_with(&format!("{close} ")))
        else {
            continue;
        };
        let name = signature[3..].split(['(', '<']).next().unwrap_or("").to_string();
        out.push((name, end + 1));
    }
    out
}

/// The reader of function lengths finds a long one and leaves a short one alone.
#[test]
fn the_function_reader_counts_lines_to_the_closing_brace() {
    let body = "    x();\n".repeat(90);
    let text = format!(
        "trait T {{\n    fn declared(&self);\n}}\n\nfn short() {{\n    y();\n}}\n\npub async fn long() {{\n{body}}}\n"
    );
    assert_eq!(
        function_lengths(&text),
        [("short".to_string(), 3), ("long".to_string(), 92)]
    );
}

#[test]
fn no_error_is_a_bare_string() {
    let bare: Vec<String> = source_files()
        .iter()
        .filter(|(_, text)| text.contains(", String>") && text.contains("Result<"))
        .flat_map(|(path, text)| {
            text.lines()
                .filter(|l| l.contains("Result<") && l.contains(", String>"))
                .map(move |l| format!("{}: {}", path.display(), l.trim()))
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(bare.is_empty(), "Result<_, String>:\n{}", bare.join("\n"));
}

/// Each GPU's service state has one writer: nothing outside src/lifecycle/ holds a `Versioned`
/// of one of its parts (the owner's own is private), so every change is a command it applies.
#[test]
fn only_the_lifecycle_writes_the_service_state() {
    let parts = [
        "Clears",
        "KnownBoards",
        "BoardSwaps",
        "Validations",
        "SchedulerReport",
        "ServiceState",
    ];
    let held: Vec<String> = source_files()
        .into_iter()
        .filter(|(path, _)| !path.components().any(|c| c.as_os_str() == "lifecycle"))
        .flat_map(|(path, text)| {
            text.lines()
                .filter(|line| {
                    let code = line.split("//").next().unwrap_or_default();
                    code.contains("Versioned<") && parts.iter().any(|part| code.contains(part))
                })
                .map(|line| format!("{}: {}", path.display(), line.trim()))
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(
        held.is_empty(),
        "service state written outside lifecycle/:\n{}",
        held.join("\n")
    );
    let owner = read("src/lifecycle/mod.rs");
    assert!(
        owner.contains("pub struct Lifecycle {\n    state: Versioned<ServiceState>,"),
        "the owner's value is private to it"
    );
}

/// The stages run one way: sources/ (stage 1) reads the world and hands each round on through
/// a sink it is given and the polled GPUs through a versioned value, and imports nothing of
/// snapshot/ (stage 2) or the consumers after it. Before, the poller held the publisher and
/// three sources read the published snapshot: the one arrow back up.
#[test]
fn the_sources_stage_imports_nothing_from_the_stages_after_it() {
    let modules = modules();
    let edges = imports(&modules);
    let later = ["snapshot", "serve", "journal", "probe", "remediation", "daemon", "cli"];
    let back: Vec<String> = edges
        .iter()
        .filter(|(module, _)| module.as_str() == "sources" || module.starts_with("sources::"))
        .flat_map(|(module, targets)| {
            targets
                .iter()
                .filter(|t| {
                    later
                        .iter()
                        .any(|l| t.as_str() == *l || t.starts_with(&format!("{l}::")))
                })
                .map(move |t| format!("{module} imports {t}"))
        })
        .collect();
    assert!(back.is_empty(), "arrows back up from sources/:\n{}", back.join("\n"));
}

/// journal/ is rooms by concern (its module doc's table): the file (`store/`), what to write
/// (`writer/`), events out (`sinks/`), evidence packets (`report/`); its top holds only the
/// module, the row they share and the commands. Before, 29 files in one folder. The XID
/// outbox is the journal's (its writer's): the XID store only counts and names no part of the
/// journal; before, an event went back and forth between xid/store.rs and xid/outbox.rs.
#[test]
fn the_journal_is_rooms_by_concern() {
    assert!(
        !Path::new(env!("CARGO_MANIFEST_DIR")).join("src/xid/outbox.rs").exists(),
        "the XID outbox belongs to the journal (journal/writer/xid_outbox.rs)"
    );
    let store = read("src/xid/store.rs");
    assert!(
        !store.contains("crate::journal") && !store.contains("Outbox"),
        "xid/store.rs uses the journal or an outbox: the store only counts and tells CountedReports"
    );
    let journal = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/journal");
    let mut top: Vec<String> = std::fs::read_dir(&journal)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    top.sort();
    assert_eq!(
        top,
        ["cli.rs", "event.rs", "mod.rs", "report", "sinks", "store", "writer"],
        "src/journal/ holds more than its rooms: give a new file the room of its concern"
    );
    let doc = read("src/journal/mod.rs");
    for room in ["store/", "writer/", "sinks/", "report/"] {
        assert!(
            doc.contains(&format!("| `{room}` |")),
            "the journal's module doc has no row for {room}"
        );
    }
}

/// Each folder's module doc has a row for each of its files and subfolders (generated by
/// scripts/gen/module-files.py from each file's own first doc sentence): a file added without
/// its row fails here. Before, journal/'s table listed 8 of 29 files.
#[test]
fn every_folders_module_doc_lists_its_files() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut missing = Vec::new();
    let mut stack = vec![src];
    while let Some(dir) = stack.pop() {
        let module = dir.join("mod.rs");
        let doc: String = std::fs::read_to_string(&module)
            .unwrap_or_default()
            .lines()
            .take_while(|l| l.starts_with("//!"))
            .map(|l| format!("{l}\n"))
            .collect();
        for entry in std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()) {
            let name = entry.file_name().unwrap().to_string_lossy().into_owned();
            if entry.is_dir() {
                stack.push(entry.clone());
                // src/ itself has lib.rs, not a mod.rs: its folders are the layer diagram's.
                if module.exists() && entry.join("mod.rs").exists() && !doc.contains(&format!("| `{name}/` |")) {
                    missing.push(format!("{}: {name}/", module.display()));
                }
            } else if module.exists()
                && name.ends_with(".rs")
                && name != "mod.rs"
                && !doc.contains(&format!("| `{name}` |"))
            {
                missing.push(format!("{}: {name}", module.display()));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "module docs without a row for (run python3 scripts/gen/module-files.py):\n{}",
        missing.join("\n")
    );
}

/// Health memory lives in health/: the poller hands over raw readings only.
#[test]
fn the_poller_does_not_use_health() {
    let modules = modules();
    let edges = imports(&modules);
    let health: Vec<&String> = edges["sources::poller"]
        .iter()
        .filter(|t| *t == "health" || t.starts_with("health::"))
        .collect();
    assert!(health.is_empty(), "the poller uses {health:?}");
}

/// Health is one stage (issue #68, item 2): the publisher hands it each assembled snapshot in
/// one call, `HealthMemory::judge`, and calls none of its parts itself (the rules, the round's
/// history, the ports' trends, the operator's rules, the debounce).
#[test]
fn the_publisher_calls_the_health_stage_once() {
    let modules = modules();
    let publisher = &modules["snapshot::publisher"];
    assert_eq!(publisher.matches(".judge(").count(), 1, "one call of the health stage");
    for part in [
        "evaluate(",
        "note_round(",
        "note_nics(",
        "annotate(",
        ".debounce(",
        ".custom_rules(",
        "findings(",
    ] {
        assert!(
            !publisher.contains(part),
            "the publisher calls the health stage's {part}"
        );
    }
    let imports = imports(&modules);
    let health: Vec<&String> = imports["snapshot::publisher"]
        .iter()
        .filter(|t| *t == "health" || t.starts_with("health::"))
        .filter(|t| !t.starts_with("health::memory"))
        .collect();
    assert!(health.is_empty(), "the publisher reaches into {health:?}");
}

#[test]
fn no_source_file_is_over_800_lines_outside_its_tests() {
    let long: Vec<String> = source_files()
        .into_iter()
        .map(|(path, text)| (path, text.lines().count()))
        .filter(|(_, lines)| *lines > 800)
        .map(|(path, lines)| format!("{} ({lines} lines)", path.display()))
        .collect();
    assert!(long.is_empty(), "over 800 lines: {long:?}");
}

#[test]
fn no_function_in_src_is_over_80_lines() {
    let long: Vec<String> = source_files()
        .iter()
        .flat_map(|(path, text)| {
            function_lengths(text)
                .into_iter()
                .filter(|(_, n)| *n > 80)
                .map(move |(name, n)| format!("{} {name} ({n} lines)", path.display()))
        })
        .collect();
    assert!(long.is_empty(), "functions over 80 lines:\n{}", long.join("\n"));
}

/// docs/architecture.md's sources table has a row for every entry of the `sources!` registry
/// (src/sources/mod.rs): adding a source without its row fails here.
#[test]
fn the_sources_table_names_every_registry_entry() {
    let registry = read("src/sources/mod.rs");
    let block = registry
        .split("sources! {")
        .nth(1)
        .unwrap()
        .split("\n}")
        .next()
        .unwrap();
    let entries: Vec<&str> = block
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with("///") && l.contains(':'))
        .filter_map(|l| l.split(':').next())
        .collect();
    // Eleven since the service state became one entry (its owner, lifecycle/).
    assert!(entries.len() >= 10, "{entries:?}");
    let doc = read("docs/architecture.md");
    let missing: Vec<&&str> = entries
        .iter()
        .filter(|e| !doc.contains(&format!("| `{e}` |")))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/architecture.md's sources table lacks {missing:?}"
    );
}

/// The layer diagram names every folder of src/, in the row of its layer in `LAYERS`, and the
/// table places folders whole (no module of a folder in another layer than the folder).
#[test]
fn the_layer_diagram_names_every_folder_in_its_layer() {
    let doc = read("docs/architecture.md");
    let diagram = doc.split("```").nth(1).unwrap();
    let mut drawn: BTreeMap<String, u32> = BTreeMap::new();
    let mut row = 0;
    for line in diagram.lines() {
        let mut words = line.split_whitespace();
        if let Some(n) = line
            .starts_with(' ')
            .then(|| words.clone().next())
            .flatten()
            .and_then(|w| w.parse().ok())
        {
            row = n;
        }
        for word in words.by_ref() {
            if let Some(folder) = word
                .strip_suffix('/')
                .filter(|f| f.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
            {
                drawn.entry(folder.to_string()).or_insert(row);
            }
        }
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let wrong: Vec<String> = std::fs::read_dir(src)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| drawn.get(name) != Some(&layer_of(name)))
        .map(|name| {
            format!(
                "{name}/: drawn in {:?}, LAYERS says {}",
                drawn.get(&name),
                layer_of(&name)
            )
        })
        .collect();
    assert!(wrong.is_empty(), "the layer diagram is wrong:\n{}", wrong.join("\n"));
    let per_file: Vec<&str> = LAYERS.iter().map(|(p, _)| *p).filter(|p| p.contains("::")).collect();
    assert!(per_file.is_empty(), "per-file exceptions in LAYERS: {per_file:?}");
}

/// scripts/README.md names every script, and each gpu/ and load/ script is named by a doc (beside
/// the figure it made) or run by another script: scripts/ holds no orphaned experiment.
#[test]
fn every_script_is_listed_and_reproduces_something() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = read("scripts/README.md");
    let docs: String = [
        "README.md",
        "docs/architecture.md",
        "docs/performance.md",
        "docs/validation.md",
    ]
    .iter()
    .chain(
        [
            "docs/health.md",
            "docs/probe.md",
            "docs/testing.md",
            "docs/fleet.md",
            "docs/journal.md",
        ]
        .iter(),
    )
    .map(|p| read(p))
    .collect();
    let mut scripts = Vec::new();
    for folder in ["ci", "gen", "gpu", "load"] {
        for entry in std::fs::read_dir(root.join("scripts").join(folder)).unwrap() {
            let path = entry.unwrap().path();
            if path.is_file() {
                scripts.push((folder, path));
            }
        }
    }
    let texts: Vec<(String, String)> = scripts
        .iter()
        .map(|(_, p)| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read_to_string(p).unwrap_or_default())
        })
        .collect();
    let mut unlisted = Vec::new();
    let mut orphaned = Vec::new();
    for (folder, path) in &scripts {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !readme.contains(&format!("`{name}`")) {
            unlisted.push(name.clone());
        }
        // A Python helper is named by its module: `import metrics_text`.
        let module = name.strip_suffix(".py").map(|stem| format!("import {stem}"));
        // A GPU check is named as the harness runs it: `scripts/gpu/run.sh collective-check`.
        let check = name.strip_suffix(".sh").map(|stem| format!("run.sh {stem}"));
        let named_in = |text: &str| {
            text.contains(&name)
                || module.as_ref().is_some_and(|m| text.contains(m))
                || check.as_ref().is_some_and(|c| text.contains(c))
        };
        let used = named_in(&docs) || texts.iter().any(|(other, text)| *other != name && named_in(text));
        if matches!(*folder, "gpu" | "load") && !used {
            orphaned.push(name);
        }
    }
    assert!(unlisted.is_empty(), "scripts/README.md does not name {unlisted:?}");
    assert!(
        orphaned.is_empty(),
        "no doc or script names {orphaned:?}: archive or delete them"
    );
}
