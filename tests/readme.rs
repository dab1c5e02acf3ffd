//! The README's usage program is `examples/readme.rs` (which CI builds with
//! warnings as errors), letter for letter, so the program a user pastes
//! compiles; the crate page's readme stands on its own.

/// The first fenced block of `lang` in `text`.
fn first_block<'a>(text: &'a str, lang: &str) -> &'a str {
    text.split(&format!("```{lang}\n"))
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("a code block")
}

#[test]
fn readme_program_is_the_compiled_example() {
    let root = env!("CARGO_MANIFEST_DIR");
    let readme = std::fs::read_to_string(format!("{root}/README.md")).expect("README");
    let snippet = first_block(&readme, "rust");
    let example = std::fs::read_to_string(format!("{root}/examples/readme.rs")).expect("example");
    let program: String = example
        .lines()
        .skip_while(|l| l.starts_with("//!") || l.is_empty())
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(program.trim_end(), snippet.trim_end());
    assert!(snippet.contains("async fn main()"), "a whole program");
    // Only redquorum, tokio and std: a fresh crate needs nothing else.
    for line in snippet.lines() {
        assert!(
            !line.contains("chrono_tz::") || line.contains("redquorum::chrono_tz::"),
            "{line}"
        );
    }
}

#[test]
fn crate_readme_reads_on_its_own() {
    let root = env!("CARGO_MANIFEST_DIR");
    let manifest = std::fs::read_to_string(format!("{root}/Cargo.toml")).expect("manifest");
    assert!(manifest.contains("readme = \"docs/crate-readme.md\""));
    assert!(
        manifest.contains("\"!/src/model/**\""),
        "the models do not ship"
    );
    for (file, readme) in [
        (
            "docs/crate-readme.md",
            format!("{root}/docs/crate-readme.md"),
        ),
        ("cli/README.md", format!("{root}/cli/README.md")),
    ] {
        let text = std::fs::read_to_string(readme).expect("readme");
        // What does not ship must not be pointed at.
        for word in [
            "make ",
            "docker/",
            "tests/",
            "scripts/",
            "benches/",
            "src/model",
        ] {
            assert!(!text.contains(word), "{file} mentions {word:?}");
        }
    }
    let text = std::fs::read_to_string(format!("{root}/docs/crate-readme.md")).unwrap();
    let crate_program = first_block(&text, "rust");
    let readme = std::fs::read_to_string(format!("{root}/README.md")).unwrap();
    assert_eq!(
        crate_program,
        first_block(&readme, "rust"),
        "the same program"
    );
}

/// Every relative link in the README and the guide (`docs/`) names a file
/// that exists, and the README links every page of the guide.
#[test]
fn doc_links_resolve() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut pages = vec![root.join("README.md")];
    let mut guide: Vec<String> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md") && n != "crate-readme.md")
        .collect();
    guide.sort();
    pages.extend(guide.iter().map(|n| root.join("docs").join(n)));
    let mut checked = 0;
    for page in &pages {
        let text = std::fs::read_to_string(page).expect("page");
        for (i, _) in text.match_indices("](") {
            let target = text[i + 2..].split(')').next().unwrap_or("");
            let path = target.split('#').next().unwrap_or("");
            if path.is_empty() || path.contains("://") {
                continue;
            }
            let file = page.parent().unwrap().join(path);
            assert!(
                file.exists(),
                "{}: link to {target} names no file",
                page.display()
            );
            checked += 1;
        }
    }
    assert!(checked > 10, "only {checked} links");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    for name in guide {
        assert!(
            readme.contains(&format!("](docs/{name})")),
            "the README does not link docs/{name}"
        );
    }
    assert!(
        readme.lines().count() <= 300,
        "the README has {} lines; the guide in docs/ takes the rest",
        readme.lines().count()
    );
}

/// What a first run meets: the README's program reads a node list that can
/// hold a cluster's seeds, its dependency is one that resolves (the crates
/// are not published), it says what `make test` needs and when `init` must
/// run, and `make demo` builds once, in one profile, with cargo's progress.
#[test]
fn the_first_run_is_said_and_built_once() {
    let root = env!("CARGO_MANIFEST_DIR");
    let readme = std::fs::read_to_string(format!("{root}/README.md")).expect("README");
    let program = first_block(&readme, "rust");
    assert!(
        program.contains(".node_list(") && !program.contains(".split(','"),
        "redis+cluster://a,b splits into two members with split(',')"
    );
    let manifest = first_block(&readme, "toml");
    assert!(
        manifest.contains("redquorum = { path = ") && !manifest.contains("redquorum = \""),
        "{manifest}"
    );
    for needed in ["redis-cli", "C compiler", "before any client\ntouches them"] {
        assert!(
            readme.contains(needed),
            "the README does not say {needed:?}"
        );
    }
    let makefile = std::fs::read_to_string(format!("{root}/Makefile")).expect("Makefile");
    let demo = makefile
        .split("\ndemo: ")
        .nth(1)
        .and_then(|rest| rest.split("\n\n").next())
        .expect("the demo target");
    assert!(
        makefile.contains("build --release -p redquorum-demo -p redquorum-cli")
            && demo.contains("$(DEMO_BUILD)")
            && demo.contains("$(DEMO_CLI) scripts/with-nodes.sh"),
        "make demo builds the CLI a second time, silently: {demo}"
    );
    let nodes = std::fs::read_to_string(format!("{root}/scripts/with-nodes.sh")).expect("script");
    assert!(
        nodes.contains("\"$REDQUORUM_CLI\" init"),
        "with-nodes.sh ignores the built CLI"
    );
}
