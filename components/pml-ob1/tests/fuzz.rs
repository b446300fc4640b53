//! The cargo-fuzz target of `fuzz/` on stable Rust, for a bounded time (`RMCA_FUZZ_SECS`,
//! default 2 s; the test script gives it more): random bytes, valid headers of every type
//! with boundary values and payloads, and mutations of them, byte-level and field-level
//! (including RGET key lengths). See `rmca_test_support::fuzz` for the budget, seed and
//! failure report.

use std::path::{Path, PathBuf};

use rmca_pml_ob1::hdr::{parse_any, MatchRepr, Repr, RgetKey, RndvRepr, RGET_FIXED_LEN};
use rmca_test_support::fuzz::{run, Rng, Target};

/// Longest input (libFuzzer's default `-max_len`).
const MAX_LEN: usize = 4096;

fn match_repr(rng: &mut Rng) -> MatchRepr {
    MatchRepr {
        ctx: rng.interesting_u64() as u32,
        tag: rng.interesting_u64() as i32,
        seq: rng.interesting_u64() as u32,
    }
}

fn rndv_repr(rng: &mut Rng) -> RndvRepr {
    RndvRepr {
        hdr: match_repr(rng),
        msg_len: rng.interesting_u64(),
        src_req: rng.interesting_u64(),
        sync: rng.one_in(2),
    }
}

/// A valid header of a random type with boundary values, followed by a payload.
fn header(rng: &mut Rng) -> Vec<u8> {
    let repr = match rng.below(6) {
        0 => Repr::Match(match_repr(rng)),
        1 => Repr::Rndv(rndv_repr(rng)),
        2 => {
            let keys = (0..rng.below(4))
                .map(|_| {
                    let name = *rng.pick(&["shm", "rc", "ud", "tcp", "", "é"]);
                    let n = rng.below(40);
                    RgetKey {
                        btl: name.to_owned(),
                        key: rng.bytes(n),
                    }
                })
                .collect();
            Repr::Rget {
                rndv: rndv_repr(rng),
                addr: rng.interesting_u64(),
                keys,
            }
        }
        3 => Repr::Ack {
            src_req: rng.interesting_u64(),
            dst_req: rng.interesting_u64(),
            wanted: rng.interesting_u64(),
        },
        4 => Repr::Frag {
            dst_req: rng.interesting_u64(),
            offset: rng.interesting_u64(),
        },
        _ => Repr::Fin {
            src_req: rng.interesting_u64(),
            failed: rng.one_in(2),
        },
    };
    let mut b = vec![0u8; repr.header_len()];
    repr.emit(&mut b).expect("generated header emits");
    // RGET carries nothing after its keys; a rendezvous at most its message length.
    let payload = match &repr {
        Repr::Rget { .. } => 0,
        Repr::Rndv(r) => rng.below(100).min(r.msg_len.min(100) as usize),
        _ => rng.below(100),
    };
    let bytes = rng.bytes(payload);
    b.extend(bytes);
    b
}

/// (offset, width) of the little-endian fields of each header type, after the common
/// `type, flags, reserved`.
fn fields(kind: u8) -> &'static [(usize, usize)] {
    const COMMON: [(usize, usize); 3] = [(0, 1), (1, 1), (2, 2)];
    match kind {
        1 => &[COMMON[0], COMMON[1], COMMON[2], (4, 4), (8, 4), (12, 4)],
        2 => &[
            COMMON[0],
            COMMON[1],
            (4, 4),
            (8, 4),
            (12, 4),
            (16, 8),
            (24, 8),
        ],
        3 => &[COMMON[0], COMMON[1], (16, 8), (24, 8), (32, 8), (40, 1)],
        4 => &[COMMON[0], COMMON[1], (4, 8), (12, 8), (20, 8)],
        5 => &[COMMON[0], COMMON[1], (4, 8), (12, 8)],
        6 => &[COMMON[0], COMMON[1], (4, 8)],
        _ => &COMMON,
    }
}

/// Positions of the length fields of an RGET's keys, as (offset, width), as far as they lie
/// inside `b`.
fn rget_key_fields(b: &[u8]) -> Vec<(usize, usize)> {
    let mut v = Vec::new();
    let Some(&n) = b.get(40) else { return v };
    let mut at = RGET_FIXED_LEN;
    for _ in 0..n {
        let Some(&nl) = b.get(at) else { break };
        v.push((at, 1));
        at += 1 + usize::from(nl);
        if at + 2 > b.len() {
            break;
        }
        v.push((at, 2));
        at += 2 + usize::from(u16::from_le_bytes([b[at], b[at + 1]]));
    }
    v
}

/// The structure-aware mutation: set 1 to 3 fields of the header to boundary values or a
/// small step from their value. An RGET key's name or key length usually changes together
/// with the bytes it counts (inserted or removed), so that the key list stays consistent.
fn mutate_header(rng: &mut Rng, b: &mut Vec<u8>) {
    for _ in 0..1 + rng.below(3) {
        let Some(&kind) = b.first() else { return };
        let fixed: Vec<(usize, usize)> = fields(kind).to_vec();
        let keys = if kind == 3 {
            rget_key_fields(b)
        } else {
            Vec::new()
        };
        let f: Vec<(usize, usize)> = fixed
            .iter()
            .chain(&keys)
            .copied()
            .filter(|&(at, w)| at + w <= b.len())
            .collect();
        if f.is_empty() {
            return;
        }
        let (at, w) = *rng.pick(&f);
        let mut old = [0u8; 8];
        old[..w].copy_from_slice(&b[at..at + w]);
        let old = u64::from_le_bytes(old);
        let step = 1 + rng.below(4) as u64;
        let v = match rng.below(4) {
            0 | 1 => rng.interesting_u64(),
            2 => old.wrapping_add(step),
            _ => old.wrapping_sub(step),
        };
        let width_max = if w == 8 {
            u64::MAX
        } else {
            (1u64 << (8 * w)) - 1
        };
        let v = v & width_max;
        b[at..at + w].copy_from_slice(&v.to_le_bytes()[..w]);
        if keys.contains(&(at, w)) && !rng.one_in(4) {
            // Resize what the length counts (bounded, to stay within the input size).
            let old = old as usize;
            let new = (v as usize).min(old + 256);
            b[at..at + w].copy_from_slice(&(new as u64).to_le_bytes()[..w]);
            // The counted bytes follow the field (those of them the input holds).
            let start = at + w;
            let end = start + old.min(b.len() - start);
            if new > old {
                let extra = rng.bytes(new - old);
                b.splice(end..end, extra);
            } else {
                b.drain(end - (old - new).min(end - start)..end);
            }
        }
    }
}

#[test]
fn fuzz_hdr() {
    let t = Target {
        name: "hdr",
        corpus_dir: Some(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("fuzz")
                .join("corpus")
                .join("hdr"),
        ),
        artifact_dir: PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join("fuzz-artifacts")
            .join("pml-ob1-hdr"),
        max_len: MAX_LEN,
        generate: &header,
        structured: &mutate_header,
    };
    let r = run(&t, &rmca_pml_ob1::fuzz::hdr);
    assert!(r.inputs > 0);
}

/// The generator makes valid headers of every type, and the field-level mutation keeps
/// many of them valid (else the fuzzing would stay at the length checks).
#[test]
fn generator_makes_valid_headers() {
    let mut rng = Rng::new(5);
    let mut kinds = [0usize; 7];
    let mut still_valid = 0;
    for _ in 0..3000 {
        let mut b = header(&mut rng);
        let (r, _) = parse_any(&b).unwrap_or_else(|e| panic!("{e}: {b:02x?}"));
        kinds[usize::from(b[0])] += 1;
        if let Repr::Rget { keys, .. } = &r {
            assert_eq!(rget_key_fields(&b).len(), 2 * keys.len());
        }
        mutate_header(&mut rng, &mut b);
        still_valid += usize::from(parse_any(&b).is_ok());
    }
    assert!(kinds[1..].iter().all(|&k| k > 300), "{kinds:?}");
    assert!(still_valid > 1000, "{still_valid}");
}
