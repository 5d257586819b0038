//! The fabric as a fuzzed engine sees it: a [`Wire`] that records what the engine sends
//! (destination and packet), keeping the newest `keep` packets, for the harness to hand
//! back, inspect or count.

use rnic_emu_core::rnic::fabric::packet::Packet;
use rnic_emu_core::rnic::verbs::transport::{Dest, Wire};
use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Mutex, MutexGuard};

pub struct RecordingWire {
    address: Ipv4Addr,
    keep: usize,
    sent: Mutex<VecDeque<(IpAddr, Packet)>>,
}

impl RecordingWire {
    pub fn new(address: Ipv4Addr, keep: usize) -> RecordingWire {
        RecordingWire { address, keep, sent: Mutex::new(VecDeque::new()) }
    }

    /// The packets recorded, oldest first.
    pub fn sent(&self) -> MutexGuard<'_, VecDeque<(IpAddr, Packet)>> {
        self.sent.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Wire for RecordingWire {
    fn address(&self) -> Ipv4Addr {
        self.address
    }

    fn send(&self, dst: &Dest, pkt: &Packet) {
        let mut q = self.sent();
        if q.len() == self.keep {
            q.pop_front();
        }
        q.push_back((dst.ip, pkt.clone()));
    }
}
