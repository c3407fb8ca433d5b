//! The input generator: a seeded PRNG and byte-level mutations of seed
//! files. Input number `i` of a run depends only on the run's seed, the
//! parser's name and `i`, so any input can be made again on its own
//! ([`input`]), whatever the number of worker threads.

/// SplitMix64: small, fast, and good enough to pick mutations.
pub struct Rng(u64);

impl Rng {
    /// A generator for input `exec` of `parser` in the run seeded `seed`.
    pub fn for_exec(seed: u64, parser: &str, exec: u64) -> Rng {
        let mut h = 0xcbf2_9ce4_8422_2325u64;
        for b in parser.bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        let mut r = Rng(seed ^ h ^ exec.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        r.bits();
        r
    }

    /// The next 64 random bits.
    pub fn bits(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.bits() % n as u64) as usize
    }

    /// A length in `1..=max`, short ones far more often than long ones.
    fn short_len(&mut self, max: usize) -> usize {
        let cap = [4, 16, 64, max][self.below(4)].min(max);
        1 + self.below(cap.max(1))
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// Text that parsers treat specially: numbers at the edges of their types,
/// JSON and RON structure, the enum values of the formats, escapes, a byte
/// order mark and bytes that are not UTF-8.
const TOKENS: &[&[u8]] = &[
    b"NaN",
    b"inf",
    b"-inf",
    b"1e400",
    b"-1e400",
    b"-1",
    b"0",
    b"-0",
    b"0.0",
    b"1e-400",
    b"4294967295",
    b"4294967296",
    b"18446744073709551615",
    b"18446744073709551616",
    b"-9223372036854775809",
    b"99999999999999999999999999999999999999",
    b"null",
    b"true",
    b"false",
    b"\"\"",
    b"[]",
    b"{}",
    b"()",
    b"None",
    b"Some(",
    b"\\u0000",
    b"\\ud800",
    b"\\uDFFF\\uD800",
    b"\\",
    b"\"",
    b"/*",
    b"//",
    b"\r\n",
    b"\n",
    b"\xef\xbb\xbf",
    b"\xff",
    b"\xc3",
    b"\xe2\x82",
    b"\xed\xa0\x80",
    b"\xf4\x90\x80\x80",
    "é€𝄞".as_bytes(),
    b"\"type\":\"measurement\",",
    b"\"type\":\"microbench\",",
    b"\"type\":\"hello\",",
    b"\"type\":\"done\",",
    b"\"status\":\"unsupported\"",
    b"\"status\":\"failed\"",
    b"\"status\":\"timeout\"",
    b"\"status\":\"error\"",
    b"\"verified\":true,",
    b"\"rel_err\":1e9,",
    b"\"order\":\"transposed\"",
    b"\"wt_at\"",
    b"\"f16\"",
    b"\"bf16\"",
    b"\"int8\"",
    b"\"model_type\":\"mixtral\",",
    b"\"model_type\":\"qwen2_moe\",",
    b"\"num_key_value_heads\":7,",
    b"\"intermediate_size\":4000000000,",
    b"\"head_dim\":0,",
    b"\"mlp_only_layers\":[0,1,4294967295],",
    b"\"decoder_sparse_step\":0,",
];

/// Makes input `exec` of `parser`: one to eight stacked mutations of one
/// seed file, now and then spliced with another.
pub fn input(seeds: &[Vec<u8>], seed: u64, parser: &str, exec: u64) -> Vec<u8> {
    let mut rng = Rng::for_exec(seed, parser, exec);
    let mut data = rng.pick(seeds).clone();
    let rounds = 1 + [0, 0, 1, 2, 3, 7][rng.below(6)];
    for _ in 0..rounds {
        mutate(&mut rng, &mut data, seeds);
    }
    data
}

fn mutate(rng: &mut Rng, data: &mut Vec<u8>, seeds: &[Vec<u8>]) {
    if data.is_empty() {
        let token = rng.pick(TOKENS).to_vec();
        data.extend(token);
        return;
    }
    let at = rng.below(data.len());
    match rng.below(10) {
        0 => data[at] ^= 1 << rng.below(8),
        1 => data[at] = interesting_byte(rng),
        2 => {
            let n = rng.short_len(8);
            let bytes: Vec<u8> = (0..n).map(|_| interesting_byte(rng)).collect();
            data.splice(at..at, bytes);
        }
        3 => {
            let n = rng.short_len(data.len() - at);
            data.drain(at..at + n);
        }
        4 => {
            let n = rng.short_len(data.len() - at);
            let copy = data[at..at + n].to_vec();
            let to = rng.below(data.len() + 1);
            data.splice(to..to, copy);
        }
        5 => {
            let other = rng.pick(seeds);
            splice(rng, data, other);
        }
        6 | 7 => {
            let token = rng.pick(TOKENS).to_vec();
            let n = if rng.below(2) == 0 {
                0
            } else {
                rng.short_len(data.len() - at)
            };
            data.splice(at..at + n, token);
        }
        8 => replace_number(rng, data),
        _ => data.truncate(at),
    }
}

/// Replaces a piece of `data` with a piece of `other`.
fn splice(rng: &mut Rng, data: &mut Vec<u8>, other: &[u8]) {
    if other.is_empty() {
        return;
    }
    let from = rng.below(other.len());
    let n = rng.short_len(other.len() - from);
    let at = rng.below(data.len() + 1);
    let cut = if at == data.len() {
        0
    } else {
        rng.short_len(data.len() - at)
    };
    data.splice(at..at + cut, other[from..from + n].iter().copied());
}

/// Replaces the run of digits around a random position with a number
/// token (or does nothing when there is no digit after it).
fn replace_number(rng: &mut Rng, data: &mut Vec<u8>) {
    let at = rng.below(data.len());
    let Some(start) = data[at..]
        .iter()
        .position(u8::is_ascii_digit)
        .map(|p| p + at)
    else {
        return;
    };
    let len = data[start..]
        .iter()
        .take_while(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'-' | b'+'))
        .count();
    let token = rng.pick(&TOKENS[..16]).to_vec();
    data.splice(start..start + len, token);
}

fn interesting_byte(rng: &mut Rng) -> u8 {
    const BYTES: &[u8] = b"\x00\xff\x80\xc0\x7f\"\\{}[](),:;-+.eE0123456789 \n\t";
    if rng.below(4) == 0 {
        rng.bits() as u8
    } else {
        *rng.pick(BYTES)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_depend_only_on_seed_parser_and_index() {
        let seeds = vec![b"{\"a\": [1, 2.5, \"x\"]}".to_vec(), b"(a: 1)".to_vec()];
        for i in 0..200 {
            assert_eq!(input(&seeds, 7, "p", i), input(&seeds, 7, "p", i));
        }
        let differ = (0..200).filter(|&i| input(&seeds, 7, "p", i) != input(&seeds, 8, "p", i));
        assert!(differ.count() > 100);
    }
}
