//! Every language the sandbox runs (issue 14), under every isolation layer: hello world, a stdin
//! program, a compile error, a runtime error, a timeout and a memory blow-up per language, and the
//! compile cache (one compile for identical sources, no cross-talk between different ones).
//!
//! A language whose toolchain is not installed must be reported as unavailable (never run, never
//! silently skipped): `tests/all.sh` installs every toolchain these tests need.

use std::sync::OnceLock;

use codegym_sandbox::lang::Language;
use codegym_sandbox::{ExecRequest, Limits, Sandbox, SandboxConfig, SandboxError};
use env_core::ExecutionResult;

fn sandbox() -> &'static Sandbox {
    static SB: OnceLock<Sandbox> = OnceLock::new();
    SB.get_or_init(|| match Sandbox::new(SandboxConfig::default()) {
        Ok(sb) => sb,
        Err(e) => panic!("sandbox setup failed: {e}"),
    })
}

/// Small limits so that the blow-ups end fast; the JVM gets its own floor for processes.
fn limits() -> Limits {
    Limits {
        cpu_ms: 3_000,
        wall_ms: 20_000,
        memory_bytes: 512 << 20,
        ..Limits::default()
    }
}

async fn run(language: Language, source: &str, stdin: Option<&str>) -> ExecutionResult {
    let req = ExecRequest {
        source: source.to_string(),
        stdin: stdin.map(|s| s.as_bytes().to_vec()),
        limits: Some(limits()),
        language,
        ..ExecRequest::default()
    };
    match sandbox().run(req).await {
        Ok(o) => o,
        Err(e) => panic!("{language}: infrastructure error: {e}"),
    }
}

/// One program per behaviour, for one language.
struct Programs {
    language: Language,
    hello: &'static str,
    /// Reads two integers, prints their sum.
    sum: &'static str,
    compile_error: Option<&'static str>,
    /// Exits non-zero through an uncaught error.
    runtime_error: &'static str,
    spin: &'static str,
    /// Allocates (and touches) far more than the memory limit.
    memory: &'static str,
}

const PROGRAMS: &[Programs] = &[
    Programs {
        language: Language::Cpp,
        hello: "#include <cstdio>\nint main(){puts(\"hello\");}\n",
        sum: "#include <iostream>\nint main(){long a,b;std::cin>>a>>b;std::cout<<a+b<<\"\\n\";}\n",
        compile_error: Some("int main(){ return undefined_name; }\n"),
        runtime_error: "#include <stdexcept>\nint main(){throw std::runtime_error(\"boom\");}\n",
        spin: "int main(){volatile unsigned long x=0; for(;;) x++;}\n",
        memory: "#include <vector>\n#include <cstdio>\nint main(){std::vector<std::vector<char>> v; for(;;){v.emplace_back(64<<20, 1);} }\n",
    },
    Programs {
        language: Language::C,
        hello: "#include <stdio.h>\nint main(void){puts(\"hello\");return 0;}\n",
        sum: "#include <stdio.h>\nint main(void){long a,b;scanf(\"%ld %ld\",&a,&b);printf(\"%ld\\n\",a+b);return 0;}\n",
        compile_error: Some("int main(void){ return undefined_name; }\n"),
        runtime_error: "#include <stdlib.h>\nint main(void){abort();}\n",
        spin: "int main(void){volatile unsigned long x=0; for(;;) x++;}\n",
        memory: "#include <stdlib.h>\n#include <string.h>\nint main(void){for(;;){char*p=malloc(64<<20); if(!p) return 3; memset(p,1,64<<20);}}\n",
    },
    Programs {
        language: Language::Rust,
        hello: "fn main(){println!(\"hello\");}\n",
        sum: "use std::io::Read;\nfn main(){let mut s=String::new();std::io::stdin().read_to_string(&mut s).unwrap();let v:Vec<i64>=s.split_whitespace().map(|x|x.parse().unwrap()).collect();println!(\"{}\",v[0]+v[1]);}\n",
        compile_error: Some("fn main(){ let x: i32 = \"no\"; }\n"),
        runtime_error: "fn main(){ let v: Vec<i32> = Vec::new(); let i = std::env::args().count() + 5; println!(\"{}\", v[i]); }\n",
        spin: "fn main(){ let mut x: u64 = 0; loop { x = unsafe { std::ptr::read_volatile(&x) } + 1; } }\n",
        memory: "fn main(){ let mut v: Vec<Vec<u8>> = Vec::new(); loop { v.push(vec![1u8; 64<<20]); } }\n",
    },
    Programs {
        language: Language::Go,
        hello: "package main\nimport \"fmt\"\nfunc main(){fmt.Println(\"hello\")}\n",
        sum: "package main\nimport \"fmt\"\nfunc main(){var a,b int64; fmt.Scan(&a,&b); fmt.Println(a+b)}\n",
        compile_error: Some("package main\nfunc main(){ x := 1 }\n"),
        runtime_error: "package main\nfunc main(){ panic(\"boom\") }\n",
        spin: "package main\nfunc main(){ x := 0; for { x++ } }\n",
        memory: "package main\nfunc main(){ var v [][]byte; for { b := make([]byte, 64<<20); for i := range b { b[i] = 1 }; v = append(v, b) } }\n",
    },
    Programs {
        language: Language::Java,
        hello: "public class Main { public static void main(String[] a){ System.out.println(\"hello\"); } }\n",
        sum: "import java.util.*;\npublic class Sol { public static void main(String[] a){ Scanner s=new Scanner(System.in); long x=s.nextLong(), y=s.nextLong(); System.out.println(x+y); } }\n",
        compile_error: Some(
            "public class Main { public static void main(String[] a){ int x = \"no\"; } }\n",
        ),
        runtime_error: "public class Main { public static void main(String[] a){ throw new RuntimeException(\"boom\"); } }\n",
        spin: "public class Main { public static void main(String[] a){ long x=0; while(true){ x++; } } }\n",
        memory: "import java.util.*;\npublic class Main { public static void main(String[] a){ List<byte[]> v=new ArrayList<>(); while(true){ v.add(new byte[64<<20]); } } }\n",
    },
    Programs {
        language: Language::NodeJs,
        hello: "console.log('hello');\n",
        sum: "const s=require('fs').readFileSync(0,'utf8').trim().split(/\\s+/).map(Number);console.log(s[0]+s[1]);\n",
        compile_error: None,
        runtime_error: "throw new Error('boom');\n",
        spin: "let x=0; for(;;){x++;}\n",
        memory: "const v=[]; for(;;){ v.push(Buffer.alloc(64<<20, 1)); }\n",
    },
    Programs {
        language: Language::TypeScript,
        hello: "const greeting: string = 'hello';\nconsole.log(greeting);\n",
        sum: "declare const require: any;\nconst s: number[] = require('fs').readFileSync(0,'utf8').trim().split(/\\s+/).map(Number);\nconsole.log(s[0]+s[1]);\n",
        compile_error: Some("let x: number = ;\n"),
        runtime_error: "throw new Error('boom');\n",
        spin: "let x: number = 0; for(;;){x++;}\n",
        memory: "declare const Buffer: any;\nconst v: any[] = []; for(;;){ v.push(Buffer.alloc(64<<20, 1)); }\n",
    },
    Programs {
        language: Language::Bash,
        hello: "echo hello\n",
        sum: "read a b; echo $((a+b))\n",
        compile_error: None,
        runtime_error: "set -e\nfalse\necho unreachable\n",
        spin: "while :; do :; done\n",
        memory: "x=aaaaaaaaaaaaaaaa; while :; do x=\"$x$x\"; done\n",
    },
];

fn available(language: Language) -> bool {
    match sandbox().supports(language) {
        Ok(()) => true,
        Err(SandboxError::LanguageUnavailable { reason, .. }) => {
            panic!("{language} is not installed ({reason}); tests/all.sh installs every toolchain")
        }
        Err(e) => panic!("{language}: {e}"),
    }
}

async fn check_language(p: &Programs) {
    assert!(available(p.language));
    let l = p.language;
    let o = run(l, p.hello, None).await;
    assert_eq!(o.stdout, "hello\n", "{l} hello: {o:?}");
    assert!(o.success(), "{l}: {o:?}");
    assert_eq!(o.compile.is_some(), l.is_compiled(), "{l}: {o:?}");

    let o = run(l, p.sum, Some("20 22\n")).await;
    assert_eq!(o.stdout.trim(), "42", "{l} sum: {o:?}");
    let o = run(l, p.sum, Some("1 1\n")).await;
    assert_ne!(o.stdout.trim(), "42", "{l} sum (failing case)");

    if let Some(bad) = p.compile_error {
        let o = run(l, bad, None).await;
        assert!(o.compile_failed(), "{l} compile error: {o:?}");
        let c = o
            .compile
            .as_deref()
            .unwrap_or_else(|| panic!("{l}: no compile result"));
        assert!(
            !c.stderr.is_empty() && c.stderr.len() <= 16 << 10,
            "{l}: {c:?}"
        );
        assert!(o.exit_code.is_none() && o.stdout.is_empty());
    }

    let o = run(l, p.runtime_error, None).await;
    assert!(
        !o.success() && !o.timed_out && !o.compile_failed(),
        "{l} runtime error: {o:?}"
    );

    let o = run(l, p.spin, None).await;
    assert!(o.timed_out && !o.success(), "{l} spin: {o:?}");

    let o = run(l, p.memory, None).await;
    assert!(!o.success() && !o.compile_failed(), "{l} memory: {o:?}");
    assert!(
        o.memory_exceeded || o.signal.is_some() || o.exit_code != Some(0),
        "{l} memory: {o:?}"
    );
    assert!(
        o.peak_rss_bytes <= (512 << 20) + (64 << 20) || !o.memory_exceeded,
        "{l}: {o:?}"
    );
}

#[tokio::test]
async fn cpp() {
    check_language(&PROGRAMS[0]).await;
}

#[tokio::test]
async fn c() {
    check_language(&PROGRAMS[1]).await;
}

#[tokio::test]
async fn rust() {
    check_language(&PROGRAMS[2]).await;
}

#[tokio::test]
async fn go() {
    check_language(&PROGRAMS[3]).await;
}

#[tokio::test]
async fn java() {
    check_language(&PROGRAMS[4]).await;
}

#[tokio::test]
async fn nodejs() {
    check_language(&PROGRAMS[5]).await;
}

#[tokio::test]
async fn typescript() {
    check_language(&PROGRAMS[6]).await;
}

#[tokio::test]
async fn bash() {
    check_language(&PROGRAMS[7]).await;
}

#[tokio::test]
async fn one_debian_package_interpreters() {
    for (l, src) in [
        (Language::Ruby, "puts 'hello'\n"),
        (Language::Php, "<?php echo \"hello\\n\";\n"),
        (Language::Lua, "print('hello')\n"),
        (Language::Perl, "print \"hello\\n\";\n"),
    ] {
        assert!(available(l));
        let o = run(l, src, None).await;
        assert_eq!(o.stdout, "hello\n", "{l}: {o:?}");
        assert!(o.success() && o.compile.is_none(), "{l}: {o:?}");
    }
}

#[tokio::test]
async fn compile_cache_hits_identical_sources_without_cross_talk() {
    let sb = Sandbox::new(SandboxConfig::default()).expect("sandbox");
    let src = |n: u32| format!("#include <cstdio>\nint main(){{printf(\"%d\\n\", {n});}}\n");
    let req = |s: String| ExecRequest {
        source: s,
        language: Language::Cpp,
        limits: Some(limits()),
        ..ExecRequest::default()
    };
    // Eight identical submissions at once (a GRPO group): one compile.
    let runs = futures::future::join_all((0..8).map(|_| sb.run(req(src(7))))).await;
    for r in &runs {
        let r = r.as_ref().expect("run");
        assert_eq!(r.stdout, "7\n", "{r:?}");
    }
    let s = sb.compile_cache_stats();
    assert_eq!((s.misses, s.hits, s.entries), (1, 7, 1), "{s:?}");
    // A different source compiles anew and prints its own value; the first is still cached.
    let o = sb.run(req(src(8))).await.expect("run");
    assert_eq!(o.stdout, "8\n");
    let o = sb.run(req(src(7))).await.expect("run");
    assert_eq!(o.stdout, "7\n");
    let s = sb.compile_cache_stats();
    assert_eq!((s.misses, s.hits, s.entries), (2, 8, 2), "{s:?}");
    // A compile error is an outcome, cached too: the same bad source compiles once.
    let bad = "int main(){ nope; }\n".to_string();
    let a = sb.run(req(bad.clone())).await.expect("run");
    let b = sb.run(req(bad)).await.expect("run");
    assert!(a.compile_failed() && b.compile_failed());
    assert_eq!(a.compile, b.compile);
    assert_eq!(sb.compile_cache_stats().misses, 3);
}

#[tokio::test]
async fn reserved_names_and_unknown_languages_are_clear_errors() {
    let req = ExecRequest {
        source: "int main(){}".into(),
        language: Language::Cpp,
        files: vec![(
            ".codegym-bin/main".into(),
            b"#!/bin/sh\necho pwned\n".to_vec(),
        )],
        ..ExecRequest::default()
    };
    let e = sandbox().run(req).await.expect_err("reserved path");
    assert!(matches!(e, SandboxError::InvalidPath(_)), "{e}");
    assert!(Language::parse("brainfuck").is_err());
}
