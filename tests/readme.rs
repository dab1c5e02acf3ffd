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
