//! Failover of pml dr from a UD path killed mid-transfer to a second BTL to the same peer.
//!
//! The tree has no way to give one peer two BTLs next to ud (the BML keeps only the highest
//! exclusivity: shm beats ud beats tcp) nor to kill ud's path at run time, so this program
//! links two test-only wrapper components around the real built-in ones:
//! - `udcut`: btl-ud's own modules, unchanged, except that after `btl_udcut_after` fragments
//!   sent by this process every further send is silently swallowed (a black-holed path: the
//!   BTL reports nothing, only pml dr's acks can notice);
//! - `shmnet`: btl-shm's modules presented as a slow network (ud's exclusivity, worse latency
//!   and bandwidth), so the BML keeps both for a same-node peer and dr prefers ud.
//!
//! `rmca-run -n 2 --mca pml dr --mca btl udcut,shmnet,self dr_failover [messages]`: both ranks
//! exchange a verified stream of mixed-size messages (up to 1 MiB) and print
//! `failover messages=N bytes=B errors=E cut=C`; exit 1 if E > 0 or a call failed.

use std::process::exit;

use rmca::{Request, ANY_TAG};
use rmca_framework::btl::{
    exclusivity, Btl, BtlAttributes, BtlComponent, BtlError, BtlEvents, BtlTag, CompletionToken,
    MemAccess, MemoryUsage, ModexRead, Registration, RemoteSegment, SendError, SendHint,
};
use rmca_framework::buffer::UserBuf;
use rmca_framework::component::{
    BuiltinComponent, Component, ComponentMeta, ComponentRef, InitContext,
};
use rmca_framework::params::{Param, ParamRegistrar};
use rmca_framework::rank::{ProcInfo, Rank};

/// The built-in BTL component called `name`.
fn builtin_btl(name: &str) -> Result<&'static dyn BtlComponent, BtlError> {
    rmca_framework::inventory::iter::<BuiltinComponent>
        .into_iter()
        .find_map(|c| match c.component {
            ComponentRef::Btl(b) if b.meta().name == name => Some(b),
            _ => None,
        })
        .ok_or_else(|| BtlError::Other(format!("no built-in btl {name} is linked")))
}

/// A module of another component with its attributes rewritten and, optionally, a send budget
/// after which sends vanish.
struct Wrapped {
    inner: Box<dyn Btl>,
    attrs: BtlAttributes,
    rewrite: fn(&BtlAttributes) -> BtlAttributes,
    /// Sends still delivered; `None` = unlimited.
    budget: Option<u64>,
    swallowed: u64,
}

impl Wrapped {
    fn new(
        inner: Box<dyn Btl>,
        rewrite: fn(&BtlAttributes) -> BtlAttributes,
        budget: Option<u64>,
    ) -> Self {
        let attrs = rewrite(inner.attributes());
        Self {
            inner,
            attrs,
            rewrite,
            budget,
            swallowed: 0,
        }
    }

    /// True when this send must vanish.
    fn cut(&mut self) -> bool {
        match &mut self.budget {
            Some(0) => {
                if self.swallowed == 0 {
                    eprintln!("dr_failover: ud path cut now");
                }
                self.swallowed += 1;
                true
            }
            Some(b) => {
                *b -= 1;
                false
            }
            None => false,
        }
    }
}

impl Btl for Wrapped {
    fn component_name(&self) -> &str {
        self.inner.component_name()
    }
    fn attributes(&self) -> &BtlAttributes {
        &self.attrs
    }
    fn add_procs(
        &mut self,
        procs: &[ProcInfo],
        modex: &dyn ModexRead,
    ) -> Result<Vec<bool>, BtlError> {
        let r = self.inner.add_procs(procs, modex);
        // add_procs may narrow the inner attributes: rewrite what the BML will read.
        self.attrs = (self.rewrite)(self.inner.attributes());
        r
    }
    fn del_procs(&mut self, ranks: &[Rank]) {
        self.inner.del_procs(ranks)
    }
    fn send(
        &mut self,
        peer: Rank,
        tag: BtlTag,
        header: &[u8],
        payload: &[u8],
        hint: SendHint,
    ) -> Result<(), SendError> {
        if self.cut() {
            return Ok(());
        }
        self.inner.send(peer, tag, header, payload, hint)
    }
    fn send_inplace(
        &mut self,
        peer: Rank,
        tag: BtlTag,
        header: &[u8],
        payload: UserBuf,
        hint: SendHint,
        token: CompletionToken,
    ) -> Result<(), SendError> {
        // Never cut here: the inner BTL owes a completion for the token.
        self.inner
            .send_inplace(peer, tag, header, payload, hint, token)
    }
    fn register_mem(&mut self, buf: UserBuf, access: MemAccess) -> Result<Registration, BtlError> {
        self.inner.register_mem(buf, access)
    }
    fn deregister_mem(&mut self, registration: &Registration) {
        self.inner.deregister_mem(registration)
    }
    fn put(
        &mut self,
        peer: Rank,
        local: UserBuf,
        remote: &RemoteSegment,
        token: CompletionToken,
    ) -> Result<(), SendError> {
        self.inner.put(peer, local, remote, token)
    }
    fn get(
        &mut self,
        peer: Rank,
        local: UserBuf,
        remote: &RemoteSegment,
        token: CompletionToken,
    ) -> Result<(), SendError> {
        self.inner.get(peer, local, remote, token)
    }
    fn progress(&mut self, events: &mut dyn BtlEvents) -> usize {
        self.inner.progress(events)
    }
    fn memory_usage(&self) -> MemoryUsage {
        self.inner.memory_usage()
    }
    fn counters(&self) -> Vec<(String, u64)> {
        let mut c = self.inner.counters();
        if self.budget.is_some() {
            c.push(("udcut_swallowed".to_owned(), self.swallowed));
        }
        c
    }
    fn finalize(&mut self) {
        self.inner.finalize()
    }
}

struct UdCut;
struct ShmNet;

impl Component for UdCut {
    fn meta(&self) -> ComponentMeta {
        ComponentMeta {
            name: "udcut",
            version: env!("CARGO_PKG_VERSION"),
            description: "test shim: btl ud whose path is black-holed after btl_udcut_after sends",
        }
    }
    fn register_params(&self, params: &mut ParamRegistrar<'_>) {
        params.add(
            Param::int("after", 20_000)
                .range(0, i64::MAX)
                .help("Fragments this process sends on ud before every further send vanishes."),
        );
    }
}

impl BtlComponent for UdCut {
    fn init(&self, ctx: &mut InitContext<'_>) -> Result<Vec<Box<dyn Btl>>, BtlError> {
        let after = ctx
            .params
            .get_int("btl_udcut_after")
            .map_err(|e| BtlError::Other(e.to_string()))? as u64;
        Ok(builtin_btl("ud")?
            .init(ctx)?
            .into_iter()
            .map(|m| Box::new(Wrapped::new(m, BtlAttributes::clone, Some(after))) as Box<dyn Btl>)
            .collect())
    }
}

fn as_slow_network(a: &BtlAttributes) -> BtlAttributes {
    BtlAttributes {
        exclusivity: exclusivity::HIGH_SPEED_NETWORK,
        latency_ns: u32::MAX / 2,
        bandwidth_mbps: 1,
        ..a.clone()
    }
}

impl Component for ShmNet {
    fn meta(&self) -> ComponentMeta {
        ComponentMeta {
            name: "shmnet",
            version: env!("CARGO_PKG_VERSION"),
            description: "test shim: btl shm presented as a slow network next to ud",
        }
    }
    fn register_params(&self, _params: &mut ParamRegistrar<'_>) {}
}

impl BtlComponent for ShmNet {
    fn init(&self, ctx: &mut InitContext<'_>) -> Result<Vec<Box<dyn Btl>>, BtlError> {
        Ok(builtin_btl("shm")?
            .init(ctx)?
            .into_iter()
            .map(|m| Box::new(Wrapped::new(m, as_slow_network, None)) as Box<dyn Btl>)
            .collect())
    }
}

static UDCUT: UdCut = UdCut;
static SHMNET: ShmNet = ShmNet;
rmca_framework::inventory::submit! { BuiltinComponent::new(ComponentRef::Btl(&UDCUT)) }
rmca_framework::inventory::submit! { BuiltinComponent::new(ComponentRef::Btl(&SHMNET)) }

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Size and content of message `i` from `src`: content = f(src, i, offset).
fn message(src: usize, i: u64) -> Vec<u8> {
    let key = mix((src as u64) << 40 ^ i);
    let len = match key % 100 {
        0..=4 => (key >> 8) as usize % (1 << 20),
        5..=29 => (key >> 8) as usize % (64 << 10),
        _ => (key >> 8) as usize % 2048,
    };
    (0..len)
        .map(|o| (mix(key ^ (o as u64 / 8)) >> ((o % 8) * 8)) as u8)
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
        let res = (|| -> rmca::Result<Vec<rmca::Status>> {
            let recvs = bufs
                .iter_mut()
                .map(|b| world.irecv(b.as_mut_slice(), peer, ANY_TAG))
                .collect::<rmca::Result<Vec<_>>>()?;
            let sends = out
                .iter()
                .zip(i..)
                .map(|(b, k)| world.isend(b.as_slice(), peer, (k % 1000) as i32))
                .collect::<rmca::Result<Vec<_>>>()?;
            let st = Request::wait_all(recvs)?;
            Request::wait_all(sends)?;
            Ok(st)
        })();
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
