mod sim;
use std::time::Duration;
use rmca_pml_dr::proto::Config;
use sim::{Faults, Sim};
#[test]
fn dbg() {
    let lens0 = [188u64, 65, 2208, 42756, 3227, 3287, 76];
    let lens1 = [1494u64, 41, 0, 86, 126, 1, 5264, 58, 25, 119, 189, 0, 3103, 159];
    let cfg = Config { vfrag_frags: 61, window: 10, eager_limit: 4403, csum: true,
        rto_min: Duration::from_millis(2), ack_delay: Duration::from_micros(500), rto_initial: Duration::from_millis(20),
        rto_max: Duration::from_millis(500), peer_timeout: Duration::from_secs(5), watchdog: Duration::from_secs(1), ..Config::default() };
    let f = Faults { drop: 0.12292074813561668, dup: 0.001798264873884966, corrupt: 0.018304426447303405, corrupt_placed: 0.00984110751906742,
        min_delay: Duration::from_micros(10), max_delay: Duration::from_micros(1051), ..Faults::default() };
    let mut s = Sim::new(8535545184482067061, cfg, vec![f], &[285]);
    s.match_delay_max = Duration::from_millis(20);
    for &l in &lens0 { s.send(0, l); }
    for &l in &lens1 { s.send(1, l); }
    s.debug_death = true;
    s.run(Duration::from_secs(600), Sim::all_done);
    if !s.all_done() {
        eprintln!("{:#?}", s.nodes[0].conn);
        eprintln!("{:#?}", s.nodes[1].conn);
        eprintln!("rx received {:?} announced {:?}", s.nodes[1].received, s.nodes[1].announced);
    }
    s.assert_delivered(0);
}
