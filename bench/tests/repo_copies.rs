//! A smoke run of `codegym-bench repo-copies` (2 copies, 1 round): each side measured something
//! (root and podman needed, hence ignored; BENCHMARKS.md runs the real one).

#[test]
#[ignore = "needs root, podman and the codegym-base image; minutes"]
fn a_round_measures_every_side() {
    let bin = env!("CARGO_BIN_EXE_codegym-bench");
    // The benchmark's peer is itself a process started from here.
    #[allow(clippy::disallowed_methods)]
    let out = std::process::Command::new(bin)
        .args(["repo-copies", "--copies", "2", "--rounds", "1"])
        .output()
        .expect("codegym-bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for side in ["codegym", "podman", "fork+exec floor"] {
        let row = stdout
            .lines()
            .find(|l| l.starts_with(&format!("| 1 | {side} |")))
            .unwrap_or_else(|| panic!("no {side} row:\n{stdout}"));
        // Every row has a time to start and to the end of the first command.
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        assert!(
            cells[3].parse::<f64>().is_ok() || cells[3].contains('('),
            "{row}"
        );
        assert_ne!(cells[4], "-", "{row}");
        if side != "fork+exec floor" {
            // Memory and disk per copy were read.
            assert_ne!(cells[6], "-", "{row}");
            assert_ne!(cells[7], "-", "{row}");
        }
    }
}
