//! Component selection and BML routing, with fake components registered through inventory in
//! this test binary (exactly as built-in components register).
// McaError carries the culprit's source by value; configuration-time only.
#![allow(clippy::result_large_err)]

use rmca_framework::bml::{Bml, BmlError};
use rmca_framework::btl::{
    exclusivity, Btl, BtlAttributes, BtlComponent, BtlError, BtlEvents, BtlFlags, BtlTag,
    ModexRead, SendError, SendHint,
};
use rmca_framework::component::{Component, ComponentMeta, Framework, InitContext};
use rmca_framework::modex::LocalModex;
use rmca_framework::params::{Param, ParamRegistrar, ParamStore, RawSetting, RawSources, Source};
use rmca_framework::pml::{Pml, PmlComponent, PmlError};
use rmca_framework::rank::{ProcInfo, Rank};
use rmca_framework::registry::{McaError, Registry};

struct FakePml {
    name: &'static str,
    default_priority: i64,
}

impl Component for FakePml {
    fn meta(&self) -> ComponentMeta {
        ComponentMeta {
            name: self.name,
            version: "1.0",
            description: "fake pml",
        }
    }
    fn register_params(&self, p: &mut ParamRegistrar<'_>) {
        p.add(Param::int("priority", self.default_priority).range(0, 100));
    }
}

impl PmlComponent for FakePml {
    fn priority(&self, params: &ParamStore) -> i32 {
        params
            .get_int(&format!("pml_{}_priority", self.name))
            .unwrap() as i32
    }
    fn init(&self, _: &mut InitContext<'_>, _: Bml) -> Result<Box<dyn Pml>, PmlError> {
        Err(PmlError::Init("fake".into()))
    }
}

static FAST: FakePml = FakePml {
    name: "fakefast",
    default_priority: 20,
};
static SAFE: FakePml = FakePml {
    name: "fakesafe",
    default_priority: 5,
};
rmca_framework::builtin_component!(Pml, FAST);
rmca_framework::builtin_component!(Pml, SAFE);

/// A BTL whose reachability and attributes are set by the test.
struct FakeBtl {
    name: &'static str,
    attrs: BtlAttributes,
    reach: fn(&ProcInfo) -> bool,
}

impl Btl for FakeBtl {
    fn component_name(&self) -> &str {
        self.name
    }
    fn attributes(&self) -> &BtlAttributes {
        &self.attrs
    }
    fn add_procs(&mut self, procs: &[ProcInfo], _: &dyn ModexRead) -> Result<Vec<bool>, BtlError> {
        Ok(procs.iter().map(self.reach).collect())
    }
    fn send(
        &mut self,
        _: Rank,
        _: BtlTag,
        _: &[u8],
        _: &[u8],
        _: SendHint,
    ) -> Result<(), SendError> {
        Ok(())
    }
    fn progress(&mut self, _: &mut dyn BtlEvents) -> usize {
        0
    }
}

struct FakeBtlComponent(&'static str);
impl Component for FakeBtlComponent {
    fn meta(&self) -> ComponentMeta {
        ComponentMeta {
            name: self.0,
            version: "1.0",
            description: "fake btl",
        }
    }
    fn register_params(&self, _: &mut ParamRegistrar<'_>) {}
}
impl BtlComponent for FakeBtlComponent {
    fn init(&self, _: &mut InitContext<'_>) -> Result<Vec<Box<dyn Btl>>, BtlError> {
        Ok(vec![])
    }
}
static NETA: FakeBtlComponent = FakeBtlComponent("neta");
static NETB: FakeBtlComponent = FakeBtlComponent("netb");
rmca_framework::builtin_component!(Btl, NETA);
rmca_framework::builtin_component!(Btl, NETB);

fn store(reg: &Registry, cli: &[(&str, &str)]) -> Result<ParamStore, McaError> {
    let settings = cli
        .iter()
        .map(|(n, v)| RawSetting {
            name: (*n).into(),
            value: (*v).into(),
            source: Source::CommandLine,
        })
        .collect();
    reg.resolve(&RawSources::from_parts(None, None, false, vec![], settings).unwrap())
}

#[test]
fn highest_priority_pml_wins_and_selectors_restrict() {
    let reg = Registry::builtin();
    let s = store(&reg, &[]).unwrap();
    assert_eq!(reg.select_pml(&s).unwrap().meta().name, "fakefast");
    let s = store(&reg, &[("pml_fakesafe_priority", "50")]).unwrap();
    assert_eq!(
        reg.select_pml(&s).unwrap().meta().name,
        "fakesafe",
        "priority follows parameters"
    );
    let s = store(&reg, &[("pml", "fakesafe")]).unwrap();
    assert_eq!(reg.select_pml(&s).unwrap().meta().name, "fakesafe");
    let s = store(&reg, &[("pml", "^fakefast")]).unwrap();
    assert_eq!(reg.select_pml(&s).unwrap().meta().name, "fakesafe");
    let s = store(&reg, &[("pml", "^fakefast,fakesafe")]).unwrap();
    let e = reg
        .select_pml(&s)
        .err()
        .expect("everything excluded")
        .to_string();
    assert!(e.contains("excludes every PML"), "{e}");
    let s = store(&reg, &[("pml", "fakefats")]).unwrap();
    let e = reg.select_pml(&s).err().unwrap().to_string();
    assert!(
        e.contains("unknown pml component 'fakefats'") && e.contains("did you mean 'fakefast'?"),
        "{e}"
    );
}

#[test]
fn btl_include_list_keeps_its_order_and_exclude_removes() {
    let reg = Registry::builtin();
    let names = |cli: &[(&str, &str)]| -> Vec<&'static str> {
        let s = store(&reg, cli).unwrap();
        reg.select_btls(&s)
            .unwrap()
            .iter()
            .map(|b| b.meta().name)
            .collect()
    };
    assert_eq!(names(&[]), vec!["neta", "netb"]);
    assert_eq!(names(&[("btl", "netb,neta")]), vec!["netb", "neta"]);
    assert_eq!(names(&[("btl", "^neta")]), vec!["netb"]);
    let s = store(&reg, &[("btl", "neta,^netb")]).unwrap();
    assert!(matches!(reg.select_btls(&s), Err(McaError::Params(_))));
}

fn procs(me: Rank, nodes: &[u32]) -> Vec<ProcInfo> {
    nodes
        .iter()
        .enumerate()
        .map(|(r, &n)| ProcInfo {
            rank: r as Rank,
            node: n,
            is_self: r as Rank == me,
        })
        .collect()
}

fn attrs(exclusivity: u32, latency_ns: u32, bandwidth_mbps: u32, flags: BtlFlags) -> BtlAttributes {
    BtlAttributes {
        exclusivity,
        latency_ns,
        bandwidth_mbps,
        flags,
        ..Default::default()
    }
}

fn btls() -> Vec<Box<dyn Btl>> {
    vec![
        Box::new(FakeBtl {
            name: "self",
            attrs: attrs(
                exclusivity::SELF,
                10,
                100_000,
                BtlFlags::SEND | BtlFlags::GET,
            ),
            reach: |p| p.is_self,
        }),
        Box::new(FakeBtl {
            name: "shm",
            attrs: attrs(
                exclusivity::SHARED_MEMORY,
                100,
                80_000,
                BtlFlags::SEND | BtlFlags::GET,
            ),
            reach: |p| !p.is_self && p.node == 0,
        }),
        Box::new(FakeBtl {
            name: "slownet",
            attrs: attrs(
                exclusivity::HIGH_SPEED_NETWORK,
                5000,
                10_000,
                BtlFlags::SEND | BtlFlags::PUT,
            ),
            reach: |p| !p.is_self,
        }),
        Box::new(FakeBtl {
            name: "fastnet",
            attrs: attrs(
                exclusivity::HIGH_SPEED_NETWORK,
                2000,
                30_000,
                BtlFlags::SEND,
            ),
            reach: |p| !p.is_self,
        }),
    ]
}

#[test]
fn exclusivity_picks_self_then_shm_then_networks() {
    let bml = Bml::build(btls(), &procs(0, &[0, 0, 1]), &LocalModex::new()).unwrap();
    let names = |r: Rank| -> Vec<String> {
        bml.routes(r)
            .eager
            .iter()
            .map(|x| bml.btl_ref(x.btl).component_name().to_owned())
            .collect()
    };
    assert_eq!(names(0), ["self"]);
    assert_eq!(
        names(1),
        ["shm"],
        "a same-node peer uses shm only, though the networks reach it"
    );
    assert_eq!(
        names(2),
        ["fastnet", "slownet"],
        "eager list ordered by latency"
    );
    let remote = bml.routes(2);
    let w: Vec<(String, f64)> = remote
        .send
        .iter()
        .map(|x| (bml.btl_ref(x.btl).component_name().to_owned(), x.weight))
        .collect();
    assert_eq!(w[0].0, "fastnet");
    assert!(
        (w[0].1 - 0.75).abs() < 1e-9 && (w[1].1 - 0.25).abs() < 1e-9,
        "weights by bandwidth: {w:?}"
    );
    assert_eq!(remote.rdma.len(), 1, "only BTLs with PUT/GET carry RDMA");
}

#[test]
fn exclusivity_override_lets_shm_and_a_network_share_a_peer() {
    // btl_shm_exclusivity lowered to the networks' level: a same-node peer gets all three,
    // shm first for eager traffic since it has the lowest latency.
    let overrides = [None, Some(exclusivity::HIGH_SPEED_NETWORK), None, None];
    let bml =
        Bml::build_with_exclusivity(btls(), &procs(0, &[0, 0]), &LocalModex::new(), &overrides)
            .unwrap();
    let eager: Vec<&str> = bml
        .routes(1)
        .eager
        .iter()
        .map(|x| bml.btl_ref(x.btl).component_name())
        .collect();
    assert_eq!(eager, ["shm", "fastnet", "slownet"]);
    // Raised above self: self keeps rank 0, since only the BTLs that reach a peer compete.
    let overrides = [None, Some(exclusivity::SELF * 2), None, None];
    let bml =
        Bml::build_with_exclusivity(btls(), &procs(0, &[0, 0]), &LocalModex::new(), &overrides)
            .unwrap();
    let names = |r: Rank| -> Vec<&str> {
        bml.routes(r)
            .eager
            .iter()
            .map(|x| bml.btl_ref(x.btl).component_name())
            .collect()
    };
    assert_eq!(names(0), ["self"], "only BTLs that reach a peer compete");
    assert_eq!(names(1), ["shm"]);
}

#[test]
fn exclusivity_parameter_is_declared_for_every_btl() {
    let reg = Registry::builtin();
    let specs = reg.param_specs();
    assert!(
        reg.of(Framework::Btl).count() >= 2,
        "this test registers neta and netb"
    );
    for c in reg.of(Framework::Btl) {
        let name = format!("btl_{}_exclusivity", c.meta().name);
        assert!(
            specs.iter().any(|s| s.name == name),
            "{name} missing from the declared parameters"
        );
    }
}

#[test]
fn modules_serving_no_peer_are_released() {
    // Everyone on node 0: the networks are never chosen over shm and must not be polled.
    let bml = Bml::build(btls(), &procs(0, &[0, 0, 0]), &LocalModex::new()).unwrap();
    let names: Vec<&str> = (0..bml.btl_count())
        .map(|i| bml.btl_ref(i).component_name())
        .collect();
    assert_eq!(names, ["self", "shm"]);
    assert_eq!(
        bml.btl_ref(bml.routes(2).eager[0].btl).component_name(),
        "shm",
        "routes follow the new indices"
    );
}

#[test]
fn failed_route_is_removed_and_weights_renormalised() {
    let mut bml = Bml::build(btls(), &procs(0, &[0, 1]), &LocalModex::new()).unwrap();
    let fast = bml.routes(1).eager[0].btl;
    assert!(bml.remove_route(1, fast));
    assert_eq!(bml.routes(1).send.len(), 1);
    assert!((bml.routes(1).send[0].weight - 1.0).abs() < 1e-9);
    let slow = bml.routes(1).eager[0].btl;
    assert!(!bml.remove_route(1, slow), "no route left");
}

#[test]
fn unreachable_peer_error_names_peer_btls_and_self_hint() {
    // Only the networks: rank 0 cannot reach itself.
    let only_net: Vec<Box<dyn Btl>> = btls().into_iter().skip(2).collect();
    let err = Bml::build(only_net, &procs(0, &[0, 0]), &LocalModex::new()).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, BmlError::Unreachable(_)));
    assert!(msg.contains("rank 0 cannot reach rank(s) 0"), "{msg}");
    assert!(msg.contains("BTLs tried: slownet, fastnet"), "{msg}");
    assert!(msg.contains("needs 'self' in the btl list"), "{msg}");
    // shm + self, but a peer on another node.
    let local: Vec<Box<dyn Btl>> = btls().into_iter().take(2).collect();
    let msg = Bml::build(local, &procs(0, &[0, 1, 1]), &LocalModex::new())
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("cannot reach rank(s) 1, 2") && msg.contains("BTLs tried: self, shm"),
        "{msg}"
    );
    assert!(!msg.contains("needs 'self'"), "{msg}");
}

/// A module that records the peers the BML routed over it (`None`: never told).
struct Recording {
    inner: Box<dyn Btl>,
    routed: std::sync::Arc<std::sync::Mutex<Option<Vec<Rank>>>>,
}

impl Btl for Recording {
    fn component_name(&self) -> &str {
        self.inner.component_name()
    }
    fn attributes(&self) -> &BtlAttributes {
        self.inner.attributes()
    }
    fn add_procs(&mut self, procs: &[ProcInfo], m: &dyn ModexRead) -> Result<Vec<bool>, BtlError> {
        self.inner.add_procs(procs, m)
    }
    fn peers_routed(&mut self, peers: &[Rank]) {
        *self.routed.lock().unwrap() = Some(peers.to_vec());
    }
    fn send(
        &mut self,
        p: Rank,
        t: BtlTag,
        h: &[u8],
        d: &[u8],
        s: SendHint,
    ) -> Result<(), SendError> {
        self.inner.send(p, t, h, d, s)
    }
    fn progress(&mut self, e: &mut dyn BtlEvents) -> usize {
        self.inner.progress(e)
    }
}

#[test]
fn modules_learn_the_peers_routed_over_them_and_released_ones_nothing() {
    let seen: Vec<_> = (0..4).map(|_| std::sync::Arc::default()).collect();
    let record = |b: Vec<Box<dyn Btl>>| -> Vec<Box<dyn Btl>> {
        b.into_iter()
            .zip(&seen)
            .map(|(inner, s)| {
                Box::new(Recording {
                    inner,
                    routed: std::sync::Arc::clone(s),
                }) as Box<dyn Btl>
            })
            .collect()
    };
    // Rank 0 with a peer on its node (1) and one on another (2).
    let _bml = Bml::build(record(btls()), &procs(0, &[0, 0, 1]), &LocalModex::new()).unwrap();
    let got: Vec<Option<Vec<Rank>>> = seen.iter().map(|s| s.lock().unwrap().clone()).collect();
    assert_eq!(
        got,
        [Some(vec![0]), Some(vec![1]), Some(vec![2]), Some(vec![2])],
        "each module hears the peers whose routes use it"
    );
    // One node: the networks reach every peer but carry nothing, and are never told to grow.
    for s in &seen {
        *s.lock().unwrap() = None;
    }
    let _bml = Bml::build(record(btls()), &procs(0, &[0, 0, 0]), &LocalModex::new()).unwrap();
    let got: Vec<Option<Vec<Rank>>> = seen.iter().map(|s| s.lock().unwrap().clone()).collect();
    assert_eq!(got, [Some(vec![0]), Some(vec![1, 2]), None, None]);
}
