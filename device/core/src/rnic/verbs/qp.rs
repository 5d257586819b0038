//! Queue pairs: state machine (IBA ch. 10.3, as a transition table that CMD_MODIFY_QP
//! runs: each row names the attribute check of its edge), the send and receive rings as
//! the device sees them, and a QP's attributes (its service, RC, UC or UD, among them). An
//! SRQ (contract minor 15) is a `Qp` of service `Srq` that only has its receive ring; a UD
//! QP (minor 16) has no destination, and a Q_Key. The
//! requester, responder and completer keep their own per-QP state in their modules.

use crate::contract::abi::{QPS_ERR, QPS_INIT, QPS_RESET, QPS_RTR, QPS_RTS, QP_TYPE_RC, QP_TYPE_SRQ, QP_TYPE_UC, QP_TYPE_UD};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QpState {
    Reset,
    Init,
    Rtr,
    Rts,
    Err,
}

impl QpState {
    pub fn from_abi(v: u8) -> Option<QpState> {
        match v {
            QPS_RESET => Some(QpState::Reset),
            QPS_INIT => Some(QpState::Init),
            QPS_RTR => Some(QpState::Rtr),
            QPS_RTS => Some(QpState::Rts),
            QPS_ERR => Some(QpState::Err),
            _ => None,
        }
    }

    pub fn to_abi(self) -> u8 {
        match self {
            QpState::Reset => QPS_RESET,
            QpState::Init => QPS_INIT,
            QpState::Rtr => QPS_RTR,
            QpState::Rts => QPS_RTS,
            QpState::Err => QPS_ERR,
        }
    }

    /// Whether the QP accepts incoming requests as a responder.
    pub fn can_receive(self) -> bool {
        matches!(self, QpState::Rtr | QpState::Rts)
    }
}

/// What an edge of CMD_MODIFY_QP takes and checks (the engine runs the check named here).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Edge {
    /// Any state -> RESET: forget everything.
    Reset,
    /// Any state -> ERR: flush.
    Error,
    /// RESET -> INIT: rings, CQs, PD, access, RNR attributes.
    Create,
    /// INIT -> INIT, RTS -> RTS: access flags only.
    Access,
    /// INIT -> RTR: destination (QP, address, path MTU), receive PSN.
    Connect,
    /// RTR -> RTS: send PSN, retry and RNR budgets, timeout.
    Ready,
}

/// One legal edge: from (None: any state), to, and what it takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transition {
    pub from: Option<QpState>,
    pub to: QpState,
    pub edge: Edge,
}

const fn edge(from: Option<QpState>, to: QpState, edge: Edge) -> Transition {
    Transition { from, to, edge }
}

/// The legal edges of CMD_MODIFY_QP: the only list of them.
pub const VALID_TRANSITIONS: &[Transition] = &[
    edge(None, QpState::Reset, Edge::Reset),
    edge(None, QpState::Err, Edge::Error),
    edge(Some(QpState::Reset), QpState::Init, Edge::Create),
    edge(Some(QpState::Init), QpState::Init, Edge::Access),
    edge(Some(QpState::Init), QpState::Rtr, Edge::Connect),
    edge(Some(QpState::Rtr), QpState::Rts, Edge::Ready),
    edge(Some(QpState::Rts), QpState::Rts, Edge::Access),
];

/// The edge `from -> to`, if it is legal.
pub fn transition(from: QpState, to: QpState) -> Option<Edge> {
    VALID_TRANSITIONS.iter().find(|t| t.to == to && t.from.is_none_or(|f| f == from)).map(|t| t.edge)
}

pub fn transition_allowed(from: QpState, to: QpState) -> bool {
    transition(from, to).is_some()
}

/// A work queue ring (SQ or RQ): where it is and the device's view of its indices.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ring {
    pub addr: u64,
    pub log_size: u8,
    pub log_stride: u8,
    /// Producer index from the last doorbell (free-running, 16-bit).
    pub pi: u16,
    /// Next WQE the device consumes.
    pub ci: u16,
}

impl Ring {
    pub fn size(&self) -> u16 {
        1 << self.log_size
    }

    pub fn stride(&self) -> u64 {
        1 << self.log_stride
    }

    pub fn pending(&self) -> u16 {
        self.pi.wrapping_sub(self.ci)
    }

    pub fn is_empty(&self) -> bool {
        self.pi == self.ci
    }

    /// Bus address of the WQE at index `idx`.
    pub fn slot_addr(&self, idx: u16) -> Option<u64> {
        let slot = u64::from(idx & (self.size() - 1));
        self.addr.checked_add(slot * self.stride())
    }

    /// Takes a doorbell; false when it would put more than a ring's worth outstanding.
    pub fn ring(&mut self, pi: u16) -> bool {
        if pi.wrapping_sub(self.ci) > self.size() {
            return false;
        }
        self.pi = pi;
        true
    }
}

#[derive(Clone, Debug)]
pub struct Qp {
    pub state: QpState,
    /// Its service (contract minor 13), fixed at RESET -> INIT.
    pub service: Service,
    pub err_reason: u8,
    pub pd: u32,
    pub send_cqn: u32,
    pub recv_cqn: u32,
    pub dest_qpn: u32,
    pub access: u8,
    pub rnr_retry: u8,
    pub rnr_timer_us: u32,
    pub sq: Ring,
    pub rq: Ring,
    /// The SRQ (its QPN) this QP receives from instead of its own RQ (minor 15).
    pub srq: Option<u32>,
    /// An SRQ's armed limit (service Srq; 0: not armed).
    pub srq_limit: u32,
    /// A UD QP's Q_Key (minor 16).
    pub qkey: u32,
}

impl Qp {
    pub fn new() -> Qp {
        Qp {
            state: QpState::Reset,
            service: Service::Rc,
            err_reason: 0,
            pd: 0,
            send_cqn: 0,
            recv_cqn: 0,
            dest_qpn: 0,
            access: 0,
            rnr_retry: 0,
            rnr_timer_us: 0,
            sq: Ring::default(),
            rq: Ring::default(),
            srq: None,
            srq_limit: 0,
            qkey: 0,
        }
    }

    /// Whether the QP holds resources (CQ references) that block destroying its CQs.
    pub fn is_active(&self) -> bool {
        self.state != QpState::Reset
    }

    /// Whether this QP, out of RESET, completes on CQ `cqn` (an SRQ has no CQs).
    pub fn uses_cq(&self, cqn: u32) -> bool {
        self.is_active() && self.service != Service::Srq && (self.send_cqn == cqn || self.recv_cqn == cqn)
    }
}

/// The destination QP in a QP context's dest_qpn (bits [31:24] are the service).
pub const DEST_QPN_MASK: u32 = 0x00ff_ffff;

/// A QP's transport service (QP_TYPE_*).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Service {
    /// Reliable Connection: acknowledged, retried, READs and atomics.
    Rc,
    /// Unreliable Connection: SEND and WRITE, never acknowledged (IBA 9.8.4).
    Uc,
    /// Not a QP: a shared receive queue under this QPN (minor 15), its ring the `rq`.
    Srq,
    /// Unreliable Datagram (minor 16): one-packet SENDs to any QP named per WQE.
    Ud,
}

impl Service {
    /// The service a QP context's dest_qpn bits [31:24] name, if any.
    pub fn from_abi(v: u8) -> Option<Service> {
        match v {
            QP_TYPE_RC => Some(Service::Rc),
            QP_TYPE_UC => Some(Service::Uc),
            QP_TYPE_SRQ => Some(Service::Srq),
            QP_TYPE_UD => Some(Service::Ud),
            _ => None,
        }
    }
}

impl Default for Qp {
    fn default() -> Self {
        Qp::new()
    }
}

#[cfg(test)]
mod tests {
    use super::QpState::*;
    use super::*;

    const ALL: [QpState; 5] = [Reset, Init, Rtr, Rts, Err];

    #[test]
    fn legal_edges() {
        for (from, to) in [(Reset, Init), (Init, Init), (Init, Rtr), (Rtr, Rts), (Rts, Rts)] {
            assert!(transition_allowed(from, to), "{from:?} -> {to:?}");
        }
        for from in ALL {
            assert!(transition_allowed(from, Reset) && transition_allowed(from, Err), "{from:?} -> RESET/ERR");
        }
    }

    #[test]
    fn every_illegal_edge_is_refused() {
        let illegal = [(Reset, Rtr), (Reset, Rts), (Init, Rts), (Rtr, Init), (Rtr, Rtr), (Rts, Init), (Rts, Rtr), (Err, Init), (Err, Rtr), (Err, Rts)];
        for (from, to) in illegal {
            assert!(!transition_allowed(from, to), "{from:?} -> {to:?} must be refused");
        }
        let all_edges = ALL.iter().flat_map(|f| ALL.iter().map(move |t| (*f, *t)));
        let legal = all_edges.filter(|(f, t)| transition_allowed(*f, *t)).count();
        assert_eq!(legal + illegal.len(), 25, "every edge of the 5x5 table is covered");
        assert_eq!(legal, 15, "5 table edges, 5 to RESET, 5 to ERR");
        assert_eq!(transition(Rts, Rts), Some(Edge::Access));
        assert_eq!(transition(Init, Rtr), Some(Edge::Connect));
        assert_eq!(transition(Rtr, Err), Some(Edge::Error));
    }

    #[test]
    fn ring_indices_wrap_and_overrun_is_refused() {
        let mut r = Ring { addr: 0x1000, log_size: 2, log_stride: 6, pi: 0xfffe, ci: 0xfffe };
        assert!(r.ring(0x0002), "4 outstanding across the 16-bit wrap");
        assert_eq!(r.pending(), 4);
        assert!(!r.ring(0x0003), "5 outstanding in a ring of 4");
        assert_eq!(r.slot_addr(0xffff), Some(0x1000 + 3 * 64));
        assert_eq!(r.slot_addr(0x0000), Some(0x1000));
        let top = Ring { addr: u64::MAX - 10, log_size: 2, log_stride: 6, pi: 0, ci: 0 };
        assert_eq!(top.slot_addr(1), None, "ring address arithmetic never wraps");
    }

    #[test]
    fn abi_state_round_trip() {
        for s in ALL {
            assert_eq!(QpState::from_abi(s.to_abi()), Some(s));
        }
        assert_eq!(QpState::from_abi(4), None);
        assert_eq!(QpState::from_abi(0xff), None);
    }
}
