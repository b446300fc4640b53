//! osc-am: MPI windows over active messages through the PML.
//!
//! Every RMA operation and synchronization is a message ([`wire::Msg`]) sent through the
//! host's [`OscPort`] (in rmca: the PML, on a context of the window's own) and applied by
//! the target in its progress engine, so one-sided communication works wherever
//! point-to-point does: ob1 or dr, over shm, rc, ud or self. It serves every window (the
//! fallback of the framework); components with direct access (osc-sm, osc-rdma) rank above
//! it where they apply.
//!
//! The protocol is a sans-IO state machine ([`engine::Engine`]), tested with simulated
//! peers; [`AmModule`] connects it to the port.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod engine;
pub mod lockword;
pub mod wire;

/// The unit tests' allocator: counts each thread's allocations (tests that a warm path
/// allocates nothing).
#[cfg(test)]
#[global_allocator]
static ALLOC: rmca_test_support::alloc_count::Counting = rmca_test_support::alloc_count::Counting;

use rmca_framework::buffer::UserBuf;
use rmca_framework::component::{Component, ComponentMeta};
use rmca_framework::osc::{
    AccOp, Elem, Layout, OpId, OscComponent, OscError, OscModule, OscPort, SyncCall, WinConfig,
};
use rmca_framework::params::{Level, Param, ParamRegistrar, ParamStore};

use engine::Engine;
use wire::Msg;

/// The osc-am component.
#[derive(Debug)]
pub struct AmComponent;

/// The registered instance.
pub static AM: AmComponent = AmComponent;
rmca_framework::builtin_component!(Osc, AM);

impl Component for AmComponent {
    fn meta(&self) -> ComponentMeta {
        ComponentMeta {
            name: "am",
            version: env!("CARGO_PKG_VERSION"),
            description:
                "One-sided communication by active messages over the PML (every transport)",
        }
    }

    fn register_params(&self, params: &mut ParamRegistrar<'_>) {
        params.add(
            Param::int("priority", 10)
                .range(0, 100)
                .help("Priority of osc-am among the OSC components that can serve a window (it can serve every one)")
                .level(Level::Tuning),
        );
    }
}

impl OscComponent for AmComponent {
    fn priority(&self, params: &ParamStore) -> i32 {
        params
            .get_int("osc_am_priority")
            .map_or(10, |v| i32::try_from(v).unwrap_or(10))
    }

    fn query(&self, _config: &WinConfig, _params: &ParamStore) -> bool {
        true
    }

    fn create(
        &self,
        config: WinConfig,
        memory: UserBuf,
        _params: &ParamStore,
    ) -> Result<Box<dyn OscModule>, OscError> {
        let memory = (!config.dynamic).then_some(memory);
        Ok(Box::new(AmModule {
            me: config.rank,
            engine: Engine::new(config.rank, config.targets, memory).with_host(config.host),
        }))
    }
}

/// One window of osc-am: the engine, connected to the host's port.
#[derive(Debug)]
pub struct AmModule {
    engine: Engine<UserBuf>,
    /// This member's rank: its messages to itself go straight back into the engine.
    me: usize,
}

impl AmModule {
    fn flush(&mut self, port: &mut dyn OscPort) -> usize {
        let mut n = 0;
        while let Some((peer, m)) = self.engine.outbox().pop_front() {
            if peer == self.me {
                // In order with its other messages to itself (the outbox is FIFO, and what
                // handling one adds goes behind), with no matching and no copy of its data.
                self.engine.handle(peer, m);
                n += 1;
                continue;
            }
            if let Err(e) = port.send(peer, m.into_bytes()) {
                // The PML reports a dead peer through its requests; nothing to retry here.
                tracing::warn!(peer, "osc-am: send failed: {e}");
            }
            n += 1;
        }
        n
    }
}

impl OscModule for AmModule {
    fn component_name(&self) -> &'static str {
        "am"
    }

    fn put(
        &mut self,
        target: usize,
        addr: u64,
        layout: &Layout,
        data: Vec<u8>,
    ) -> Result<OpId, OscError> {
        self.engine.put(target, addr, layout, data)
    }

    fn get(&mut self, target: usize, addr: u64, layout: &Layout) -> Result<OpId, OscError> {
        self.engine.get(target, addr, layout)
    }

    fn accumulate(
        &mut self,
        target: usize,
        addr: u64,
        layout: &Layout,
        op: AccOp,
        elem: Elem,
        data: Vec<u8>,
        fetch: bool,
    ) -> Result<OpId, OscError> {
        self.engine
            .accumulate(target, addr, layout, op, elem, data, fetch)
    }

    fn put_lent(
        &mut self,
        target: usize,
        addr: u64,
        runs: &[(i64, u64)],
        data: UserBuf,
    ) -> Result<OpId, OscError> {
        // Copied into the message at once: the lent buffer is free when this returns.
        self.engine.put_from(target, addr, runs, data.as_slice())
    }

    fn accumulate_from(
        &mut self,
        target: usize,
        addr: u64,
        runs: &[(i64, u64)],
        op: AccOp,
        elem: Elem,
        data: &[u8],
        fetch: bool,
    ) -> Result<OpId, OscError> {
        self.engine
            .accumulate_from(target, addr, runs, op, elem, data, fetch)
    }

    fn compare_and_swap(
        &mut self,
        target: usize,
        addr: u64,
        elem: Elem,
        compare: Vec<u8>,
        value: Vec<u8>,
    ) -> Result<OpId, OscError> {
        self.engine
            .compare_and_swap(target, addr, elem, compare, value)
    }

    fn poll_op(&mut self, id: OpId) -> Option<Result<Vec<u8>, OscError>> {
        self.engine.poll_op(id)
    }

    fn sync(&mut self, call: SyncCall) -> Result<(), OscError> {
        self.engine.sync(call)
    }

    fn sync_done(&mut self) -> Option<Result<(), OscError>> {
        self.engine.sync_done()
    }

    fn exposure_complete(&self) -> bool {
        self.engine.exposure_complete()
    }

    fn progress(&mut self, port: &mut dyn OscPort) -> usize {
        let mut n = self.flush(port);
        while let Some((from, bytes)) = port.recv() {
            n += 1;
            match Msg::decode_vec(bytes) {
                Some(m) => self.engine.handle(from, m),
                None => tracing::warn!(from, "osc-am: malformed message dropped"),
            }
            n += self.flush(port);
        }
        n
    }

    fn attach(&mut self, region: UserBuf) -> Result<(), OscError> {
        self.engine.attach(region.addr() as u64, region)
    }

    fn detach(&mut self, addr: u64) -> Result<(), OscError> {
        self.engine.detach(addr)
    }
}
