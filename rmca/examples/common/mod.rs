//! What the checking examples (coll_check, collv_check, nbcoll_check, dtype_check) share: a
//! [`Checker`] that counts cases and failures on each rank, prints each failure with its rank
//! and sums the failures of a group of cases over the job. Not an example itself (Cargo only
//! takes `examples/*.rs` and `examples/*/main.rs`).
#![allow(dead_code)] // Each example uses the checks it needs.

use rmca::coll::Op;
use rmca::Communicator;

/// Cases and failures of one rank.
pub struct Checker {
    pub world: Communicator,
    pub failures: u32,
    pub cases: u32,
    /// Failures over all ranks already reported by `done`.
    pub reported: u32,
}

impl Checker {
    pub fn new(world: Communicator) -> Self {
        Self {
            world,
            failures: 0,
            cases: 0,
            reported: 0,
        }
    }

    /// `got` must equal `want`; a failure names the first difference.
    pub fn check<T: PartialEq + std::fmt::Debug>(&mut self, name: &str, got: &[T], want: &[T]) {
        self.cases += 1;
        if got == want {
            return;
        }
        self.failures += 1;
        let at = got
            .iter()
            .zip(want)
            .position(|(g, w)| g != w)
            .unwrap_or(got.len().min(want.len()));
        println!(
            "FAIL {name} (rank {}): length {} vs {}, first difference at {at}: got {:?}, expected {:?}",
            self.world.rank(),
            got.len(),
            want.len(),
            got.get(at),
            want.get(at)
        );
    }

    /// `cond` must hold; a failure prints `detail`.
    pub fn ok(&mut self, name: &str, cond: bool, detail: impl std::fmt::Display) {
        self.cases += 1;
        if !cond {
            self.failures += 1;
            println!("FAIL {name} (rank {}): {detail}", self.world.rank());
        }
    }

    /// A call that must fail with an error whose text contains `want`.
    pub fn check_err<T: std::fmt::Debug>(&mut self, name: &str, r: rmca::Result<T>, want: &str) {
        self.cases += 1;
        match r {
            Err(e) if e.to_string().contains(want) => {}
            other => {
                self.failures += 1;
                println!(
                    "FAIL {name} (rank {}): expected an error containing {want:?}, got {other:?}",
                    self.world.rank()
                );
            }
        }
    }

    /// A call that must fail (any error).
    pub fn expect_err<T>(&mut self, name: &str, r: rmca::Result<T>) {
        self.cases += 1;
        if r.is_ok() {
            self.failures += 1;
            println!("FAIL {name} was accepted (rank {})", self.world.rank());
        }
    }

    /// Summarize a group of cases over every rank.
    pub fn done(&mut self, name: &str) {
        let mut total = [0u32];
        self.world
            .allreduce(&[self.failures], &mut total, Op::Sum)
            .expect("allreduce");
        if self.world.rank() == 0 {
            match total[0] - self.reported {
                0 => println!("OK {name}"),
                f => println!("FAIL {name}: {f} failed cases"),
            }
        }
        self.reported = total[0];
    }
}
