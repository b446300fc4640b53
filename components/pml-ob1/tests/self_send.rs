//! A single rank talking to itself through btl-self, with ob1 built by its component `init`
//! from MCA parameters (the way the runtime builds it).

use rmca_btl_self::SELF;
use rmca_framework::bml::Bml;
use rmca_framework::btl::{Btl, BtlComponent};
use rmca_framework::buffer::UserBuf;
use rmca_framework::component::{Component, InitContext};
use rmca_framework::job::JobInfo;
use rmca_framework::memory::MemoryAccounting;
use rmca_framework::modex::LocalModex;
use rmca_framework::params::{
    ParamRegistrar, ParamStore, RawSetting, RawSources, Source as ParamSource,
};
use rmca_framework::pml::{
    Pml, PmlComponent, RecvArgs, RequestId, SendArgs, SendMode, Source, Status, TagSel,
};
use rmca_pml_ob1::OB1;

// SAFETY (lend, lend_mut): the memory lent stays borrowed here until the operation using it
// has completed (every caller waits for its operations before its buffers go).
fn lend(v: &[u8]) -> UserBuf {
    unsafe { UserBuf::from_slice(v) }
}
fn lend_mut(v: &mut [u8]) -> UserBuf {
    unsafe { UserBuf::from_mut_slice(v) }
}

fn store(settings: &[(&str, &str)]) -> Result<ParamStore, String> {
    let mut specs = Vec::new();
    OB1.register_params(&mut ParamRegistrar::new("pml", "ob1", &mut specs));
    SELF.register_params(&mut ParamRegistrar::new("btl", "self", &mut specs));
    let raw = RawSources {
        settings: settings
            .iter()
            .map(|(n, v)| RawSetting {
                name: (*n).into(),
                value: (*v).into(),
                source: ParamSource::CommandLine,
            })
            .collect(),
    };
    ParamStore::resolve(specs, &raw).map_err(|e| format!("{e:?}"))
}

fn singleton(settings: &[(&str, &str)]) -> Box<dyn Pml> {
    let params = store(settings).unwrap();
    let job = JobInfo::singleton();
    let memory = MemoryAccounting::new();
    let modex = LocalModex::new();
    let mut w = modex.writer(0);
    let mut ctx = InitContext::new(&job, &params, &memory, &mut w);
    let btls: Vec<Box<dyn Btl>> = SELF.init(&mut ctx).unwrap();
    let bml = Bml::build(btls, &job.procs(), &modex).unwrap();
    OB1.init(&mut ctx, bml).unwrap()
}

fn wait(p: &mut dyn Pml, id: RequestId) -> Status {
    for _ in 0..1_000_000 {
        if let Some(s) = p.test(id).unwrap() {
            return s;
        }
        p.progress();
    }
    panic!("request never completed");
}

fn isend(p: &mut dyn Pml, buf: &[u8], tag: i32, mode: SendMode) -> RequestId {
    p.isend(SendArgs {
        buf: lend(buf),
        dest: 0,
        tag,
        context: 0,
        mode,
        pattern: Default::default(),
    })
    .unwrap()
}

fn irecv(p: &mut dyn Pml, buf: &mut [u8], tag: i32) -> RequestId {
    p.irecv(RecvArgs {
        buf: lend_mut(buf),
        source: Source::Rank(0),
        tag: TagSel::Tag(tag),
        context: 0,
        pattern: Default::default(),
    })
    .unwrap()
}

#[test]
fn self_send_of_every_size_and_mode() {
    let mut p = singleton(&[]);
    for (i, len) in [0usize, 1, 100, 65_000, 65_536, 1 << 20, 5_000_001]
        .into_iter()
        .enumerate()
    {
        for mode in [SendMode::Standard, SendMode::Synchronous] {
            let msg: Vec<u8> = (0..len).map(|x| (x * 7 + i) as u8).collect();
            let mut out = vec![0u8; len];
            let tag = i as i32;
            // Send first (unexpected path), then receive.
            let s = isend(p.as_mut(), &msg, tag, mode);
            let r = irecv(p.as_mut(), &mut out, tag);
            let rs = wait(p.as_mut(), r);
            wait(p.as_mut(), s);
            assert_eq!((rs.len, rs.error), (len, None));
            assert!(
                out == msg,
                "self message of {len} bytes ({mode:?}) corrupted"
            );
        }
    }
    let c = p.counters();
    let get = |k: &str| c.iter().find(|(n, _)| n == k).map(|x| x.1).unwrap();
    assert!(
        get("pml.ob1.rget") > 0,
        "large self messages use the memcpy GET"
    );
    assert!(get("btl.self.gets") > 0);
    p.finalize().unwrap();
}

#[test]
fn parameters_select_the_policy_and_reject_bad_values() {
    let mut p = singleton(&[
        ("pml_ob1_scheduling", "epc"),
        ("pml_ob1_use_rget", "false"),
        ("btl_self_eager_limit", "1K"),
    ]);
    let msg = vec![3u8; 200_000];
    let mut out = vec![0u8; 200_000];
    let r = irecv(p.as_mut(), &mut out, 1);
    let s = isend(p.as_mut(), &msg, 1, SendMode::Standard);
    wait(p.as_mut(), s);
    wait(p.as_mut(), r);
    assert_eq!(out, msg);
    let c = p.counters();
    assert_eq!(c.iter().find(|(n, _)| n == "pml.ob1.rget").unwrap().1, 0);
    assert!(c.iter().find(|(n, _)| n == "pml.ob1.frags_sent").unwrap().1 > 0);
    let err = store(&[("pml_ob1_scheduling", "stripes")]).unwrap_err();
    assert!(err.contains("striping"), "{err}");
    assert!(store(&[("pml_ob1_stripe_treshold", "1K")])
        .unwrap_err()
        .contains("stripe_threshold"));
}
