//! The library's modules form layers: a module may use only modules of lower layers, so
//! no two import each other, directly or around a cycle. Read from the sources: every
//! `crate::NAME` a module's files mention (comments aside) is an edge. ARCHITECTURE.md
//! draws the same layers.

use std::collections::BTreeMap;
use std::path::Path;

/// The layers, bottom first. A new module goes in the lowest layer above everything it
/// uses.
const LAYERS: &[&[&str]] = &[
    &["error", "convert", "simd"],
    &["spec", "alloc", "dtype", "source", "placement"],
    &["exact", "naive", "npy", "output", "positions"],
    &["reference", "rope", "encode"],
    &["model_config", "weights", "cpu"],
    &["shaders", "alibi", "plot", "inputs"],
    &["gpu", "commands"],
    &["bench"],
];

/// The source of every file of module `name` (`src/NAME.rs` and `src/NAME/**.rs`), without
/// its comments.
fn sources(root: &Path, name: &str) -> Vec<String> {
    let mut files = Vec::new();
    let single = root.join(format!("{name}.rs"));
    if single.exists() {
        files.push(single);
    }
    let mut dirs = vec![root.join(name)];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files
        .iter()
        .map(|f| {
            let text = std::fs::read_to_string(f).unwrap();
            text.lines().map(|l| l.split("//").next().unwrap_or("")).collect::<Vec<_>>().join("\n")
        })
        .collect()
}

/// The modules `text` names as `crate::NAME` or inside `crate::{...}`.
fn used(text: &str, modules: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        let names: Vec<&str> = if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            group[..end].split([',', ' ', '\n', ':']).collect()
        } else {
            vec![rest.split(|c: char| !(c.is_alphanumeric() || c == '_')).next().unwrap_or("")]
        };
        found.extend(names.into_iter().filter(|n| modules.contains(n)).map(str::to_string));
    }
    found
}

#[test]
fn every_module_uses_only_lower_layers() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let layer: BTreeMap<&str, usize> =
        LAYERS.iter().enumerate().flat_map(|(k, l)| l.iter().map(move |m| (*m, k))).collect();
    let modules: Vec<&str> = layer.keys().copied().collect();
    // Every module of the library is in a layer.
    let lib = std::fs::read_to_string(root.join("lib.rs")).unwrap();
    for line in lib.lines() {
        let line = line.trim();
        // `mod NAME;` declares a module of its own file; `mod NAME {` (the doctest pages)
        // is inline.
        let declared = line.strip_prefix("pub mod ").or(line.strip_prefix("mod "));
        if let Some(name) = declared.and_then(|n| n.strip_suffix(';')) {
            assert!(layer.contains_key(name), "src/{name}: in no layer of tests/it/layers.rs");
        }
    }
    let mut wrong = Vec::new();
    for (&name, &k) in &layer {
        for text in sources(&root, name) {
            for other in used(&text, &modules) {
                if other != name && layer[other.as_str()] >= k {
                    wrong.push(format!(
                        "{name} (layer {k}) uses {other} (layer {})",
                        layer[other.as_str()]
                    ));
                }
            }
        }
    }
    wrong.sort();
    wrong.dedup();
    assert!(
        wrong.is_empty(),
        "modules that use their own layer or one above:\n{}",
        wrong.join("\n")
    );
}
