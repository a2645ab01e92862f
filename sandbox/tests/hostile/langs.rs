//! The hostile programs of `hostile_langs.rs` / `hostile_langs_fresh.rs`, one set per language.

use codegym_sandbox::lang::Language;
use codegym_sandbox::{ExecRequest, Limits};
use env_core::ExecutionResult;

use crate::fixture::Fixture;

/// One language's hostile programs. `probe` tries the network, `/etc/shadow`, writing to
/// `/tmp/codegym-pwned` and `/etc/codegym-pwned`, prints the host secret's variable, then kills
/// its parent and every process it can (`kill -9 -1`); it prints `net:`, `shadow:`, `write:`
/// (twice) and `secret:` lines.
struct Hostile {
    language: Language,
    probe: &'static str,
    fork_bomb: &'static str,
    memory_bomb: &'static str,
    flood: &'static str,
    /// Leaves a detached `sleep 60` behind and exits 0 after printing `parent done`.
    outlive: &'static str,
}

const C_PROBE: &str = r#"#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <unistd.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
int main(void){
  int s = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a; a.sin_family = AF_INET; a.sin_port = htons(53); a.sin_addr.s_addr = inet_addr("1.1.1.1");
  puts(s >= 0 && connect(s, (struct sockaddr*)&a, sizeof a) == 0 ? "net:open" : "net:blocked");
  puts(fopen("/etc/shadow", "r") ? "shadow:read" : "shadow:denied");
  puts(fopen("/tmp/codegym-pwned", "w") ? "write:done" : "write:denied");
  puts(fopen("/etc/codegym-pwned", "w") ? "write:done" : "write:denied");
  const char* e = getenv("CODEGYM_TEST_SECRET"); printf("secret:%s\n", e ? e : "none");
  fflush(stdout); kill(getppid(), SIGKILL); kill(-1, SIGKILL); return 0;
}
"#;

const C_OUTLIVE: &str = "#include <stdio.h>\n#include <unistd.h>\nint main(void){ if(fork()==0){ setsid(); if(fork()==0){ sleep(60); return 0; } return 0; } puts(\"parent done\"); return 0; }\n";

const HOSTILE: &[Hostile] = &[
    Hostile {
        language: Language::C,
        probe: C_PROBE,
        fork_bomb: "#include <unistd.h>\nint main(void){ for(;;) fork(); }\n",
        memory_bomb: "#include <stdlib.h>\n#include <string.h>\nint main(void){ for(;;){ char* p = malloc(32<<20); if(!p) return 3; memset(p, 1, 32<<20); } }\n",
        flood: "#include <stdio.h>\nint main(void){ for(;;) fputs(\"flood flood flood flood\\n\", stdout); }\n",
        outlive: C_OUTLIVE,
    },
    Hostile {
        language: Language::Cpp,
        probe: C_PROBE,
        fork_bomb: "#include <unistd.h>\nint main(){ for(;;) fork(); }\n",
        memory_bomb: "#include <vector>\nint main(){ std::vector<std::vector<char>> v; for(;;) v.emplace_back(32<<20, 1); }\n",
        flood: "#include <iostream>\nint main(){ for(;;) std::cout << \"flood flood flood flood\\n\"; }\n",
        outlive: C_OUTLIVE,
    },
    Hostile {
        language: Language::Rust,
        probe: r#"use std::io::Write;
fn main() {
    let addr = "1.1.1.1:53".parse().unwrap();
    let net = std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_secs(2)).is_ok();
    println!("net:{}", if net { "open" } else { "blocked" });
    println!("shadow:{}", if std::fs::read("/etc/shadow").is_ok() { "read" } else { "denied" });
    for p in ["/tmp/codegym-pwned", "/etc/codegym-pwned"] {
        println!("write:{}", if std::fs::write(p, b"x").is_ok() { "done" } else { "denied" });
    }
    println!("secret:{}", std::env::var("CODEGYM_TEST_SECRET").unwrap_or_default());
    std::io::stdout().flush().unwrap();
    let ppid = std::os::unix::process::parent_id().to_string();
    let _ = std::process::Command::new("/bin/kill").args(["-9", &ppid]).status();
    let _ = std::process::Command::new("/bin/kill").args(["-9", "-1"]).status();
}
"#,
        fork_bomb: "fn main(){ loop { let _ = std::process::Command::new(\"/proc/self/exe\").spawn(); } }\n",
        memory_bomb: "fn main(){ let mut v: Vec<Vec<u8>> = Vec::new(); loop { v.push(vec![1u8; 32<<20]); } }\n",
        flood: "use std::io::Write;\nfn main(){ let mut o = std::io::stdout(); loop { let _ = o.write_all(b\"flood flood flood flood\\n\"); } }\n",
        outlive: "fn main(){ std::process::Command::new(\"/bin/sh\").args([\"-c\", \"setsid sleep 60 &\"]).status().unwrap(); println!(\"parent done\"); }\n",
    },
    Hostile {
        language: Language::Go,
        probe: r#"package main
import ("fmt"; "net"; "os"; "syscall"; "time")
func main() {
	if c, err := net.DialTimeout("tcp", "1.1.1.1:53", 2*time.Second); err == nil { c.Close(); fmt.Println("net:open") } else { fmt.Println("net:blocked") }
	if _, err := os.ReadFile("/etc/shadow"); err == nil { fmt.Println("shadow:read") } else { fmt.Println("shadow:denied") }
	for _, p := range []string{"/tmp/codegym-pwned", "/etc/codegym-pwned"} {
		if os.WriteFile(p, []byte("x"), 0644) == nil { fmt.Println("write:done") } else { fmt.Println("write:denied") }
	}
	fmt.Println("secret:" + os.Getenv("CODEGYM_TEST_SECRET"))
	syscall.Kill(os.Getppid(), syscall.SIGKILL)
	syscall.Kill(-1, syscall.SIGKILL)
}
"#,
        fork_bomb: "package main\nimport \"os/exec\"\nfunc main(){ for { exec.Command(\"/proc/self/exe\").Start() } }\n",
        memory_bomb: "package main\nfunc main(){ var v [][]byte; for { b := make([]byte, 32<<20); for i := range b { b[i] = 1 }; v = append(v, b) } }\n",
        flood: "package main\nimport \"os\"\nfunc main(){ b := []byte(\"flood flood flood flood\\n\"); for { os.Stdout.Write(b) } }\n",
        outlive: "package main\nimport (\"fmt\"; \"os/exec\")\nfunc main(){ exec.Command(\"/bin/sh\", \"-c\", \"setsid sleep 60 &\").Run(); fmt.Println(\"parent done\") }\n",
    },
    Hostile {
        language: Language::Java,
        probe: r#"import java.net.*; import java.nio.file.*;
public class Main { public static void main(String[] a) throws Exception {
  try (Socket s = new Socket()) { s.connect(new InetSocketAddress("1.1.1.1", 53), 2000); System.out.println("net:open"); } catch (Throwable e) { System.out.println("net:blocked"); }
  try { Files.readAllBytes(Paths.get("/etc/shadow")); System.out.println("shadow:read"); } catch (Throwable e) { System.out.println("shadow:denied"); }
  for (String p : new String[]{"/tmp/codegym-pwned", "/etc/codegym-pwned"}) {
    try { Files.write(Paths.get(p), new byte[]{1}); System.out.println("write:done"); } catch (Throwable e) { System.out.println("write:denied"); }
  }
  String s = System.getenv("CODEGYM_TEST_SECRET"); System.out.println("secret:" + (s == null ? "none" : s));
  System.out.flush();
  new ProcessBuilder("/bin/kill", "-9", "-1").start().waitFor();
}}
"#,
        fork_bomb: "public class Main { public static void main(String[] a) { while (true) { new Thread(() -> { try { Thread.sleep(100000); } catch (Exception e) {} }).start(); } } }\n",
        memory_bomb: "import java.util.*;\npublic class Main { public static void main(String[] a){ List<byte[]> v = new ArrayList<>(); while (true) v.add(new byte[32<<20]); } }\n",
        flood: "public class Main { public static void main(String[] a){ while (true) System.out.println(\"flood flood flood flood\"); } }\n",
        outlive: "public class Main { public static void main(String[] a) throws Exception { new ProcessBuilder(\"/bin/sh\", \"-c\", \"setsid sleep 60 &\").start().waitFor(); System.out.println(\"parent done\"); } }\n",
    },
    Hostile {
        language: Language::NodeJs,
        probe: r#"const net = require('net'), fs = require('fs'), cp = require('child_process');
let reported = false;
function done(r) {
  if (reported) return; reported = true;
  console.log('net:' + r);
  try { fs.readFileSync('/etc/shadow'); console.log('shadow:read'); } catch (e) { console.log('shadow:denied'); }
  for (const p of ['/tmp/codegym-pwned', '/etc/codegym-pwned']) {
    try { fs.writeFileSync(p, 'x'); console.log('write:done'); } catch (e) { console.log('write:denied'); }
  }
  console.log('secret:' + (process.env.CODEGYM_TEST_SECRET || 'none'));
  try { process.kill(process.ppid, 'SIGKILL'); } catch (e) {}
  try { cp.execSync('/bin/kill -9 -1'); } catch (e) {}
  process.exit(0);
}
try { const s = net.connect({host: '1.1.1.1', port: 53}); s.on('connect', () => done('open')); s.on('error', () => done('blocked')); } catch (e) { done('blocked'); }
setTimeout(() => done('blocked'), 3000);
"#,
        fork_bomb: "const cp = require('child_process');\nfor (;;) { try { cp.spawn(process.execPath, ['-e', 'setInterval(() => {}, 1000)']).on('error', () => {}); } catch (e) {} }\n",
        memory_bomb: "const v = []; for (;;) v.push(Buffer.alloc(32 << 20, 1));\n",
        flood: "for (;;) { try { require('fs').writeSync(1, 'flood flood flood flood\\n'); } catch (e) {} }\n",
        outlive: "require('child_process').spawn('/bin/sleep', ['60'], {detached: true, stdio: 'ignore'}).unref();\nconsole.log('parent done');\n",
    },
    Hostile {
        language: Language::Bash,
        probe: r#"if (exec 3<>/dev/tcp/1.1.1.1/53) 2>/dev/null; then echo net:open; else echo net:blocked; fi
if cat /etc/shadow >/dev/null 2>&1; then echo shadow:read; else echo shadow:denied; fi
for p in /tmp/codegym-pwned /etc/codegym-pwned; do if (echo x > "$p") 2>/dev/null; then echo write:done; else echo write:denied; fi; done
echo "secret:${CODEGYM_TEST_SECRET:-none}"
kill -9 "$PPID" 2>/dev/null; kill -9 -1 2>/dev/null; true
"#,
        fork_bomb: ":(){ :|:& };:\n",
        memory_bomb: "x=aaaaaaaaaaaaaaaa; while :; do x=\"$x$x\"; done\n",
        flood: "while :; do echo flood flood flood flood; done\n",
        outlive: "(setsid sleep 60 &)\necho parent done\n",
    },
];

fn limits(cpu_ms: u64) -> Limits {
    Limits {
        cpu_ms,
        wall_ms: 30_000,
        memory_bytes: 256 << 20,
        max_processes: 32,
        ..Limits::default()
    }
}

async fn run(f: &Fixture, language: Language, source: &str, cpu_ms: u64) -> ExecutionResult {
    let req = ExecRequest {
        source: source.to_string(),
        language,
        limits: Some(limits(cpu_ms)),
        ..ExecRequest::default()
    };
    f.run_req(req).await
}

async fn check(h: &Hostile) {
    let l = h.language;
    let f = Fixture::new();
    for p in ["/tmp/codegym-pwned", "/etc/codegym-pwned"] {
        let _ = std::fs::remove_file(p);
    }
    let o = run(&f, l, h.probe, 10_000).await;
    let lines: Vec<&str> = o.stdout.lines().collect();
    assert!(lines.contains(&"net:blocked"), "{l} network: {o:?}");
    assert!(lines.contains(&"shadow:denied"), "{l} /etc/shadow: {o:?}");
    assert_eq!(
        lines.iter().filter(|x| **x == "write:denied").count(),
        2,
        "{l} writes outside: {o:?}"
    );
    assert!(lines.iter().any(|x| x.starts_with("secret:")), "{l}: {o:?}");
    for p in ["/tmp/codegym-pwned", "/etc/codegym-pwned"] {
        assert!(!std::path::Path::new(p).exists(), "{l} wrote {p}");
    }

    let o = run(&f, l, h.fork_bomb, 2_000).await;
    assert!(
        !o.success() || o.timed_out || o.exit_code.is_some(),
        "{l} fork bomb: {o:?}"
    );

    let o = run(&f, l, h.memory_bomb, 10_000).await;
    assert!(!o.success(), "{l} memory bomb: {o:?}");

    let o = run(&f, l, h.flood, 2_000).await;
    assert!(o.stdout_truncated && !o.success(), "{l} flood: {o:?}");
    assert!(o.stdout.len() <= limits(0).stdout_cap, "{l} flood cap");

    let o = run(&f, l, h.outlive, 10_000).await;
    assert_eq!(o.stdout.trim(), "parent done", "{l} outlive: {o:?}");
    // The fixture already checked that the detached sleeper did not survive the run.
}

#[tokio::test]
async fn c() {
    check(&HOSTILE[0]).await;
}

#[tokio::test]
async fn cpp() {
    check(&HOSTILE[1]).await;
}

#[tokio::test]
async fn rust() {
    check(&HOSTILE[2]).await;
}

#[tokio::test]
async fn go() {
    check(&HOSTILE[3]).await;
}

#[tokio::test]
async fn java() {
    check(&HOSTILE[4]).await;
}

#[tokio::test]
async fn javascript() {
    check(&HOSTILE[5]).await;
}

#[tokio::test]
async fn bash() {
    check(&HOSTILE[6]).await;
}
