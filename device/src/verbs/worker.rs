//! The engine thread (STYLE §3: work off the MMIO path). The socket thread only records
//! doorbells and forwards them here as events; commands wait for the engine's answer, so a
//! register read after RNIC_REG_CMD sees its status. Memory is reached through the DMA
//! router, whose view holds the DMA maps' read lock per pass, never across waiting.

use super::copy::GuestMem;
use super::engine::{Engine, Shared, Tables};
use crate::router::Router;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, SyncSender};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub enum Event {
    SqDoorbell { qpn: u32, pi: u16 },
    RqDoorbell { qpn: u32, pi: u16 },
    CqConsumed { cqn: u32, ci: u16 },
    CqArm { cqn: u32 },
    DmaCtrl { enabled: bool, int_enabled: bool },
    Command { op: u32, index: u32, tables: Tables, reply: SyncSender<u32> },
    Reset { reply: SyncSender<()> },
    /// A checked packet from the fabric.
    Packet { from: std::net::Ipv4Addr, pkt: crate::fabric::packet::Packet },
}

/// How long a command may take before the register reports the engine as unresponsive.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(10);
/// Work requests per QP per pass before other QPs and events get their turn.
const BUDGET: usize = 64;

pub struct EngineHandle {
    tx: Sender<Event>,
}

impl Clone for EngineHandle {
    fn clone(&self) -> Self {
        EngineHandle { tx: self.tx.clone() }
    }
}

impl EngineHandle {
    pub fn spawn(name: String, router: Arc<Router>, shared: Shared, wire: Option<Arc<dyn super::rc::Wire>>) -> std::io::Result<EngineHandle> {
        let (tx, rx) = mpsc::channel();
        let mut engine = Engine::new(name.clone(), shared);
        if let Some(w) = wire {
            engine.set_wire(w);
        }
        std::thread::Builder::new().name(format!("{name}-engine")).spawn(move || run(engine, &router, &rx))?;
        Ok(EngineHandle { tx })
    }

    pub fn send(&self, ev: Event) {
        if self.tx.send(ev).is_err() {
            log::error!("verbs engine thread is gone; event dropped");
        }
    }

    /// Runs a command on the engine and waits for its status.
    pub fn command(&self, op: u32, index: u32, tables: Tables) -> u32 {
        let (reply, rx) = mpsc::sync_channel(1);
        self.send(Event::Command { op, index, tables, reply });
        rx.recv_timeout(COMMAND_TIMEOUT).unwrap_or(super::abi::CMD_ERR_DISABLED)
    }

    /// Resets the engine and waits until it has forgotten every object.
    pub fn reset(&self) {
        let (reply, rx) = mpsc::sync_channel(1);
        self.send(Event::Reset { reply });
        let _ = rx.recv_timeout(COMMAND_TIMEOUT);
    }
}

fn handle(engine: &mut Engine, mem: &dyn GuestMem, ev: Event) {
    match ev {
        Event::SqDoorbell { qpn, pi } => engine.sq_doorbell(qpn, pi),
        Event::RqDoorbell { qpn, pi } => engine.rq_doorbell(qpn, pi),
        Event::CqConsumed { cqn, ci } => engine.cq_consumed(cqn, ci),
        Event::CqArm { cqn } => engine.cq_arm(cqn),
        Event::DmaCtrl { enabled, int_enabled } => engine.set_dma_ctrl(enabled, int_enabled),
        Event::Command { op, index, tables, reply } => {
            let _ = reply.send(engine.command(mem, op, index, tables));
        }
        Event::Packet { from, pkt } => engine.on_packet(mem, from, &pkt),
        Event::Reset { reply } => {
            engine.reset();
            let _ = reply.send(());
        }
    }
}

fn run(mut engine: Engine, router: &Router, rx: &Receiver<Event>) {
    loop {
        let first = match engine.next_deadline() {
            Some(d) => match rx.recv_timeout(d.saturating_duration_since(Instant::now())) {
                Ok(ev) => Some(ev),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => return,
            },
            None => match rx.recv() {
                Ok(ev) => Some(ev),
                Err(_) => return,
            },
        };
        let mut pending = first;
        loop {
            let view = router.view();
            if let Some(ev) = pending.take() {
                handle(&mut engine, &view, ev);
            }
            while let Ok(ev) = rx.try_recv() {
                handle(&mut engine, &view, ev);
            }
            let progress = engine.run(&view, BUDGET);
            drop(view);
            if !progress {
                break;
            }
        }
    }
}
