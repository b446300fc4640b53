//! osc-rdma through the MPI C interface: `tests/c/rma.c` (every window flavor, RMA call and
//! synchronization) with `--mca osc rdma` forced, so that no window silently falls back to
//! osc-am, under ob1+shm (CMA) and ob1+rc (soft provider); the merged profile proves the
//! puts and gets moved by RDMA. Under pml dr, which offers no RDMA, forcing osc rdma is
//! refused at window creation with an error that says why (osc-am serves dr's windows, as
//! `c_rma.rs` runs by default); any component forced where it cannot serve gives its own
//! reason. Accumulates to a member of the node are applied by the origin, not sent
//! (`tests/c/rma_acc_count.c`, the profile's message count with and without
//! `osc_rdma_acc_direct`), or posted in the target's slot for it to apply, and those to the
//! origin itself applied in place (the profile's `osc.rdma.*` counters).

use rmca_tests::c::compile;
use rmca_tests::{counter, run_job, take_profile, Job};

#[test]
fn every_call_with_osc_rdma_forced_moves_puts_and_gets_by_rdma() {
    let program = compile("rma", &[]);
    let program = program.to_str().expect("UTF-8 path");
    let configs: [(&str, &[(&str, &str)]); 2] = [
        ("ob1+shm", &[]),
        ("ob1+rc", &[("btl", "rc,self"), ("btl_rc_provider", "soft")]),
    ];
    for (config, extra) in configs {
        for ranks in [1, 2, 3] {
            let json = std::env::temp_dir().join(format!(
                "rmca-osc-rdma-{}-{config}-{ranks}.json",
                std::process::id()
            ));
            let _ = std::fs::remove_file(&json);
            let json_s = json.to_str().expect("UTF-8 temp path").to_owned();
            // Every put and get by RDMA, however small (the default since small_limit is 0;
            // an operation behind a lock request not granted yet goes as a message, a mix
            // tests/tests/c_rma.rs runs too).
            let mut mca: Vec<(&str, &str)> = vec![
                ("osc", "rdma"),
                ("osc_rdma_small_limit", "0"),
                ("profile", "1"),
                ("profile_json", &json_s),
            ];
            mca.extend_from_slice(extra);
            let out = run_job(&Job {
                ranks,
                program,
                args: &[],
                mca: &mca,
                timeout_s: 120,
            });
            assert!(
                out.success() && out.stdout.contains("ok rma:"),
                "rma on {ranks} ranks over {config} with osc rdma failed:\n{}",
                out.text()
            );
            let profile = take_profile(&json, &out);
            for c in ["pml.ob1.osc_rdma_puts", "pml.ob1.osc_rdma_gets"] {
                assert!(
                    counter(&profile, c) > 0,
                    "{c} is 0 over {config} on {ranks} ranks: {profile:#}"
                );
            }
        }
    }
}

/// Run `tests/c/<area>.c` on `ranks` ranks with MCA parameter `param` = `value` and the
/// job's profile on; check that it passed; the merged profile.
fn profiled_run(area: &str, ranks: u64, param: &str, value: &str) -> serde_json::Value {
    let program = compile(area, &[]);
    let program = program.to_str().expect("UTF-8 path");
    // Named by every argument: tests of this file run in parallel, and two of them run one
    // program at one rank count with the same value of different parameters.
    let json = std::env::temp_dir().join(format!(
        "rmca-{area}-{}-{ranks}-{param}-{value}.json",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&json);
    let json_s = json.to_str().expect("UTF-8 temp path").to_owned();
    let out = run_job(&Job {
        ranks: ranks as usize,
        program,
        args: &[],
        mca: &[(param, value), ("profile", "1"), ("profile_json", &json_s)],
        timeout_s: 120,
    });
    assert!(
        out.success() && out.stdout.contains(&format!("ok {area}:")),
        "{area} on {ranks} ranks, {param} {value}:\n{}",
        out.text()
    );
    take_profile(&json, &out)
}

/// Accumulates, fetch-and-ops and compare-and-swaps to a member of the node are applied by
/// the origin (CMA under the target's accumulate word, `osc_rdma_acc_direct`), not sent:
/// `tests/c/rma_acc_count.c` (500 of each per origin, a flush after every call, exact totals)
/// sends a few dozen PML messages in all with it, and two or more per call without it.
#[test]
fn accumulates_to_a_member_of_the_node_send_no_message() {
    const CALLS: u64 = 500;
    for ranks in [2u64, 3] {
        for direct in ["1", "0"] {
            let profile = profiled_run("rma_acc_count", ranks, "osc_rdma_acc_direct", direct);
            let sent = counter(&profile, "pml.ob1.eager");
            let calls = 3 * CALLS * (ranks - 1);
            if direct == "1" {
                assert!(sent < CALLS, "{sent} messages for {calls} direct calls");
            } else {
                assert!(
                    sent > 2 * calls,
                    "{sent} messages for {calls} calls by message"
                );
            }
        }
    }
}

/// Accumulates of one element to a member of the node are posted in the target's slot and
/// applied by the target's progress (rank 1's to rank 0, which waits in its own flushes and
/// serves meanwhile), or claimed back and applied by CMA when it does not answer in time;
/// every one either way. Those to the origin's own memory are applied in place (no loopback
/// message). With `osc_rdma_acc_slot_ns` 0 nothing is posted. (The claim back itself is
/// osc-rdma's unit tests' and proptests'.) The counts are the profile's `osc.rdma.*`,
/// summed over the ranks.
#[test]
fn accumulates_to_a_member_of_the_node_go_through_its_slot_and_to_itself_in_place() {
    const CALLS: u64 = 500;
    // A bound the load cannot reach (with the default's 4 us, a target descheduled by
    // other jobs has every request claimed back, correctly but untested here).
    let profile = profiled_run("rma_acc_count", 2, "osc_rdma_acc_slot_ns", "50000000");
    let n = |name: &str| counter(&profile, &format!("osc.rdma.{name}"));
    let (served, posted, reclaimed) = (
        n("acc_slot_served"),
        n("acc_slot_posted"),
        n("acc_slot_claimed_back"),
    );
    // Rank 1 posts at least 5 per round (accumulate, fetch-and-op, two reads, a
    // compare-and-swap), bar those skipped after a claim back.
    assert!(posted > 0 && served > 0, "{profile:#}");
    assert_eq!(served + reclaimed, posted, "each applied once: {profile:#}");
    // A flush after operations that completed within their calls is the lent path's (no
    // call into the window's module): rank 1 flushes after each of its 5 or more per round.
    assert!(n("lent_flushes") >= CALLS, "lent flushes: {profile:#}");
    // Rank 0 on its own counters.
    assert!(n("acc_self") >= 5 * CALLS, "in place: {profile:#}");
    let profile = profiled_run("rma_acc_count", 2, "osc_rdma_acc_slot_ns", "0");
    let n = |name: &str| counter(&profile, &format!("osc.rdma.{name}"));
    assert_eq!(
        n("acc_slot_posted") + n("acc_slot_served"),
        0,
        "{profile:#}"
    );
    assert!(n("acc_self") >= 5 * CALLS, "{profile:#}");
    // Every accumulate of the origin rank 1 to rank 0 by CMA now.
    assert!(n("acc_cma") >= 5 * CALLS, "{profile:#}");
}

/// A job whose waits yield (`mpi_wait_mode yield`, what `auto` picks on an oversubscribed
/// node) posts no accumulate in a slot: a waiting target gives its core away, so each post
/// would wait out `osc_rdma_acc_slot_ns` before the claim back. The origin applies them by
/// CMA straight away.
#[test]
fn accumulates_skip_the_slots_when_waits_yield() {
    const CALLS: u64 = 500;
    let profile = profiled_run("rma_acc_count", 2, "mpi_wait_mode", "yield");
    let n = |name: &str| counter(&profile, &format!("osc.rdma.{name}"));
    assert_eq!(
        n("acc_slot_posted") + n("acc_slot_served"),
        0,
        "{profile:#}"
    );
    assert!(n("acc_cma") >= 5 * CALLS, "{profile:#}");
}

#[test]
fn osc_rdma_forced_under_pml_dr_is_refused_saying_why() {
    let program = compile("rma", &[]);
    let out = run_job(&Job {
        ranks: 2,
        program: program.to_str().expect("UTF-8 path"),
        args: &[],
        mca: &[("pml", "dr"), ("osc", "rdma")],
        timeout_s: 60,
    });
    assert!(!out.success(), "{}", out.text());
    assert!(
        out.stderr.contains("MPI_Win_create")
            && out
                .stderr
                .contains("osc rdma: it needs RDMA put and get to every member"),
        "{}",
        out.text()
    );
}

/// The refusal names the component the user forced and its own reason, not another's:
/// osc sm forced on `MPI_Win_create`'s window (memory it did not allocate) says so, under
/// ob1, where osc rdma would have served it, with no word of osc rdma.
#[test]
fn another_component_forced_is_refused_with_its_own_reason() {
    let program = compile("rma", &[]);
    let out = run_job(&Job {
        ranks: 2,
        program: program.to_str().expect("UTF-8 path"),
        args: &[],
        mca: &[("osc", "sm")],
        timeout_s: 60,
    });
    assert!(!out.success(), "{}", out.text());
    assert!(
        out.stderr.contains("MPI_Win_create")
            && out
                .stderr
                .contains("osc sm: it serves only windows whose memory it allocates")
            && out.stderr.contains("osc am, left out by the selection")
            && !out.stderr.contains("osc rdma"),
        "{}",
        out.text()
    );
}

/// Puts and gets of contiguous buffers to a member of the node are moved by the origin
/// itself with CMA (`osc_rdma_cma_direct`), not by the PML's RDMA: `tests/c/rma_put_count.c`
/// (500 puts and 500 gets per rank with a flush each, 500 of each in lock/unlock epochs,
/// every result checked) makes no PML transfer for them with it (the derived-datatype put
/// is the one left), and one per call without it. With it, the flushes of the lock_all loop
/// finish on osc-rdma's lent path (the profile's `osc.rdma.lent_flushes`), and the locks of
/// the lock/unlock loop are taken there (`osc.rdma.lent_locks`), none without.
#[test]
fn puts_and_gets_to_a_member_of_the_node_are_moved_by_the_origin() {
    const CALLS: u64 = 1000;
    for ranks in [2u64, 3] {
        for direct in ["1", "0"] {
            let profile = profiled_run("rma_put_count", ranks, "osc_rdma_cma_direct", direct);
            let puts = counter(&profile, "pml.ob1.osc_rdma_puts");
            let gets = counter(&profile, "pml.ob1.osc_rdma_gets");
            // Flushes the C library finished on osc-rdma's lent path, with no call into the
            // window: every put+flush and get+flush of the lock_all loop.
            let lent = counter(&profile, "osc.rdma.lent_flushes");
            // Locks it took on the lent path (an atomic on the target's word, no call into
            // the window): every MPI_Win_lock of the lock/unlock loop, 1000 per rank.
            let locks = counter(&profile, "osc.rdma.lent_locks");
            if direct == "1" {
                assert!(
                    locks >= (CALLS - 2) * ranks,
                    "{locks} locks on the lent path for {CALLS} per rank: {profile:#}"
                );
                assert!(
                    puts <= ranks && gets == 0,
                    "{puts} puts and {gets} gets by the PML with CMA from the origin"
                );
                assert!(
                    lent >= CALLS * ranks,
                    "{lent} flushes on the lent path for {CALLS} per rank: {profile:#}"
                );
            } else {
                assert_eq!(lent + locks, 0, "no lent path without CMA from the origin");
                assert!(
                    puts >= CALLS * ranks && gets >= CALLS * ranks,
                    "{puts} puts and {gets} gets by the PML for {CALLS} calls of each per rank"
                );
            }
        }
    }
}

/// `MPI_Win_flush_local` after a small put to a member of the node copies the put aside on
/// osc-rdma's lent path (the profile's `osc.rdma.staged_puts`), moved by the next flush or
/// unlock: `tests/c/rma_flush_local.c` (puts of 1 byte to 20000, each flushed locally and its
/// buffer overwritten at once, in lock, exclusive lock and lock_all epochs; every byte
/// checked at the target) stages the 84 puts of at most 2 KiB of each of its three epochs
/// and the 200 of its put/flush_local/flush/get rounds with `osc_rdma_cma_direct` (at most:
/// an epoch whose lock the module took, the word busy when asked, may have its flushes go
/// through the module; at least one epoch's each), none without, and passes both ways.
#[test]
fn flush_local_stages_small_puts_and_the_target_gets_the_bytes_put() {
    for ranks in [2u64, 3] {
        for direct in ["1", "0"] {
            let profile = profiled_run("rma_flush_local", ranks, "osc_rdma_cma_direct", direct);
            let staged = counter(&profile, "osc.rdma.staged_puts");
            if direct == "1" {
                assert!(
                    (84 * ranks..=(3 * 84 + 200) * ranks).contains(&staged),
                    "{staged} puts staged on the lent path: {profile:#}"
                );
            } else {
                assert_eq!(staged, 0, "no lent path without CMA from the origin");
            }
        }
    }
}

/// `MPI_Win_lock_all`/`MPI_Win_unlock_all` on a created window whose members are all on the
/// node are taken on osc-rdma's lent path (a shared lock on every member's word, no call into
/// the window): `tests/c/rma_lock_all.c` (1000 lock_all epochs per rank with a put or a get
/// each, data checked; exclusive increments of a counter against lock_all readers, which see
/// it still; misuse refused with MPI_ERR_RMA_SYNC) counts one `osc.rdma.lent_locks` per
/// lock_all with `osc_rdma_cma_direct`, none without, and passes both ways.
#[test]
fn lock_all_epochs_of_node_members_are_taken_on_the_lent_path() {
    const EPOCHS: u64 = 1000;
    for ranks in [2u64, 3] {
        for direct in ["1", "0"] {
            let profile = profiled_run("rma_lock_all", ranks, "osc_rdma_cma_direct", direct);
            let locks = counter(&profile, "osc.rdma.lent_locks");
            if direct == "1" {
                assert!(
                    locks >= EPOCHS * ranks,
                    "{locks} lock_alls on the lent path for {EPOCHS} per rank: {profile:#}"
                );
            } else {
                assert_eq!(locks, 0, "no lent path without CMA from the origin");
            }
        }
    }
}

/// A fence every member found quiet (no operation sent as a message since its last fence)
/// ends by one collective on the window's communicator, with no message of osc-am's: in
/// `tests/c/rma_fence_mixed.c` (300 fence rounds of puts and gets by CMA, with a contiguous
/// accumulate every third round and one of a derived datatype every third round; every
/// value checked) the profile's `osc.rdma.fences_by_collective` counts the first and last
/// fences and those of the quiet rounds, exactly: all 300 with `osc_rdma_acc_direct` (both
/// accumulates applied by the origin), 100 of 300 without (the others end by messages).
#[test]
fn fences_quiet_everywhere_end_by_one_collective() {
    const ROUNDS: u64 = 300;
    for ranks in [2u64, 3] {
        for (direct, quiet) in [("1", ROUNDS), ("0", ROUNDS / 3)] {
            let profile = profiled_run("rma_fence_mixed", ranks, "osc_rdma_acc_direct", direct);
            let fences = counter(&profile, "osc.rdma.fences_by_collective");
            assert_eq!(
                fences,
                (quiet + 2) * ranks,
                "fences by a collective on {ranks} ranks, acc_direct {direct}: {profile:#}"
            );
        }
    }
}

/// MPI's progress rule in a loop of `MPI_Put`/`MPI_Win_flush` alone on a created window
/// (`tests/c/win_flush_progress.c`): a put to a member of the node and its flush finish
/// within the flush with no progress pass, save every so many (`QUICK_PASS_EVERY` in
/// `rmca/src/window.rs`), so a peer's rendezvous send to the spinning rank completes and
/// the peer's flag arrives (without the passes the program gives up after 10 s and fails).
#[test]
fn put_flush_loops_progress_point_to_point_traffic() {
    let program = compile("win_flush_progress", &[]);
    let program = program.to_str().expect("UTF-8 path");
    for ranks in [2, 3] {
        let out = run_job(&Job {
            ranks,
            program,
            args: &[],
            mca: &[],
            timeout_s: 60,
        });
        assert!(
            out.success() && out.stdout.contains("ok win_flush_progress:"),
            "win_flush_progress on {ranks} ranks:\n{}",
            out.text()
        );
    }
}

/// MPI's progress rule in a loop of `MPI_Win_lock`/`MPI_Get`/`MPI_Win_unlock` alone on a
/// created window (`tests/c/win_lock_progress.c create`): the spinning rank's locks of a
/// member of the node are taken on osc-rdma's lent path with no call into the window, which
/// runs a progress pass every so many locks, so a peer's rendezvous send to it completes and
/// the peer's flag arrives (without the passes the program gives up after 10 s and fails).
#[test]
fn lock_get_unlock_loops_on_a_created_window_progress_point_to_point_traffic() {
    let program = compile("win_lock_progress", &[]);
    let program = program.to_str().expect("UTF-8 path");
    for ranks in [2, 3] {
        let out = run_job(&Job {
            ranks,
            program,
            args: &["create"],
            mca: &[],
            timeout_s: 60,
        });
        assert!(
            out.success() && out.stdout.contains("ok win_lock_progress:"),
            "win_lock_progress create on {ranks} ranks:\n{}",
            out.text()
        );
    }
}

/// Post/start/complete/wait between members of the node go by the counters of osc-rdma's
/// shared objects, not as osc-am messages: `tests/c/rma_pscw.c` (600 epochs whose groups
/// change every epoch, with puts, gets, accumulates and fetch-and-ops, every value checked,
/// `MPI_Win_test` loops every other epoch, then misuse refused with MPI_ERR_RMA_SYNC)
/// counts one `osc.rdma.posts_by_counter` and one `completes_by_counter` per pair of every
/// epoch, but for the first epoch's posts (made before the members' objects are mapped).
/// Not when waits sleep (`mpi_wait_mode block`, which `auto` picks for 3 ranks on 2 cores:
/// a counter rings no doorbell): messages then, none counted, the same values.
#[test]
fn pscw_epochs_of_node_members_post_and_complete_by_counter() {
    for (ranks, mode) in [(2u64, "spin"), (3, "yield"), (3, "block")] {
        let profile = profiled_run("rma_pscw", ranks, "mpi_wait_mode", mode);
        // Origin-target pairs: 150 rounds of all-to-all, both rings and rank 0 to every
        // other, then the misuse part's ring epoch.
        let pairs = 150 * (ranks * (ranks - 1) + 2 * ranks + ranks - 1) + ranks;
        let first = ranks * (ranks - 1);
        for c in ["osc.rdma.posts_by_counter", "osc.rdma.completes_by_counter"] {
            let n = counter(&profile, c);
            let expected = if mode == "block" {
                n == 0
            } else {
                n >= pairs - first && n <= pairs
            };
            assert!(
                expected,
                "{c} is {n} on {ranks} ranks ({mode}) for {pairs} origin-target pairs: {profile:#}"
            );
        }
    }
}
