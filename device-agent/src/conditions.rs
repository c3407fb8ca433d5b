//! Measurement conditions read from the operating system: the wall clock,
//! the CPU frequency and the hottest thermal zone, and the host CPU's speed
//! measured directly ([`host_probe_us`]).
//!
//! Every value is optional except the timestamp: a phone shows all of them,
//! a virtual machine often neither frequency scaling nor thermal zones.

use std::path::Path;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use hetero_plan::{Conditions, Stats};

/// Unix time in milliseconds.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Reads the conditions now, without the host speed probe. `cpus` narrows
/// the frequency to those cores (a CPU group); `None` averages every core
/// shown.
pub fn read(cpus: Option<&[usize]>) -> Conditions {
    Conditions {
        timestamp_ms: now_ms(),
        cpu_mhz: cpu_mhz(Path::new("/sys/devices/system/cpu"), cpus)
            .or_else(|| proc_cpuinfo_mhz(Path::new("/proc/cpuinfo"), cpus)),
        temp_c: max_temp_c(Path::new("/sys/class/thermal")),
        host_probe_us: None,
        setup: None,
    }
}

/// [`read`] plus [`host_probe_us`]: the conditions a finished case's row
/// keeps ([`Backend::conditions`](crate::Backend::conditions)).
pub fn read_probed(cpus: Option<&[usize]>) -> Conditions {
    Conditions {
        host_probe_us: host_probe_us(),
        ..read(cpus)
    }
}

/// 64-bit words the probe walks: 16 KiB, inside any core's L1 or L2.
const PROBE_WORDS: usize = 2048;
/// Steps of one probe run: a few microseconds on a 2 GHz core.
const PROBE_STEPS: usize = 2048;
/// Probe runs; the median is kept.
const PROBE_RUNS: usize = 9;

/// The host CPU's speed now, µs: the median of nine timings of a
/// fixed piece of host work, higher when the CPU runs slower.
///
/// The work is what a runtime's host side does between kernels: dependent
/// loads, multiplies and stores over 16 KiB. On a virtual machine the
/// frequency reads constant while the same code runs up to 1.9× slower
/// from one second to the next (on a cloud host with one H100, the runtime's own
/// per-operator bookkeeping took 0.44 µs in some runs and 0.78 µs in
/// others, and the driver's submit and copy costs moved with it). Rows and
/// `hetero run` reports carry the probe so the two can be compared.
/// `None` only if no run was timed.
pub fn host_probe_us() -> Option<f64> {
    let mut words = [0u64; PROBE_WORDS];
    let mut times = [0.0f64; PROBE_RUNS];
    for t in &mut times {
        let start = Instant::now();
        std::hint::black_box(probe_work(&mut words, PROBE_STEPS));
        *t = start.elapsed().as_secs_f64() * 1e6;
    }
    Stats::from_samples(&times).map(|s| s.median_us)
}

/// The probe's work: `steps` dependent read-multiply-write steps over
/// `words` (a power-of-two length), from a fixed start. Returns the last
/// value, so the work cannot be left out.
fn probe_work(words: &mut [u64], steps: usize) -> u64 {
    debug_assert!(words.len().is_power_of_two());
    let mask = words.len() - 1;
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for _ in 0..steps {
        let i = (x >> 40) as usize & mask;
        x = (x ^ words[i]).wrapping_mul(0x2545_F491_4F6C_DD1D) ^ (x >> 29);
        words[i] = x;
    }
    x
}

/// Mean `cpufreq/scaling_cur_freq` (kHz) of the given cores, in MHz.
pub(crate) fn cpu_mhz(sys_cpu: &Path, cpus: Option<&[usize]>) -> Option<f64> {
    let ids: Vec<usize> = match cpus {
        Some(c) => c.to_vec(),
        None => present_cpus(sys_cpu),
    };
    let khz: Vec<f64> = ids
        .iter()
        .filter_map(|c| read_number(&sys_cpu.join(format!("cpu{c}/cpufreq/scaling_cur_freq"))))
        .collect();
    mean(&khz).map(|k| k / 1000.0)
}

/// Mean `cpu MHz` of `/proc/cpuinfo` (x86 shows it; ARM usually does not).
pub(crate) fn proc_cpuinfo_mhz(path: &Path, cpus: Option<&[usize]>) -> Option<f64> {
    let text = std::fs::read_to_string(path).ok()?;
    let mut current: Option<usize> = None;
    let mut mhz = Vec::new();
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        match key.trim() {
            "processor" => current = value.trim().parse().ok(),
            "cpu MHz" => {
                let keep = match (cpus, current) {
                    (None, _) => true,
                    (Some(set), Some(c)) => set.contains(&c),
                    (Some(_), None) => false,
                };
                if keep && let Ok(v) = value.trim().parse::<f64>() {
                    mhz.push(v);
                }
            }
            _ => {}
        }
    }
    mean(&mhz)
}

/// The hottest `thermal_zone*/temp` (millidegrees), in °C.
pub(crate) fn max_temp_c(sys_thermal: &Path) -> Option<f64> {
    let entries = std::fs::read_dir(sys_thermal).ok()?;
    entries
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("thermal_zone"))
        .filter_map(|e| read_number(&e.path().join("temp")))
        // Some zones report nonsense (negative, or sensors that are off).
        .map(|milli| milli / 1000.0)
        .filter(|c| (-40.0..200.0).contains(c))
        .max_by(|a, b| a.total_cmp(b))
}

/// The cores `cpuN` listed under `/sys/devices/system/cpu`.
pub(crate) fn present_cpus(sys_cpu: &Path) -> Vec<usize> {
    let mut ids: Vec<usize> = std::fs::read_dir(sys_cpu)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter_map(|e| {
                    e.file_name()
                        .to_str()?
                        .strip_prefix("cpu")?
                        .parse::<usize>()
                        .ok()
                })
                .collect()
        })
        .unwrap_or_default();
    ids.sort_unstable();
    ids
}

/// A file holding one number.
pub(crate) fn read_number(path: &Path) -> Option<f64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

fn mean(v: &[f64]) -> Option<f64> {
    if v.is_empty() {
        None
    } else {
        Some(v.iter().sum::<f64>() / v.len() as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probe_times_real_work() {
        let t = host_probe_us().expect("timed runs");
        assert!(t.is_finite() && t > 0.0, "probe {t} µs");
        // The work depends on every step: a different length or a
        // different start gives another result.
        let mut a = [0u64; PROBE_WORDS];
        let mut b = [0u64; PROBE_WORDS];
        assert_eq!(probe_work(&mut a, 100), probe_work(&mut b, 100));
        let mut c = [0u64; PROBE_WORDS];
        assert_ne!(
            probe_work(&mut c, 100),
            probe_work(&mut [0u64; PROBE_WORDS], 101)
        );
        assert_ne!(
            probe_work(&mut a, 100),
            probe_work(&mut [0u64; PROBE_WORDS], 100)
        );
    }

    fn tmp(name: &str) -> std::path::PathBuf {
        let p = std::env::temp_dir().join(format!("hetero-cond-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        p
    }

    #[test]
    fn frequency_is_the_mean_of_the_chosen_cores() {
        let root = tmp("freq");
        for (c, khz) in [(0, 1_000_000), (1, 2_000_000), (2, 3_000_000)] {
            let d = root.join(format!("cpu{c}/cpufreq"));
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("scaling_cur_freq"), format!("{khz}\n")).unwrap();
        }
        std::fs::create_dir_all(root.join("cpufreq")).unwrap(); // not a core
        assert_eq!(present_cpus(&root), vec![0, 1, 2]);
        assert_eq!(cpu_mhz(&root, None), Some(2000.0));
        assert_eq!(cpu_mhz(&root, Some(&[1, 2])), Some(2500.0));
        assert_eq!(cpu_mhz(&root, Some(&[7])), None);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn temperature_is_the_hottest_sane_zone() {
        let root = tmp("thermal");
        for (z, t) in [(0, "41000"), (1, "67500"), (2, "-273000")] {
            let d = root.join(format!("thermal_zone{z}"));
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("temp"), t).unwrap();
        }
        assert_eq!(max_temp_c(&root), Some(67.5));
        std::fs::remove_dir_all(&root).unwrap();
        assert_eq!(max_temp_c(&root), None);
    }

    #[test]
    fn proc_cpuinfo_is_parsed_per_core() {
        let root = tmp("cpuinfo");
        let f = root.join("cpuinfo");
        std::fs::write(
            &f,
            "processor\t: 0\ncpu MHz\t\t: 1000.0\n\nprocessor\t: 1\ncpu MHz\t\t: 3000.0\n",
        )
        .unwrap();
        assert_eq!(proc_cpuinfo_mhz(&f, None), Some(2000.0));
        assert_eq!(proc_cpuinfo_mhz(&f, Some(&[1])), Some(3000.0));
        std::fs::remove_dir_all(&root).unwrap();
    }
}
