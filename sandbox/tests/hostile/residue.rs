//! Residue: nothing of one run is left in another's memory. On the warm backend every run is a
//! fork of one server that reads every run's request, so each child starts as a copy of the
//! server's memory: whatever the server kept of earlier requests (its request buffer, its stack),
//! a later run could read. Each run here carries a random marker in the fields a caller controls
//! (`sys.argv`, and injected `vars`), in requests of different lengths, and scans its own readable
//! memory for markers: it must find its own (the scan sees its request) and no other.

use std::collections::BTreeSet;

use codegym_sandbox::{ExecRequest, Limits, ReportSpec};

use super::fixture::{Fixture, limits};

/// Every marker in the run's readable memory (writable or anonymous mappings: the heap, the
/// stack, the interpreter's and the fork loop's data), read through `/proc/self/mem` where the
/// run may open it, else with `ctypes.string_at` (a mapping that cannot be read is skipped).
const SCAN: &str = r#"
import ctypes, os, sys
PREFIX = b'CODEGYM' + b'RESIDUE'  # the needle itself is never followed by a marker's hex
HEX = set(b'0123456789abcdef')
found = set()
try:
    mem = open('/proc/self/mem', 'rb', buffering=0)
except OSError:
    mem = None
def read(addr, size):
    if mem is None:
        return ctypes.string_at(addr, size)
    try:
        mem.seek(addr)
        return mem.read(size)
    except (OSError, OverflowError):
        return b''
maps = open('/proc/self/maps').read().splitlines()
for line in maps:
    fields = line.split()
    lo, hi = (int(x, 16) for x in fields[0].split('-'))
    perms, path = fields[1], (fields[5] if len(fields) > 5 else '')
    if 'r' not in perms or path.startswith('[v'):
        continue
    if path.startswith('/') and 'w' not in perms:
        continue  # a file's own bytes
    step = 1 << 20
    for at in range(lo, hi, step):
        # Overlapping by the marker's length, so one split across two chunks is found.
        chunk = read(at, min(step + 64, hi - at))
        i = chunk.find(PREFIX)
        while i >= 0:
            tail = chunk[i + len(PREFIX):i + len(PREFIX) + 32]
            if len(tail) == 32 and set(tail) <= HEX:
                found.add(tail.decode())
            i = chunk.find(PREFIX, i + 1)
print(' '.join(sorted(found)))
"#;

/// A run whose request carries `marker` after `pad` bytes of argv (and in its `vars` when
/// `in_vars`): the longer its request, the further past a shorter one's end its marker lies.
fn request(marker: &str, pad: usize, in_vars: bool) -> ExecRequest {
    let mut req = ExecRequest::new(SCAN);
    req.data.argv = vec!["x".repeat(pad), format!("CODEGYMRESIDUE{marker}")];
    if in_vars {
        let mut vars = serde_json::Map::new();
        vars.insert("padding".into(), "y".repeat(pad / 2).into());
        vars.insert("secret".into(), format!("CODEGYMRESIDUE{marker}").into());
        req.report = Some(ReportSpec {
            vars,
            variables: false,
        });
    }
    req.limits = Some(Limits {
        cpu_ms: 20_000,
        wall_ms: 120_000,
        ..limits()
    });
    req
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_run_finds_another_runs_request_in_its_memory() {
    let f = Fixture::new();
    let sandbox = &f.sandbox;
    // Waves of 16 at once (the fixture's uids), lengths mixed within each wave and shifted from
    // one wave to the next: shorter requests follow longer ones both into children forked on
    // demand and into those forked ahead between waves.
    for wave in 0..5usize {
        let mut runs = Vec::new();
        for i in 0..16usize {
            let marker = format!("{:032x}", rand::random::<u128>());
            let pad = ((i + wave) % 4) * 7000;
            let req = request(&marker, pad, i % 2 == 1);
            runs.push(async move { (marker, sandbox.run(req).await) });
        }
        for (marker, o) in futures::future::join_all(runs).await {
            let o = o.unwrap_or_else(|e| panic!("infrastructure error: {e}"));
            assert_eq!(o.exit_code, Some(0), "{o:?}");
            let found: BTreeSet<&str> = o.stdout.as_str().split_whitespace().collect();
            assert!(
                found.contains(marker.as_str()),
                "the scan missed the run's own marker {marker}: {o:?}"
            );
            let others: Vec<_> = found.iter().filter(|m| **m != marker).collect();
            assert!(
                others.is_empty(),
                "wave {wave}: a run read other runs' markers {others:?} in its memory"
            );
        }
    }
    f.assert_clean();
}
