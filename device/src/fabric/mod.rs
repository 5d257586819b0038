//! The simulated network between nodes: RoCEv2 over UDP (IBA annex A17).
pub mod packet;
