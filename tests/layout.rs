//! The shape of the code, checked: the modules of the library (`src/`) and
//! of the CLI (`cli/src/`) import each other without cycles, the library's
//! only from their own layer of its Layout list or the layers below, no
//! source file passes 500 lines before its unit tests, and every module file
//! is named in the contributors' Layout list (`src/lib.rs` for the library,
//! `cli/src/main.rs` for the CLI), and every test that tests/nodes-only.txt
//! names exists.
//!
//! Imports are read from `use crate::…` / `use super::…` statements and from
//! `crate::…` paths written in code (comments and doc comments are skipped),
//! up to each file's `#[cfg(test)]`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Most lines a source file may have before its `#[cfg(test)]` module.
const MAX_LINES: usize = 500;

/// One crate under `src/`: its root file and every module file.
struct Crate {
    /// The directory `crate::` paths start from.
    dir: PathBuf,
    /// The root file (`lib.rs`, `main.rs`), which holds the Layout list.
    root: PathBuf,
    /// Every `.rs` file of the crate.
    files: Vec<PathBuf>,
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, skip: Option<&Path>, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .flatten()
        .map(|e| e.path())
        .collect();
    entries.sort();
    for p in entries {
        if Some(p.as_path()) == skip {
            continue;
        }
        if p.is_dir() {
            rust_files(&p, skip, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

fn crates() -> Vec<Crate> {
    let src = src();
    let mut lib = Vec::new();
    rust_files(&src, None, &mut lib);
    let mut crates = vec![Crate {
        dir: src.clone(),
        root: src.join("lib.rs"),
        files: lib,
    }];
    let bin = src.join("../cli/src");
    let mut files = Vec::new();
    rust_files(&bin, None, &mut files);
    crates.push(Crate {
        dir: bin.clone(),
        root: bin.join("main.rs"),
        files,
    });
    crates
}

/// The part of a file before its unit tests (`#[cfg(test)] mod …`).
fn code_part(text: &str) -> &str {
    match text.find("#[cfg(test)]\nmod ") {
        Some(i) => &text[..i],
        None => text,
    }
}

/// The code of a file with comment lines blanked (doc comments included).
fn without_comments(text: &str) -> String {
    code_part(text)
        .lines()
        .map(|l| {
            if l.trim_start().starts_with("//") {
                ""
            } else {
                l
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Expands a use tree such as `a::{b::C, d}` into `a::b::C`, `a::d`.
fn expand(prefix: &str, tree: &str, out: &mut Vec<String>) {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        let path = tree.split(" as ").next().unwrap_or(tree).trim();
        if !path.is_empty() {
            out.push(format!("{prefix}{path}"));
        }
        return;
    };
    let head = &tree[..open];
    let inner = &tree[open + 1..tree.rfind('}').expect("balanced use tree")];
    let (mut depth, mut start) = (0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                expand(&format!("{prefix}{head}"), &inner[start..i], out);
                start = i + 1;
            }
            _ => {}
        }
    }
    expand(&format!("{prefix}{head}"), &inner[start..], out);
}

/// The module paths a file imports: `crate::…` and `super::…` (resolved
/// against the file's own module path) from use statements and code.
fn imports(code: &str, module: &[String]) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    // Code with the use statements taken out, for the paths written inline.
    let mut other = String::new();
    let mut rest = code;
    while let Some(i) = rest.find("use ") {
        let before = rest[..i].chars().last();
        let after = &rest[i + 4..];
        let Some(end) = after.find(';') else { break };
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            other.push_str(&rest[..i + 4]);
            rest = after;
            continue;
        }
        other.push_str(&rest[..i]);
        let tree: String = after[..end]
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        if tree.starts_with("crate::") || tree.starts_with("super::") {
            expand("", &tree, &mut paths);
        }
        rest = &after[end + 1..];
    }
    other.push_str(rest);
    for (i, _) in other.match_indices("crate::") {
        let code = &other;
        let tail: String = code[i..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
            .collect();
        paths.push(tail);
    }
    paths
        .into_iter()
        .map(|p| {
            let segs: Vec<String> = p.split("::").map(str::to_owned).collect();
            match segs.first().map(String::as_str) {
                Some("super") => {
                    let mut base = module[..module.len().saturating_sub(1)].to_vec();
                    base.extend(segs[1..].iter().cloned());
                    base
                }
                _ => segs[1..].to_vec(),
            }
        })
        .collect()
}

/// The file a module path lands in: the deepest module file along it.
fn resolve(dir: &Path, root: &Path, path: &[String]) -> PathBuf {
    let (mut file, mut cur) = (root.to_path_buf(), dir.to_path_buf());
    for seg in path {
        let (flat, nested) = (cur.join(format!("{seg}.rs")), cur.join(seg).join("mod.rs"));
        if flat.exists() {
            file = flat;
        } else if nested.exists() {
            file = nested;
        } else {
            break;
        }
        cur = cur.join(seg);
    }
    file
}

/// A file's module path (`node/connection/link.rs` → `["node", "link"]`).
fn module_of(dir: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(dir).expect("file under its crate");
    let mut segs: Vec<String> = rel
        .with_extension("")
        .iter()
        .map(|s| s.to_string_lossy().into_owned())
        .collect();
    if segs
        .last()
        .is_some_and(|s| s == "mod" || s == "lib" || s == "main")
    {
        segs.pop();
    }
    segs
}

/// Every file's imports, as edges between files.
fn graph(c: &Crate) -> BTreeMap<PathBuf, BTreeSet<PathBuf>> {
    let mut g = BTreeMap::new();
    for file in &c.files {
        let text = std::fs::read_to_string(file).expect("read source");
        let module = module_of(&c.dir, file);
        let edges = imports(&without_comments(&text), &module)
            .iter()
            .map(|p| resolve(&c.dir, &c.root, p))
            .filter(|target| target != file)
            .collect();
        g.insert(file.clone(), edges);
    }
    g
}

/// A cycle in `g`, as the files along it, if there is one.
fn find_cycle(g: &BTreeMap<PathBuf, BTreeSet<PathBuf>>) -> Option<Vec<PathBuf>> {
    fn visit(
        n: &PathBuf,
        g: &BTreeMap<PathBuf, BTreeSet<PathBuf>>,
        state: &mut BTreeMap<PathBuf, u8>,
        stack: &mut Vec<PathBuf>,
    ) -> Option<Vec<PathBuf>> {
        match state.get(n) {
            Some(2) => return None,
            Some(1) => {
                let at = stack.iter().position(|s| s == n).unwrap_or(0);
                let mut cycle = stack[at..].to_vec();
                cycle.push(n.clone());
                return Some(cycle);
            }
            _ => {}
        }
        state.insert(n.clone(), 1);
        stack.push(n.clone());
        for m in g.get(n).into_iter().flatten() {
            if let Some(c) = visit(m, g, state, stack) {
                return Some(c);
            }
        }
        stack.pop();
        state.insert(n.clone(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for n in g.keys() {
        if let Some(c) = visit(n, g, &mut state, &mut Vec::new()) {
            return Some(c);
        }
    }
    None
}

fn show(dir: &Path, files: &[PathBuf]) -> String {
    files
        .iter()
        .map(|f| f.strip_prefix(dir).unwrap_or(f).display().to_string())
        .collect::<Vec<_>>()
        .join(" -> ")
}

#[test]
fn layout_modules_import_without_cycles() {
    for c in crates() {
        let g = graph(&c);
        let edges: usize = g.values().map(BTreeSet::len).sum();
        assert!(
            edges >= c.files.len(),
            "the import reader found only {edges} imports in {} files; it is broken",
            c.files.len()
        );
        if let Some(cycle) = find_cycle(&g) {
            panic!("import cycle: {}", show(&c.dir, &cycle));
        }
    }
}

#[test]
fn layout_cycle_finder_sees_a_cycle() {
    // The checker itself must be able to fail: two files importing each
    // other, and a child importing its parent through `super`.
    let code = "use crate::{a::{B, c::D}, e};\nfn f() { crate::g::h(); }\n";
    let paths = imports(code, &["x".into()]);
    let flat: Vec<String> = paths.iter().map(|p| p.join("::")).collect();
    assert_eq!(flat, ["a::B", "a::c::D", "e", "g::h"]);
    let up = imports("use super::Thing;", &["node".into(), "link".into()]);
    assert_eq!(up, [vec!["node".to_owned(), "Thing".to_owned()]]);
    let (a, b) = (PathBuf::from("a.rs"), PathBuf::from("b.rs"));
    let mut g = BTreeMap::new();
    g.insert(a.clone(), BTreeSet::from([b.clone()]));
    g.insert(b.clone(), BTreeSet::from([a.clone()]));
    assert!(find_cycle(&g).is_some());
    g.insert(b, BTreeSet::new());
    assert!(find_cycle(&g).is_none());
}

/// The layers the Layout list of `root` gives its files: a line
/// `// N file …` starts layer N, and each `//   file …` after it joins
/// it; a folder named (`model/`) holds every file under it.
fn layers(root: &str) -> Vec<(String, u32)> {
    let mut out = Vec::new();
    let mut layer = None;
    for line in root.lines() {
        let Some(rest) = line.strip_prefix("// ") else {
            continue;
        };
        let mut words = rest.split_whitespace();
        let first = words.next().unwrap_or("");
        let name = match first.parse::<u32>() {
            Ok(n) => {
                layer = Some(n);
                words.next().unwrap_or("")
            }
            // An entry is indented by two more spaces than the layer's
            // number (a description's continuation, by many more).
            Err(_) if rest.starts_with("  ") && !rest.starts_with("   ") => first,
            Err(_) => continue,
        };
        if let Some(n) = layer.filter(|_| name.ends_with(".rs") || name.ends_with('/')) {
            out.push((name.to_owned(), n));
        }
    }
    out
}

/// The layer of `file` (relative to the crate's directory) by `layers`.
fn layer_of(layers: &[(String, u32)], file: &str) -> Option<u32> {
    layers
        .iter()
        .find(|(name, _)| name == file || (name.ends_with('/') && file.starts_with(name.as_str())))
        .map(|(_, n)| *n)
}

/// The imports that go up the layers of `layers` (each as `from -> to`).
fn upward(c: &Crate, layers: &[(String, u32)]) -> Vec<String> {
    let rel = |f: &Path| f.strip_prefix(&c.dir).unwrap_or(f).display().to_string();
    let mut up = Vec::new();
    for (from, targets) in graph(c) {
        let Some(low) = layer_of(layers, &rel(&from)) else {
            continue;
        };
        for to in targets {
            if layer_of(layers, &rel(&to)).is_some_and(|high| high > low) {
                up.push(format!("{} -> {}", rel(&from), rel(&to)));
            }
        }
    }
    up
}

/// The library's files import only from their own layer of the Layout list
/// in `src/lib.rs` or from the layers below it.
#[test]
fn layout_files_import_only_from_their_layer_or_below() {
    let lib = crates().into_iter().next().expect("the library");
    let root = std::fs::read_to_string(&lib.root).expect("read lib.rs");
    let layers = layers(&root);
    assert!(
        layers.len() >= lib.files.len() / 2,
        "the Layout list reader found only {} files in layers; it is broken",
        layers.len()
    );
    for file in lib.files.iter().filter(|f| **f != lib.root) {
        let rel = file.strip_prefix(&lib.dir).expect("under the crate");
        let name = rel.display().to_string();
        assert!(
            layer_of(&layers, &name).is_some(),
            "{name} has no layer in the Layout list"
        );
    }
    let up = upward(&lib, &layers);
    assert!(up.is_empty(), "imports up the layers:\n{}", up.join("\n"));
}

#[test]
fn layout_layer_check_sees_an_import_upward() {
    let root = "// 1 a.rs   A.\n//   b.rs   B, said\n//          over two lines.\n// 2 c/     C.\n";
    let layers = layers(root);
    assert_eq!(
        layers,
        [("a.rs".into(), 1), ("b.rs".into(), 1), ("c/".into(), 2)]
    );
    assert_eq!(layer_of(&layers, "c/d.rs"), Some(2));
    let dir = std::env::temp_dir().join(format!("layout-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("c")).expect("temp dir");
    std::fs::write(dir.join("a.rs"), "use crate::c::d::X;\n").expect("write");
    std::fs::write(dir.join("b.rs"), "use crate::a::Y;\n").expect("write");
    std::fs::write(dir.join("c/mod.rs"), "pub mod d;\n").expect("write");
    std::fs::write(dir.join("c/d.rs"), "use crate::b::Z;\n").expect("write");
    std::fs::write(dir.join("lib.rs"), root).expect("write");
    let c = Crate {
        dir: dir.clone(),
        root: dir.join("lib.rs"),
        files: vec![dir.join("a.rs"), dir.join("b.rs"), dir.join("c/d.rs")],
    };
    let up = upward(&c, &layers);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(up, ["a.rs -> c/d.rs"]);
}

#[test]
fn layout_files_stay_under_500_lines_before_their_tests() {
    for c in crates() {
        for file in &c.files {
            let text = std::fs::read_to_string(file).expect("read source");
            let n = code_part(&text).lines().count();
            assert!(
                n <= MAX_LINES,
                "{} has {n} lines before #[cfg(test)] (at most {MAX_LINES}): split it along a seam",
                file.display()
            );
        }
    }
}

/// Where, outside comments and tests, the files under `dirs` of `src/`
/// name one of `words`: `file: word` each.
fn naming(dirs: &[&str], words: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    for dir in dirs {
        let mut files = Vec::new();
        rust_files(&src().join(dir), None, &mut files);
        for file in files {
            let text = std::fs::read_to_string(&file).expect("read source");
            let code = without_comments(&text);
            for word in words.iter().filter(|w| code.contains(**w)) {
                let name = file.strip_prefix(src()).unwrap_or(&file).display();
                found.push(format!("{name}: {word}"));
            }
        }
    }
    found
}

/// The lock core and the waiting code know no primitive built on them:
/// a permit's keys, scripts and release live in `semaphore/` (the lock
/// core reaches them only through `Held`); and a held lock's shared record
/// is made whole before it is shared, never patched in place through
/// `Arc::get_mut` (which silently does nothing once a `Weak` exists).
#[test]
fn layout_lock_core_knows_no_semaphore_and_patches_no_shared_record() {
    let semaphore = ["SlotKeys", "SEMAPHORE_", "semaphore::", "permit:"];
    let found = naming(&["lock", "wait"], &semaphore);
    assert!(
        found.is_empty(),
        "the lock core names the semaphore: {found:?}"
    );
    let found = naming(&["."], &["Arc::get_mut"]);
    assert!(
        found.is_empty(),
        "a shared record patched in place: {found:?}"
    );
}

#[test]
fn layout_list_names_every_module_file() {
    for c in crates() {
        let root = std::fs::read_to_string(&c.root).expect("read root");
        for file in c.files.iter().filter(|f| **f != c.root) {
            let rel = file.strip_prefix(&c.dir).expect("under the crate");
            let name = rel.display().to_string();
            assert!(
                root.contains(&name),
                "{name} is not named in the Layout list of {}",
                c.root.display()
            );
        }
    }
}

/// Every test that tests/nodes-only.txt leaves out of the pass on cluster
/// members exists, in the binary it names (a renamed test would otherwise
/// silently join that pass, or a stale line linger).
#[test]
fn layout_nodes_only_list_names_real_tests() {
    let tests = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let list = std::fs::read_to_string(tests.join("nodes-only.txt")).expect("read the list");
    let mut named = 0;
    for line in list.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (binary, test) = line.split_once(' ').expect("a binary and a test");
        let source = std::fs::read_to_string(tests.join(format!("{binary}.rs")))
            .unwrap_or_else(|e| panic!("nodes-only.txt names binary {binary}: {e}"));
        assert!(
            source.contains(&format!("fn {test}()")),
            "nodes-only.txt names {test}, which is not a test of tests/{binary}.rs"
        );
        named += 1;
    }
    assert!(named > 0, "the list names no test");
}

/// The log event macros whose events an operator's filter selects by
/// target (`debug` and `trace` keep their module's path).
const NAMED_LEVELS: [&str; 3] = ["info!(", "warn!(", "error!("];

/// The targets of `code`'s events at [`NAMED_LEVELS`], each as written
/// after `target:` (`None` for an event that names none).
fn event_targets(code: &str) -> Vec<Option<String>> {
    let mut found = Vec::new();
    for level in NAMED_LEVELS {
        for (at, _) in code.match_indices(level) {
            let before = code[..at].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue;
            }
            let args = code[at + level.len()..].trim_start();
            found.push(args.strip_prefix("target:").map(|rest| {
                let rest = rest.trim_start();
                let end = rest.find(',').unwrap_or(rest.len());
                rest[..end].trim().to_owned()
            }));
        }
    }
    found
}

#[test]
fn layout_events_an_operator_filters_name_their_target() {
    let targets = std::fs::read_to_string(src().join("telemetry/targets.rs")).expect("read");
    let lib = &crates()[0];
    let mut events = 0;
    for file in &lib.files {
        let text = std::fs::read_to_string(file).expect("read source");
        let code = without_comments(code_part(&text));
        for target in event_targets(&code) {
            events += 1;
            let name = target
                .as_deref()
                .and_then(|t| t.strip_prefix("crate::telemetry::targets::"));
            assert!(
                name.is_some_and(|n| targets.contains(&format!("pub const {n}: &str"))),
                "{}: an info, warn or error event with target {target:?}: name one of \
                 src/telemetry/targets.rs (`target: crate::telemetry::targets::NAME,`)",
                file.display()
            );
        }
    }
    assert!(
        events >= 20,
        "only {events} events found: the scan is broken"
    );
    let sample = "tracing::warn!(x = 1, \"a\"); warn!(\n target: crate::telemetry::targets::LOST, \"b\"); eprintln!(\"c\");";
    assert_eq!(
        event_targets(sample),
        [None, Some("crate::telemetry::targets::LOST".to_owned())]
    );
}
