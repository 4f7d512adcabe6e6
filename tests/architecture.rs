//! The layers of docs/architecture.md hold: no two source files import each other, directly
//! or through others, and the model (the bottom layer) imports nothing of the crate.
//!
//! Imports are read from the source text: `crate::a::b` paths (also inside `use crate::{..}`
//! groups) and `super::` paths, resolved to the longest module path that is a file. Test
//! modules (`#[cfg(test)]` and after) are left out: tests may reach anywhere.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Module path ("backend::nvml") -> source text without its tests.
fn modules() -> BTreeMap<String, String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = BTreeMap::new();
    let mut stack = vec![root.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().and_then(|e| e.to_str()) != Some("rs") {
                continue;
            }
            let relative = path.strip_prefix(&root).unwrap().with_extension("");
            let mut parts: Vec<String> = relative.iter().map(|p| p.to_string_lossy().into_owned()).collect();
            if matches!(parts.last().map(String::as_str), Some("mod" | "lib" | "main")) {
                parts.pop();
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let text = text.split("#[cfg(test)]").next().unwrap_or("").to_string();
            // Comments may name paths that are not imports.
            let code: String = text
                .lines()
                .map(|l| l.split("//").next().unwrap_or(""))
                .collect::<Vec<_>>()
                .join("\n");
            out.insert(parts.join("::"), code);
        }
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
    for shared in ["poller", "publisher", "backend", "model", "store"] {
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
        edges["poller"].iter().all(|t| !t.starts_with("backend::")),
        "the poller reaches into a backend: {:?}",
        edges["poller"]
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
