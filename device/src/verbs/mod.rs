//! The RNIC's verbs engine: queue pairs, completion queues, memory regions and the RDMA
//! operations between them (InfiniBand Architecture vol. 1, ch. 9-11, as Linux's rxe
//! models it), driven by the doorbells and commands of BAR0.
pub mod abi;
pub mod copy;
pub mod cq;
pub mod dbpage;
pub mod engine;
pub mod exec;
pub mod mr;
pub mod qp;
pub mod rc;
pub mod stats;
pub mod worker;
#[cfg(test)]
mod tests;
