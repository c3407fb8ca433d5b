//! The shared backend suite, run on every processor this build opens here.

use hetero_agent::{OpenOptions, Registry, conformance};
use hetero_test_support::{require, skip};

#[test]
fn every_processor_present_passes_the_shared_suite() {
    let mut reg = Registry::open(&OpenOptions::default(), None);
    for u in &reg.unavailable {
        let what = format!("{} is not tested: {}", u.backend, u.reason);
        match u.backend.as_str() {
            // CI installs PoCL; a missing OpenCL device there is a failure.
            "opencl" => require::OPENCL.skipping(&what),
            _ => eprintln!("skipping: {what}"),
        }
    }
    let ids: Vec<String> = reg.processors().into_iter().map(|p| p.id).collect();
    if cfg!(feature = "cpu") {
        assert!(
            ids.iter().any(|i| i == "cpu:0"),
            "cpu is always present: {ids:?}"
        );
    }
    if cfg!(feature = "sim") {
        assert!(ids.iter().any(|i| i == "npu-sim"), "{ids:?}");
    }
    for b in &mut reg.backends {
        eprintln!("conformance: {}", b.processor().id);
        conformance::check_backend(b.as_mut());
    }
}

#[cfg(feature = "cpu")]
#[test]
fn split_cpu_groups_pass_the_suite_too() {
    let cores = hetero_agent::cpu::topology::allowed_cores();
    if cores.len() < 2 {
        skip!("one core, nothing to split");
    }
    let half = cores.len() / 2;
    let fmt = hetero_agent::cpu::topology::format_list;
    let opts = OpenOptions {
        cpu_groups: Some(format!("{};{}", fmt(&cores[..half]), fmt(&cores[half..]))),
        ..Default::default()
    };
    let mut list = hetero_agent::cpu::open(&opts).unwrap();
    assert_eq!(list.len(), 2);
    assert_eq!(list[1].processor().id, "cpu:1");
    let small = conformance::Options {
        shapes: vec![(7, 129, 33), (129, 7, 1)],
        ..Default::default()
    };
    for b in &mut list {
        conformance::check_backend_with(b.as_mut(), &small);
    }
}
