//! `codegym`: the command-line front end. It only parses arguments, sets up logging and dispatches to
//! the library crates; see `ARCHITECTURE.md` for where the work happens.

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
