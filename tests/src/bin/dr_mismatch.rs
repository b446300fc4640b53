//! A rank configured with a different pml dr protocol constant must fail init, not hang.
//!
//! `rmca-run -n 2 --mca pml dr dr_mismatch NAME VALUE`: the last rank sets the MCA parameter
//! `NAME` to `VALUE` in its own environment (the others keep the default) before init. Every
//! rank prints `init failed: <error>` and exits 3 when init fails; `init succeeded` and exit 0
//! otherwise.

use std::process::exit;

fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(name), Some(value)) = (args.next(), args.next()) else {
        eprintln!("usage: dr_mismatch NAME VALUE");
        exit(2);
    };
    let rank: u32 = std::env::var("PMI_RANK")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(0);
    let size: u32 = std::env::var("PMI_SIZE")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(1);
    if rank + 1 == size {
        // Before any other thread exists: nothing else reads the environment concurrently.
        std::env::set_var(format!("RMCA_MCA_{name}"), value);
    }
    match rmca::init() {
        Ok(u) => {
            println!("init succeeded");
            let _ = u.finalize();
        }
        Err(e) => {
            println!("init failed: {e}");
            exit(3);
        }
    }
}
