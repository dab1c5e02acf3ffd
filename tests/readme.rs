//! The README's usage snippet is the code of `examples/readme.rs` (which CI
//! builds), letter for letter, so the snippet a user copies compiles.

#[test]
fn readme_snippet_is_the_compiled_example() {
    let root = env!("CARGO_MANIFEST_DIR");
    let readme = std::fs::read_to_string(format!("{root}/README.md")).expect("README");
    let snippet = readme
        .split("```rust\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("a rust block in the README");
    let example = std::fs::read_to_string(format!("{root}/examples/readme.rs")).expect("example");
    let region = example
        .split("// README: begin\n")
        .nth(1)
        .and_then(|rest| rest.split("    // README: end").next())
        .expect("README markers in the example");
    let unindented: String = region
        .lines()
        .map(|l| l.strip_prefix("    ").unwrap_or(l))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(unindented.trim_end(), snippet.trim_end());
    // Only redquorum, tokio and std: a fresh crate needs nothing else.
    for line in snippet.lines() {
        assert!(
            !line.contains("chrono_tz::") || line.contains("redquorum::chrono_tz::"),
            "{line}"
        );
    }
}
