//! The cargo-fuzz targets of `fuzz/` on stable Rust, for a bounded time (`RMCA_FUZZ_SECS`,
//! default 2 s per target; the test script gives each more): random bytes, valid packets and
//! conversations with boundary values, and mutations of them with checksums recomputed half
//! of the time so that mutated fields get past the integrity checks. See
//! `rmca_test_support::fuzz` for the budget, seed and failure report.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};

use rmca_pml_dr::fuzz::{self, ConnectionHarness};
use rmca_pml_dr::proto::wire::{
    AckRepr, DataRepr, MatchFields, PacketType, ACK_LEN, DATA_HEADER_LEN, FLAG_PAYLOAD_CSUM, MAGIC,
    VERSION,
};
use rmca_pml_dr::proto::{Config, Connection, PathConfig, Transmit};
use rmca_test_support::fuzz::{run, Rng, Target};

/// Longest `parse` input (libFuzzer's default `-max_len`).
const MAX_LEN: usize = 4096;
/// Longest `connection` input: room for a conversation of a few dozen packets.
const MAX_CONVERSATION: usize = 16 * 1024;

fn target<'a>(
    name: &'a str,
    max_len: usize,
    generate: &'a dyn Fn(&mut Rng) -> Vec<u8>,
    structured: &'a dyn Fn(&mut Rng, &mut Vec<u8>),
) -> Target<'a> {
    let fuzz_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    Target {
        name,
        corpus_dir: Some(fuzz_dir.join("corpus").join(name)),
        artifact_dir: PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join("fuzz-artifacts")
            .join(format!("pml-dr-{name}")),
        max_len,
        generate,
        structured,
    }
}

/// CRC32C of `b` with the 4 bytes at `at` taken as zero (the header checksum's definition).
fn crc_with_hole(b: &[u8], at: usize) -> u32 {
    let c = crc32c::crc32c(&b[..at]);
    let c = crc32c::crc32c_append(c, &[0; 4]);
    crc32c::crc32c_append(c, &b[at + 4..])
}

/// Recomputes the checksums of `pkt` if it starts like a DR packet: the header CRC always,
/// the payload CRC when the packet claims one and carries its payload.
fn reseal(pkt: &mut [u8]) {
    if pkt.len() < 4 || pkt[..2] != MAGIC.to_le_bytes() || pkt[2] != VERSION {
        return;
    }
    if (1..=3).contains(&pkt[3]) && pkt.len() >= DATA_HEADER_LEN {
        let len = u32::from_le_bytes(pkt[16..20].try_into().unwrap()) as usize;
        if pkt[4] & FLAG_PAYLOAD_CSUM != 0 && pkt.len() - DATA_HEADER_LEN >= len {
            let c = crc32c::crc32c(&pkt[DATA_HEADER_LEN..DATA_HEADER_LEN + len]);
            pkt[12..16].copy_from_slice(&c.to_le_bytes());
        }
        let c = crc_with_hole(&pkt[..DATA_HEADER_LEN], 8);
        pkt[8..12].copy_from_slice(&c.to_le_bytes());
    } else if pkt.len() >= ACK_LEN {
        let c = crc_with_hole(&pkt[..ACK_LEN], 8);
        pkt[8..12].copy_from_slice(&c.to_le_bytes());
    }
}

/// (offset, width) of every field of a DATA header that a peer chooses (little-endian).
const DATA_FIELDS: &[(usize, usize)] = &[
    (3, 1),  // type
    (4, 1),  // flags
    (5, 1),  // frag_index
    (6, 1),  // frag_count
    (16, 4), // payload_len
    (20, 4), // ctx
    (24, 8), // vfrag_id
    (32, 8), // pkt_num
    (40, 8), // msg_seq
    (48, 8), // msg_len
    (56, 8), // offset
    (64, 4), // src
    (68, 4), // tag
];
/// The same for an ACK/NACK.
const ACK_FIELDS: &[(usize, usize)] = &[
    (3, 1),  // type
    (4, 1),  // flags
    (5, 1),  // frag_count
    (12, 4), // ack_delay_us
    (16, 8), // vfrag_id
    (24, 8), // mask
    (32, 8), // echo_pkt_num
    (40, 8), // msg_seq
];

fn fields_of(pkt: &[u8]) -> &'static [(usize, usize)] {
    match pkt.get(3) {
        Some(1..=3) if pkt.len() >= DATA_HEADER_LEN => DATA_FIELDS,
        Some(_) if pkt.len() >= ACK_LEN => ACK_FIELDS,
        _ => &[],
    }
}

fn read_le(b: &[u8], at: usize, w: usize) -> u64 {
    b[at..at + w]
        .iter()
        .rev()
        .fold(0, |v, &x| v << 8 | u64::from(x))
}

fn write_le(b: &mut [u8], at: usize, w: usize, v: u64) {
    b[at..at + w].copy_from_slice(&v.to_le_bytes()[..w]);
}

/// Sets one field of `pkt` to a boundary value, a small step from its value, or the same
/// field of `donor` (another packet of the input: ids and sequence numbers that match).
fn mutate_field(rng: &mut Rng, pkt: &mut [u8], donor: &[u8]) {
    let fields = fields_of(pkt);
    if fields.is_empty() {
        return;
    }
    let &(at, w) = rng.pick(fields);
    let old = read_le(pkt, at, w);
    let step = 1 + rng.below(8) as u64;
    let v = match rng.below(5) {
        0 | 1 => rng.interesting_u64(),
        2 => old.wrapping_add(step),
        3 => old.wrapping_sub(step),
        _ if donor.len() >= at + w => read_le(donor, at, w),
        _ => rng.next_u64(),
    };
    write_le(pkt, at, w, v);
}

/// The structure-aware mutation of a single packet: change 1 to 3 fields, then reseal.
fn mutate_packet(rng: &mut Rng, pkt: &mut [u8]) {
    let donor = packet(rng);
    for _ in 0..1 + rng.below(3) {
        mutate_field(rng, pkt, &donor);
    }
    reseal(pkt);
}

/// A valid DATA or ACK packet (checksums right) with boundary and random field values.
fn packet(rng: &mut Rng) -> Vec<u8> {
    if rng.one_in(3) {
        let count = 1 + rng.below(64) as u8;
        let ack = AckRepr {
            nack: rng.one_in(4),
            flags: rng.byte() & 0x0f,
            frag_count: count,
            ack_delay_us: rng.interesting_u64() as u32,
            vfrag_id: rng.interesting_u64(),
            mask: rng.interesting_u64() & rmca_pml_dr::proto::wire::full_mask(count.into()),
            echo_pkt_num: rng.interesting_u64(),
            msg_seq: rng.interesting_u64(),
        };
        return ack.to_bytes().to_vec();
    }
    let n = rng.below(300);
    let payload = rng.bytes(n);
    let count = 1 + rng.below(64) as u8;
    let msg_len = rng.interesting_u64().max(payload.len() as u64);
    let csum = rng.one_in(2);
    let r = DataRepr {
        kind: *rng.pick(&[PacketType::Match, PacketType::Rndv, PacketType::Frag]),
        flags: (rng.byte() & 0x05) | if csum { FLAG_PAYLOAD_CSUM } else { 0 },
        frag_index: rng.below(count.into()) as u8,
        frag_count: count,
        payload_crc: if csum { crc32c::crc32c(&payload) } else { 0 },
        payload_len: payload.len() as u32,
        vfrag_id: rng.interesting_u64(),
        pkt_num: rng.interesting_u64(),
        m: MatchFields {
            ctx: rng.interesting_u64() as u32,
            src: rng.interesting_u64() as u32,
            tag: rng.interesting_u64() as i32,
        },
        msg_seq: rng.interesting_u64(),
        msg_len,
        offset: match (msg_len - payload.len() as u64).checked_add(1) {
            Some(room) => rng.interesting_u64() % room,
            None => rng.interesting_u64(),
        },
    };
    let mut b = vec![0; DATA_HEADER_LEN];
    r.emit(&mut b);
    b.extend_from_slice(&payload);
    b
}

#[test]
fn fuzz_parse() {
    let r = run(
        &target(
            "parse",
            MAX_LEN,
            &packet,
            &|r: &mut Rng, d: &mut Vec<u8>| mutate_packet(r, d),
        ),
        &fuzz::parse,
    );
    assert!(r.inputs > 0);
}

/// The op byte that makes the `connection` target take a packet from BTL `btl` (0..3).
fn packet_op(btl: usize) -> u8 {
    [3, 7, 11][btl]
}

/// A conversation with the target's connection: a peer connection (paths small enough that
/// each packet fits one op) sends messages, the target sends and matches, time passes, and
/// packets both ways are delivered, lost, duplicated or reordered. A replica of the target
/// ([`ConnectionHarness`], deterministic) tells what the target transmits, so the peer's
/// acks and data answer it as a real peer would.
fn conversation(rng: &mut Rng) -> Vec<u8> {
    let mut replica = ConnectionHarness::new();
    let peer_paths = [
        PathConfig {
            btl: 0,
            max_send_size: 255,
            need_csum: true,
            need_ack: true,
        },
        PathConfig {
            btl: 1,
            max_send_size: 255,
            need_csum: false,
            need_ack: false,
        },
    ];
    let cfg = Config {
        window: fuzz::CONNECTION_WINDOW,
        ..Config::default()
    };
    let mut peer = Connection::new(replica.now(), cfg, &peer_paths).unwrap();
    let mut out = Vec::new();
    let mut to_target: VecDeque<(usize, Vec<u8>)> = VecDeque::new();
    let mut to_peer: VecDeque<(usize, Vec<u8>)> = VecDeque::new();
    let op = |out: &mut Vec<u8>, replica: &mut ConnectionHarness, ctl: u8, arg: u8, p: &[u8]| {
        out.extend_from_slice(&[ctl, arg]);
        out.extend_from_slice(p);
        replica.step(ctl, arg, p);
    };
    for _ in 0..rng.below(400) {
        let now = replica.now();
        match rng.below(12) {
            0 => {
                let len = match rng.below(4) {
                    0 => rng.below(4) as u64,
                    1 => rng.below(2000) as u64,
                    2 => 1 << rng.below(17),
                    _ => rng.below(200) as u64,
                };
                let m = MatchFields {
                    ctx: 0,
                    src: 1,
                    tag: rng.below(4) as i32,
                };
                let _ = peer.send_message(now, m, len);
            }
            1 => op(&mut out, &mut replica, 0, rng.byte() % 24, &[]),
            2 | 3 => {
                let arg = if rng.one_in(8) {
                    rng.byte()
                } else {
                    rng.byte() % 8
                };
                op(&mut out, &mut replica, 1, arg, &[]);
            }
            4 => op(&mut out, &mut replica, 2, rng.byte(), &[]),
            5..=8 if !to_target.is_empty() => {
                // Mostly in order; sometimes a later packet first, a loss or a duplicate.
                let i = if rng.one_in(5) {
                    rng.below(to_target.len())
                } else {
                    0
                };
                let (btl, pkt) = to_target.remove(i).unwrap();
                if !rng.one_in(10) {
                    op(
                        &mut out,
                        &mut replica,
                        packet_op(btl),
                        pkt.len() as u8,
                        &pkt,
                    );
                }
                if rng.one_in(10) {
                    to_target.push_back((btl, pkt));
                }
            }
            _ if !to_peer.is_empty() => {
                let (btl, pkt) = to_peer.pop_front().unwrap();
                if !rng.one_in(10) {
                    if let Some(a) = peer.handle_packet(now, btl, &pkt) {
                        let placed = a.payload.to_vec();
                        let _ = peer.placed(now, a.token, &placed);
                    }
                }
            }
            _ => {}
        }
        to_peer.extend(replica.take_sent());
        let now = replica.now();
        if peer.poll_timeout().is_some_and(|t| t <= now) {
            peer.handle_timeout(now);
        }
        while let Some(t) = peer.poll_transmit(now) {
            match t {
                Transmit::Data(d) => {
                    let payload: Vec<u8> =
                        (0..d.len).map(|i| (d.offset as usize + i) as u8).collect();
                    let mut pkt = d.seal(&payload).unwrap().to_vec();
                    pkt.extend_from_slice(&payload);
                    peer.local_complete(d.token);
                    to_target.push_back((d.btl, pkt));
                }
                Transmit::Ack { btl, bytes } => to_target.push_back((btl, bytes.to_vec())),
            }
        }
        while let Some(e) = peer.poll_event() {
            if let rmca_pml_dr::proto::Event::IncomingMessage {
                seq, rndv: true, ..
            } = e
            {
                peer.matched(now, seq);
            }
        }
        if out.len() > MAX_CONVERSATION - 300 {
            break;
        }
    }
    out
}

/// Where the packets of a `connection` input are (same framing as the target: `(ctl, arg)`
/// pairs, op 3 followed by `arg` packet bytes).
fn packet_ranges(data: &[u8]) -> Vec<std::ops::Range<usize>> {
    let mut v = Vec::new();
    let mut at = 0;
    while at + 2 <= data.len() {
        let (ctl, arg) = (data[at], usize::from(data[at + 1]));
        at += 2;
        if ctl % 4 == 3 {
            let end = (at + arg).min(data.len());
            v.push(at..end);
            at = end;
        }
    }
    v
}

/// The structure-aware mutation of a conversation: change 1 to 4 fields of its packets
/// (taking values from other packets of it, or boundary values), then reseal every packet.
fn mutate_conversation(rng: &mut Rng, data: &mut [u8]) {
    let packets = packet_ranges(data);
    if !packets.is_empty() {
        for _ in 0..1 + rng.below(4) {
            let r = rng.pick(&packets).clone();
            let donor = data[rng.pick(&packets).clone()].to_vec();
            mutate_field(rng, &mut data[r], &donor);
        }
    }
    for r in packets {
        reseal(&mut data[r]);
    }
}

#[test]
fn fuzz_connection() {
    let r = run(
        &target(
            "connection",
            MAX_CONVERSATION,
            &conversation,
            &|r: &mut Rng, d: &mut Vec<u8>| mutate_conversation(r, d),
        ),
        &fuzz::connection,
    );
    assert!(r.inputs > 0);
}

/// The generators produce what they claim: valid packets and conversations in which the
/// target receives data and acknowledgements it accepts (else the fuzzing stays shallow).
#[test]
fn generators_make_valid_input() {
    let mut rng = Rng::new(3);
    for _ in 0..200 {
        let p = packet(&mut rng);
        assert!(rmca_pml_dr::proto::wire::parse(&p).is_ok(), "{p:02x?}");
        // A changed field with the checksums recomputed gets past the checksum check.
        let mut changed = p.clone();
        changed[20] ^= 1;
        reseal(&mut changed);
        assert!(
            !matches!(
                rmca_pml_dr::proto::wire::parse(&changed),
                Err(rmca_pml_dr::proto::wire::WireError::BadChecksum)
            ),
            "{changed:02x?}"
        );
    }
    let (mut received, mut acked) = (0, 0);
    for _ in 0..50 {
        let input = conversation(&mut rng);
        assert!(input.len() <= MAX_CONVERSATION);
        let mut h = ConnectionHarness::new();
        let mut rest = &input[..];
        while rest.len() >= 2 {
            let (ctl, arg) = (rest[0], rest[1]);
            rest = &rest[2..];
            let mut pkt: &[u8] = &[];
            if ctl % 4 == 3 {
                (pkt, rest) = rest.split_at(usize::from(arg));
            }
            h.step(ctl, arg, pkt);
        }
        let c = h.connection().counters();
        received += c.frags_received;
        acked += c.acks_received;
    }
    eprintln!("received {received} acked {acked}");
    assert!(received > 100 && acked > 100, "{received} {acked}");
}
