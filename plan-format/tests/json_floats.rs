//! Regression test for `local_fake_agent_end_to_end`, which failed about
//! one run in four: the fingerprint a profile reported differed from the
//! one of the same dataset read back. `device.json` holds floats (the
//! profile's seconds, run parameters), and serde_json parses floats
//! correctly rounded only with its `float_roundtrip` feature (the
//! workspace turns it on); without it a value can come back one unit in the
//! last place off, and a fingerprint of what was read is not the
//! fingerprint of what was written.

/// xorshift64*, enough to spread values over many binades.
fn next(s: &mut u64) -> u64 {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    s.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

#[test]
fn json_floats_round_trip_bit_for_bit() {
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    let mut bad = Vec::new();
    for i in 0..200_000 {
        // Durations and rates as files hold them: 1e-6 .. 1e6, full mantissa.
        let unit = (next(&mut s) >> 11) as f64 / (1u64 << 53) as f64;
        let x = unit * 10f64.powi((i % 13) - 6);
        let text = serde_json::to_string(&x).unwrap();
        let back: f64 = serde_json::from_str(&text).unwrap();
        if back.to_bits() != x.to_bits() {
            bad.push((x, text, back));
        }
    }
    assert!(
        bad.is_empty(),
        "{} of 200000 floats changed in a JSON round trip, e.g. {:?}",
        bad.len(),
        &bad[..bad.len().min(3)]
    );
}
