//! A short fuzzing run of every parser, for the test suite: a few thousand
//! inputs each, no panic and no hang allowed. The long runs use the
//! `hetero-fuzz` binary (docs/benchmarks.md, Reliability).

use std::time::Duration;

use hetero_fuzz::targets::TARGETS;
use hetero_fuzz::{Options, run};

#[test]
fn every_parser_survives_a_short_run() {
    let out = tempfile::tempdir().unwrap();
    let opts = Options {
        execs: 5000,
        seed: 1,
        jobs: 2,
        // Debug builds on a busy machine: generous, a hang still shows.
        timeout: Duration::from_secs(10),
        out: out.path().to_path_buf(),
    };
    let mut failures = Vec::new();
    for t in TARGETS {
        let r = run(t, &opts);
        assert_eq!(r.execs, opts.execs, "{}", t.name);
        assert!(
            r.accepted > 0,
            "{}: no input was accepted; the seeds do not parse",
            t.name
        );
        assert!(r.refused > 0, "{}: no input was refused", t.name);
        failures.extend(r.failures.iter().map(|f| format!("{}: {f:?}", t.name)));
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
