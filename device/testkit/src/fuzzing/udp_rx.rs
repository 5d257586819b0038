//! The `udp_rx` target: the fabric port's real receive path. A `FabricPort` joins a VXLAN
//! segment of loopback sockets (its VTEP at 127.252.x.1, its one remote at .2, x from the
//! process id) and real UDP sockets send it the input's datagrams: from the remote VTEP's
//! address and port, from the remote's address but another port (a Linux VTEP's source
//! port is a flow hash), and from a stranger (.3), each behind a VXLAN header with the
//! segment's VNI, another VNI, bad flags, or none. `FabricPort::receive` takes them as the
//! event loop does and hands each frame on (RoCE packets and netdev frames; what the
//! engine and the netdev do with them is the `frame` target's).
//!
//! Checked: no panic; every datagram is received; a frame is handed on only for a
//! datagram from the remote's address with the segment's header, and nothing a stranger
//! sends is handed on or learned.

use rnic_emu_core::contract::counters::Stats;
use rnic_emu_core::platform::topology::NodeFaults;
use rnic_emu_core::rnic::eth::EthShared;
use rnic_emu_core::rnic::fabric::frame::mac_of_ipv4;
use rnic_emu_server::fabric::port::{FabricPort, Rx};
use rnic_emu_server::fabric::segment::SegmentAddr;
use rnic_emu_server::fabric::vxlan::{header, VxlanAddr, VXLAN_PORT};
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::sync::Arc;

const VNI: u32 = 0x4a11;
/// Datagrams one input sends at most (well inside a socket's receive buffer).
const MAX_DATAGRAMS: usize = 64;

fn at(host: u8, port: u16) -> SocketAddrV4 {
    SocketAddrV4::new(Ipv4Addr::new(127, 252, (std::process::id() % 250) as u8, host), port)
}

/// The input: records `[how, len, len bytes]`. `how` bits 0-1: the sender (0 and 3 the
/// remote VTEP, 1 the remote's address from another port, 2 a stranger); bits 2-3: the
/// header (the segment's VNI, another VNI, bad flags, none).
pub fn udp_rx(data: &[u8]) {
    run(data);
}

/// [`udp_rx`], returning (frames handed on, datagrams from the remote that could carry one).
fn run(data: &[u8]) -> (usize, usize) {
    let eth = Arc::new(EthShared::default());
    let address = Ipv4Addr::new(10, 0, 0, 1);
    eth.reset_config(mac_of_ipv4(address));
    eth.set_mtu(9000);
    let seg = SegmentAddr::Vxlan(VxlanAddr { vni: VNI, local: at(1, VXLAN_PORT), remotes: vec![at(2, VXLAN_PORT)] });
    let stats = Arc::new(Stats::default());
    let Ok(port) = FabricPort::bind(address, seg, eth, &NodeFaults::default(), None, stats) else { return (0, 0) };
    let (Ok(vtep), Ok(other), Ok(stranger)) = (UdpSocket::bind(at(2, VXLAN_PORT)), UdpSocket::bind(at(2, 0)), UdpSocket::bind(at(3, VXLAN_PORT))) else {
        return (0, 0);
    };
    let mut sent = [0usize; 3];
    let mut framed_from_remote = 0;
    let mut rest = data;
    while let [how, len, tail @ ..] = rest {
        if sent.iter().sum::<usize>() == MAX_DATAGRAMS {
            break;
        }
        let n = usize::from(*len).min(tail.len());
        let (body, next) = tail.split_at(n);
        rest = next;
        let mut d = match how >> 2 & 3 {
            0 => header(VNI).to_vec(),
            1 => header(VNI + 1).to_vec(),
            2 => {
                let mut h = header(VNI);
                h[0] = 0x80; // the I flag clear, a reserved one set
                h.to_vec()
            }
            _ => Vec::new(),
        };
        d.extend_from_slice(body);
        let who = usize::from(how & 3) % 3;
        let sock = [&vtep, &other, &stranger][who];
        if sock.send_to(&d, at(1, VXLAN_PORT)).is_ok() {
            sent[who] += 1;
            framed_from_remote += usize::from(who < 2 && how >> 2 & 3 == 0);
        }
    }
    let total: usize = sent.iter().sum();
    let mut handed = 0;
    // Loopback delivers at send time; a few receive rounds take every datagram.
    let mut got = 0;
    for _ in 0..8 {
        let n = port.receive(&mut |_: Rx<'_>| handed += 1);
        got += n;
        if got >= total {
            break;
        }
    }
    let counters: std::collections::HashMap<_, _> = port.segment_counters().collect();
    assert_eq!(counters["rx_datagrams"], total as u64, "every datagram received: {counters:?}");
    assert!(handed <= framed_from_remote, "{handed} frames handed on, {framed_from_remote} datagrams could carry one");
    assert!(counters["rx_foreign"] >= sent[2] as u64, "every stranger's datagram refused: {counters:?} {sent:?}");
    assert!(counters["learned"] <= framed_from_remote as u64, "only the remote's frames teach MACs: {counters:?}");
    (handed, framed_from_remote)
}

/// Seeds: an ARP request from each sender under each header, and junk after a good header.
pub fn seeds() -> Vec<Vec<u8>> {
    let mut arp = [&[0xff; 6][..], &mac_of_ipv4(Ipv4Addr::new(10, 0, 0, 2)), &[0x08, 0x06], &[0u8; 28]].concat();
    arp.resize(60, 0);
    let mut all = Vec::new();
    for how in 0..16u8 {
        all.extend([how, arp.len() as u8]);
        all.extend_from_slice(&arp);
    }
    let junk = vec![0, 40].into_iter().chain((0..40u8).map(|i| i.wrapping_mul(7))).collect();
    vec![all, junk]
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_seeds_run_and_the_remote_arp_is_handed_on() {
        let seeds = super::seeds();
        let (handed, could) = super::run(&seeds[0]);
        // The ARP request under the segment's header from the remote's address (`how` 0 and
        // 3 from the VTEP's port, 1 from another one): handed on; from the stranger (2) or
        // under any other header: not.
        assert_eq!((handed, could), (3, 3));
        super::run(&seeds[1]);
    }
}
