//! `hetero-agent`: probes processors and runs sweeps on the device.
fn main() {
    println!("hetero-agent {}", env!("CARGO_PKG_VERSION"));
}
