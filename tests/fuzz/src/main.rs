//! `hetero-fuzz --parser NAME|all --execs N --seed S [--jobs J]
//! [--timeout-ms T] [--out DIR] [--exec I] [--list]`
//!
//! Exit status: 0 when no input made a parser panic or run past the time
//! limit, 1 when one did, 2 for a bad argument, 3 when a parser hung.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use hetero_fuzz::targets::{TARGETS, Target, find};
use hetero_fuzz::{Options, replay, run};

const USAGE: &str = "usage: hetero-fuzz [--parser NAME|all] [--execs N] [--seed S] [--jobs J] \
                     [--timeout-ms T] [--out DIR] [--exec I] [--list]";

struct Args {
    parser: String,
    opts: Options,
    exec: Option<u64>,
    list: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        parser: "all".into(),
        opts: Options {
            execs: 100_000,
            seed: 1,
            jobs: std::thread::available_parallelism().map_or(1, |n| n.get()),
            timeout: Duration::from_millis(1000),
            out: PathBuf::from("fuzz-failures"),
        },
        exec: None,
        list: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--list" {
            a.list = true;
            continue;
        }
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let num = || {
            value
                .parse::<u64>()
                .map_err(|e| format!("{flag} {value}: {e}"))
        };
        match flag.as_str() {
            "--parser" => a.parser = value.clone(),
            "--execs" => a.opts.execs = num()?,
            "--seed" => a.opts.seed = num()?,
            "--jobs" => a.opts.jobs = num()? as usize,
            "--timeout-ms" => a.opts.timeout = Duration::from_millis(num()?),
            "--out" => a.opts.out = PathBuf::from(&value),
            "--exec" => a.exec = Some(num()?),
            _ => return Err(format!("unknown argument {flag}")),
        }
    }
    Ok(a)
}

fn chosen(parser: &str) -> Result<Vec<&'static Target>, String> {
    if parser == "all" {
        return Ok(TARGETS.iter().collect());
    }
    parser
        .split(',')
        .map(|p| find(p).ok_or_else(|| format!("no parser `{p}`; --list names them")))
        .collect()
}

fn main() -> ExitCode {
    let (args, targets) = match parse_args().and_then(|a| chosen(&a.parser).map(|t| (a, t))) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("hetero-fuzz: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    if args.list {
        for t in TARGETS {
            println!("{:<16} {}", t.name, t.what);
        }
        return ExitCode::SUCCESS;
    }
    if let Some(exec) = args.exec {
        for t in &targets {
            println!("{}: {:?}", t.name, replay(t, &args.opts, exec));
        }
        return ExitCode::SUCCESS;
    }
    println!(
        "{:<16} {:>12} {:>12} {:>12} {:>8} {:>10} {:>10} {:>10}",
        "parser", "execs", "accepted", "refused", "failures", "seconds", "execs/s", "slowest"
    );
    let mut failed = false;
    for t in &targets {
        let r = run(t, &args.opts);
        failed |= !r.failures.is_empty();
        println!(
            "{:<16} {:>12} {:>12} {:>12} {:>8} {:>10.1} {:>10.0} {:>10}",
            t.name,
            r.execs,
            r.accepted,
            r.refused,
            r.failures.len(),
            r.seconds,
            r.execs as f64 / r.seconds.max(1e-9),
            format!("{:.1?}", r.slowest),
        );
    }
    if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
