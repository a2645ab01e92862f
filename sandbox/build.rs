//! Builds the warm-fork server's native request loop (`src/warm/fork_loop.c`, issue 17)
//! as a shared object; `warm/server.rs` embeds it and hands it to each fork server it starts.
//! C, not Rust: it is loaded into a Python process by `ctypes` and must link nothing but libc.

use std::env;
use std::path::PathBuf;

fn main() {
    let source = "src/warm/fork_loop.c";
    println!("cargo:rerun-if-changed={source}");
    let out =
        PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("fork_loop.so");
    let compiler = cc::Build::new()
        .opt_level(2)
        .pic(true)
        .warnings(true)
        .extra_warnings(true)
        .warnings_into_errors(true)
        .get_compiler();
    let mut command = compiler.to_command();
    command
        .args(["-std=c11", "-shared", "-o"])
        .arg(&out)
        .arg(source);
    // A build script's tool, not the sandbox's: the one place outside it that starts a process.
    #[allow(clippy::disallowed_methods)]
    let status = command.status();
    match status {
        Ok(s) if s.success() => {}
        Ok(s) => panic!("compiling {source} failed ({s}): {command:?}"),
        Err(e) => panic!("cannot run the C compiler for {source}: {e}: {command:?}"),
    }
}
