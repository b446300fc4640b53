//! Failover of pml dr from a UD path killed mid-transfer to a second BTL to the same peer.
//!
//! `rmca-run -n 2 --mca pml dr --mca btl ud,shm,self --mca btl_shm_exclusivity 1024 --mca
//! btl_shm_latency 1000000 --mca btl_ud_fault_blackhole_after N dr_failover [messages]`:
//! shm's exclusivity lowered to ud's keeps both BTLs for the same-node peer, its latency raised
//! puts ud first in dr's failover order, and btl-ud's kill knob black-holes ud after N
//! fragments sent by each process (silently: only pml dr's acks can notice), so dr must fail
//! ud over to shm mid-transfer. Both ranks exchange a verified stream of mixed-size messages
//! (up to 1 MiB) and print `failover messages=N bytes=B errors=E rank=R`; exit 1 if E > 0 or a
//! call failed.

use rmca::framework::rng::mix64;
use std::process::exit;

use rmca::{Request, ANY_TAG};

/// Size and content of message `i` from `src`: content = f(src, i, offset).
fn message(src: usize, i: u64) -> Vec<u8> {
    let key = mix64((src as u64) << 40 ^ i);
    let len = match key % 100 {
        0..=4 => (key >> 8) as usize % (1 << 20),
        5..=29 => (key >> 8) as usize % (64 << 10),
        _ => (key >> 8) as usize % 2048,
    };
    (0..len)
        .map(|o| (mix64(key ^ (o as u64 / 8)) >> ((o % 8) * 8)) as u8)
        .collect()
}

fn main() {
    let count: u64 = match std::env::args().nth(1).map(|a| a.parse()) {
        None => 2000,
        Some(Ok(c)) => c,
        Some(Err(_)) => {
            eprintln!("dr_failover: the argument is a message count");
            exit(2);
        }
    };
    let universe = rmca::init().unwrap_or_else(|e| {
        eprintln!("dr_failover: rmca init failed: {e}");
        exit(1)
    });
    let world = universe.world();
    let (me, n) = (world.rank(), world.size());
    if n != 2 {
        eprintln!("dr_failover: needs exactly 2 ranks");
        exit(2);
    }
    let peer = 1 - me;
    let (mut msgs, mut bytes, mut errors) = (0u64, 0u64, 0u64);
    // Rounds of 16 messages each way, receives pre-posted (ANY_TAG, in order), sends non-blocking.
    let mut i = 0;
    while i < count {
        let hi = count.min(i + 16);
        let want: Vec<Vec<u8>> = (i..hi).map(|k| message(peer, k)).collect();
        let out: Vec<Vec<u8>> = (i..hi).map(|k| message(me, k)).collect();
        let mut bufs: Vec<Vec<u8>> = want.iter().map(|w| vec![0u8; w.len() + 8]).collect();
        let res = rmca::scope(|s| -> rmca::Result<Vec<rmca::Status>> {
            let recvs = bufs
                .iter_mut()
                .map(|b| world.irecv(s, b.as_mut_slice(), peer, ANY_TAG))
                .collect::<rmca::Result<Vec<_>>>()?;
            let sends = out
                .iter()
                .zip(i..)
                .map(|(b, k)| world.isend(s, b.as_slice(), peer, (k % 1000) as i32))
                .collect::<rmca::Result<Vec<_>>>()?;
            let st = Request::wait_all(recvs)?;
            Request::wait_all(sends)?;
            Ok(st)
        });
        let statuses = res.unwrap_or_else(|e| {
            println!(
                "failover messages={msgs} bytes={bytes} errors={} call failed: {e}",
                errors + 1
            );
            exit(1)
        });
        for (((k, w), b), st) in (i..).zip(&want).zip(&bufs).zip(&statuses) {
            msgs += 1;
            bytes += st.bytes as u64;
            if st.tag != (k % 1000) as i32 || st.bytes != w.len() || &b[..w.len()] != w.as_slice() {
                errors += 1;
                eprintln!(
                    "dr_failover: rank {me}: message {k} wrong (len {})",
                    st.bytes
                );
            }
        }
        i = hi;
    }
    println!("failover messages={msgs} bytes={bytes} errors={errors} rank={me}");
    if let Err(e) = universe.finalize() {
        eprintln!("dr_failover: finalize: {e}");
        exit(1);
    }
    if errors > 0 {
        exit(1);
    }
}
