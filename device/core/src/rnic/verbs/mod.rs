//! The RNIC's verbs engine: queue pairs, completion queues, memory regions and the RDMA
//! operations between them (InfiniBand Architecture vol. 1, ch. 9-11), cut the way
//! Linux's rxe is: a requester, a responder and a completer, each on its own per-QP
//! state, consulting one opcode table, reaching the peer through a transport (loopback on
//! this engine, or RoCEv2 on the fabric). Driven by the doorbells and commands of BAR0.
//!
//! Layering (no module imports one above it): `runner` -> `engine` -> `requester`/
//! `responder`/`completer`/`datagram` -> `recv`, `transport`, `ctx` -> `wqe`, `opcode`, `qp`, `cq`, `sgl` -> `mr` ->
//! `crate::platform::mem`, `crate::contract` (the descriptor ABI and the counters).
pub mod atomic;
pub mod call;
pub mod clock;
pub mod completer;
pub mod cq;
pub mod ctx;
pub mod datagram;
pub mod dbpage;
pub mod engine;
pub mod events;
pub mod mr;
pub mod opcode;
pub mod qp;
pub mod recv;
pub mod requester;
pub mod responder;
pub mod runner;
pub mod sgl;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_alloc;
#[cfg(test)]
mod tests_atomics;
#[cfg(test)]
mod tests_broken;
#[cfg(test)]
mod tests_calls;
#[cfg(test)]
mod tests_events;
#[cfg(test)]
mod tests_fatal;
#[cfg(test)]
mod tests_faults;
#[cfg(test)]
mod tests_integrity;
#[cfg(test)]
mod tests_limits;
#[cfg(test)]
mod tests_placement;
#[cfg(test)]
mod tests_roles;
#[cfg(test)]
mod tests_srq;
#[cfg(test)]
mod tests_uc;
#[cfg(test)]
mod tests_ud;
pub mod transport;
pub mod wqe;
