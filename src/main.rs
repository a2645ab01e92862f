//! `codegym`: the command-line front end. It only parses arguments, sets up logging and dispatches to
//! the library crates; see `ARCHITECTURE.md` for where the work happens.

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}

// glibc's malloc took ~17% of the rollout engine's CPU (per-thread arenas, consolidation); with
// jemalloc the engine needs ~15% less CPU per model request for ~3 KiB more per in-flight episode
// (BENCHMARKS.md). Sandboxed children never allocate between clone and exec, so the allocator's
// locks cannot be inherited held.
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;
