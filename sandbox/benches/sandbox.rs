//! Sandbox throughput: latency of `print(1)` with all layers on, and executions/s with 2-8 in
//! flight, for each `SitePackages` mode. Run with `cargo bench -p codegym-sandbox --bench sandbox`.

use std::time::Instant;

use codegym_sandbox::{ExecRequest, Sandbox, SandboxConfig, SitePackages};

async fn one(sb: &Sandbox) {
    match sb.run(ExecRequest::new("print(1)")).await {
        Ok(o) if o.stdout == "1\n" => {}
        other => panic!("bad run: {other:?}"),
    }
}

async fn measure(site_packages: SitePackages) {
    let config = SandboxConfig {
        site_packages,
        max_concurrent: 8,
        ..SandboxConfig::default()
    };
    let sb = Sandbox::new(config).unwrap_or_else(|e| panic!("{e}"));
    println!("{}", sb.isolation());
    for _ in 0..5 {
        one(&sb).await;
    }
    let mut lat: Vec<f64> = Vec::new();
    for _ in 0..60 {
        let t = Instant::now();
        one(&sb).await;
        lat.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    lat.sort_by(f64::total_cmp);
    println!(
        "{site_packages:?}: print(1) latency p50 {:.1} ms, p90 {:.1} ms (60 sequential runs)",
        lat[lat.len() / 2],
        lat[lat.len() * 9 / 10]
    );
    for inflight in [2usize, 4, 8] {
        let total = 120;
        let t = Instant::now();
        let mut handles = Vec::new();
        for w in 0..inflight {
            let sb = sb.clone();
            handles.push(tokio::spawn(async move {
                for _ in (w..total).step_by(inflight) {
                    one(&sb).await;
                }
            }));
        }
        for h in handles {
            let _ = h.await;
        }
        println!(
            "{site_packages:?}: {inflight} in flight: {:.0} runs/s ({total} runs)",
            total as f64 / t.elapsed().as_secs_f64()
        );
    }
}

#[tokio::main]
async fn main() {
    for mode in [SitePackages::None, SitePackages::Paths, SitePackages::Full] {
        measure(mode).await;
    }
}
