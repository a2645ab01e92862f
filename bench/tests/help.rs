//! The benchmark binary's `--help` is user-facing text like `codegym`'s (BENCHMARKS.md sends
//! readers to it): no subcommand's help cites an issue number. The check is the root tidy test's
//! (`tests/support/help_text.rs`).

#[path = "../../tests/support/help_text.rs"]
mod help_text;

#[test]
fn help_cites_no_issue_numbers() {
    let bin = env!("CARGO_BIN_EXE_codegym-bench");
    let commands = help_text::subcommands(bin);
    assert!(
        commands.len() > 3,
        "codegym-bench lists its subcommands: {commands:?}"
    );
    let found = help_text::help_citations(bin);
    assert!(
        found.is_empty(),
        "issue numbers in codegym-bench's help:\n{}",
        found.join("\n")
    );
}
