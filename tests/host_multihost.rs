//! Host-level tests of the fabric's VXLAN and TAP backends against real networks, no QEMU
//! (docs/fabric.md, "Backends: multicast, VXLAN, TAP"). Each test makes network
//! namespaces of its own (`rnic_emu_testkit::netns`: named after this process's pid,
//! deleted at the end, failed or not), runs `rnic-emu serve` inside them with `ip netns
//! exec` (each server ended by its pid) and drives the RNICs with `hostdrv`:
//!
//! - two namespaces as two hosts, joined by a veth pair, a node server in each on a VXLAN
//!   segment to the other's veth address: an RDMA WRITE between them (bytes compared), the
//!   counters read back, every RoCE frame seen on the veth inside VXLAN (VNI, ports, the
//!   inner frame byte for byte as the server captured it), and datagrams from a stranger
//!   and with a wrong VNI dropped and counted;
//! - Linux's own vxlan device as the far end: ARP and ICMP echo through the Ethernet rings,
//!   the replies parsed;
//! - a TAP device in a Linux bridge as the far end: the same, and without CAP_NET_ADMIN a
//!   clear error.
//!
//! Needs root and iproute2 (veth, vxlan, bridge, tun): skipped, saying why, otherwise.

mod common;
use common::*;
use rnic_emu_core::regs::rnic::ETH_MAC;
use rnic_emu_testkit::hostdrv::{HostDriver, NodePair, PairOptions, ServerProcess};
use rnic_emu_testkit::netns::{self, Capture, Netns};
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

type Mac = [u8; 6];

const VNI: u32 = 42;
/// The underlay: veth addresses of namespaces A and B (and one more of B: a stranger).
const UNDER_A: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
const UNDER_B: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);
const STRANGER: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 3);
/// The fabric (overlay): the RNICs' addresses, and Linux's on the same segment.
const NODE: [Ipv4Addr; 2] = [Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2)];
const LINUX: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 99);
/// Bound of every wait on the network.
const WAIT: Duration = Duration::from_secs(20);
/// How long an ARP request or echo waits for its answer before it is sent again.
const RESEND: Duration = Duration::from_millis(500);

fn skipped() -> bool {
    match netns::unavailable() {
        Some(why) => {
            eprintln!("skipped: {why}");
            true
        }
        None => false,
    }
}

fn test_dir() -> tempfile::TempDir {
    let keep = std::env::var_os("RNIC_EMU_KEEP_TEST_DIR").is_some();
    let dir = tempfile::Builder::new().disable_cleanup(keep).tempdir().unwrap();
    eprintln!("test directory (server logs): {}", dir.path().display());
    dir
}

fn options(capture: bool) -> PairOptions<'static> {
    // 2^12 x 4.096 us (16.8 ms) of ACK timeout: rides out a loaded 2-core machine.
    PairOptions { ips: NODE, node_toml: "", retry_cnt: 7, timeout: 12, capture, rnr_retry: 7, eth_mtu: 0 }
}

/// Starts node `node` of `topology` inside `ns` on `segment`, its sockets in `<dir>/<node>`.
fn serve_in(ns: &Netns, topology: &Path, node: &str, dir: &Path, segment: &str, pcap: Option<&Path>) -> anyhow::Result<ServerProcess> {
    let sock = dir.join(node);
    std::fs::create_dir_all(&sock)?;
    let cmd = ServerProcess::node_command(Path::new(bin()), topology, node, &sock, None, pcap, Some(segment));
    ServerProcess::spawn(ns.exec(&cmd), topology, node, &sock)
}

fn stats(s: &ServerProcess) -> serde_json::Value {
    rnic_emu_server::serve::query_stats(&s.socket_dir, &s.node).unwrap()
}

fn counter(all: &serde_json::Value, entry: &str, name: &str) -> u64 {
    all[entry][name].as_u64().unwrap_or_else(|| panic!("no counter {entry}.{name} in {all}"))
}

/// Two namespaces joined by a veth pair: `va` (UNDER_A/24) in A, `vb` (UNDER_B/24) in B.
fn two_hosts(tag: &str) -> [Netns; 2] {
    let a = Netns::create(&format!("{tag}a")).unwrap();
    let b = Netns::create(&format!("{tag}b")).unwrap();
    netns::veth_pair(&a, "va", &format!("{UNDER_A}/24"), &b, "vb", &format!("{UNDER_B}/24")).unwrap();
    [a, b]
}

// ---- frames ----

fn ipv4(b: &[u8]) -> Ipv4Addr {
    Ipv4Addr::new(b[0], b[1], b[2], b[3])
}

/// The Internet checksum (RFC 1071) of `b`.
fn checksum(b: &[u8]) -> u16 {
    let mut sum: u32 = b.chunks(2).map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]))).sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

fn arp_request(mac: Mac, ip: Ipv4Addr, target: Ipv4Addr) -> Vec<u8> {
    let mut f = [&[0xff; 6][..], &mac, &[0x08, 0x06]].concat();
    f.extend_from_slice(&[0, 1, 0x08, 0x00, 6, 4, 0, 1]); // Ethernet, IPv4, request
    f.extend_from_slice(&mac);
    f.extend_from_slice(&ip.octets());
    f.extend_from_slice(&[0; 6]);
    f.extend_from_slice(&target.octets());
    f.resize(60, 0);
    f
}

/// An ARP reply's (sender MAC, sender IP, target MAC, target IP), and the frame's
/// destination MAC.
fn arp_reply(f: &[u8]) -> Option<(Mac, Ipv4Addr, Mac, Ipv4Addr, Mac)> {
    if f.len() < 42 || f[12..14] != [0x08, 0x06] || f[14..22] != [0, 1, 0x08, 0x00, 6, 4, 0, 2] {
        return None;
    }
    let mac = |at: usize| -> Mac { f[at..at + 6].try_into().unwrap() };
    Some((mac(22), ipv4(&f[28..32]), mac(32), ipv4(&f[38..42]), mac(0)))
}

fn echo_request(src: (Mac, Ipv4Addr), dst: (Mac, Ipv4Addr), id: u16, seq: u16, payload: &[u8]) -> Vec<u8> {
    let mut icmp = [&[8u8, 0, 0, 0][..], &id.to_be_bytes(), &seq.to_be_bytes(), payload].concat();
    let c = checksum(&icmp);
    icmp[2..4].copy_from_slice(&c.to_be_bytes());
    let total = (20 + icmp.len()) as u16;
    let mut ip = [&[0x45u8, 0][..], &total.to_be_bytes(), &[0x12, 0x34, 0x40, 0, 64, 1, 0, 0], &src.1.octets(), &dst.1.octets()].concat();
    let c = checksum(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    [&dst.0[..], &src.0, &[0x08, 0x00], &ip, &icmp].concat()
}

/// Whether `f` is the echo reply to [`echo_request`] `(src, dst, id, seq, payload)`:
/// addresses swapped, both checksums good, the payload back.
fn is_echo_reply(f: &[u8], src: (Mac, Ipv4Addr), dst: (Mac, Ipv4Addr), id: u16, seq: u16, payload: &[u8]) -> bool {
    if f.len() < 14 + 20 + 8 || f[12..14] != [0x08, 0x00] || f[14] != 0x45 || f[14 + 9] != 1 {
        return false;
    }
    let total = usize::from(u16::from_be_bytes([f[16], f[17]]));
    let (ip, Some(icmp)) = (&f[14..34], f.get(34..14 + total)) else { return false };
    f[..6] == src.0
        && f[6..12] == dst.0
        && checksum(ip) == 0
        && ipv4(&ip[12..16]) == dst.1
        && ipv4(&ip[16..20]) == src.1
        && checksum(icmp) == 0
        && icmp[..2] == [0, 0]
        && icmp[4..6] == id.to_be_bytes()
        && icmp[6..8] == seq.to_be_bytes()
        && &icmp[8..] == payload
}

/// The port's MAC (`ETH_MAC`, little-endian in the register).
fn port_mac(h: &mut HostDriver) -> Mac {
    h.r64(ETH_MAC).unwrap().to_le_bytes()[..6].try_into().unwrap()
}

/// Sends `frame` through the Ethernet rings every [`RESEND`] until a received frame is one
/// `pick` returns something for (at most [`WAIT`]), as a host's ARP or ping would: the
/// first frame may meet a path not up yet (a bridge port whose carrier the kernel has not
/// noticed, an underlay address not resolved).
fn exchange<T>(h: &mut HostDriver, frame: &[u8], what: &str, mut pick: impl FnMut(&[u8]) -> Option<T>) -> T {
    let deadline = Instant::now() + WAIT;
    let (mut seen, mut sent) = (0, 0);
    loop {
        h.eth_send(frame).unwrap();
        h.eth_tx_done(WAIT).unwrap();
        sent += 1;
        let resend = Instant::now() + RESEND;
        while Instant::now() < resend {
            for f in h.eth_recv().unwrap() {
                seen += 1;
                if let Some(t) = pick(&f) {
                    return t;
                }
            }
            assert!(Instant::now() < deadline, "no {what} within {WAIT:?} ({sent} sent, {seen} other frames received)");
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

/// Through the Ethernet rings of node 0 (at `NODE[0]`): an ARP request for `LINUX`, whose
/// reply must come from `far_mac`, then an ICMP echo to it, whose reply must come back.
fn arp_and_ping(h: &mut HostDriver, far_mac: Mac) {
    h.eth_up(5).unwrap();
    h.eth_post_rx(32).unwrap();
    let mac = port_mac(h);
    let (sha, spa, tha, tpa, dst) = exchange(h, &arp_request(mac, NODE[0], LINUX), "ARP reply", arp_reply);
    assert_eq!((sha, spa), (far_mac, LINUX), "Linux answers for its address with its MAC");
    assert_eq!((tha, tpa, dst), (mac, NODE[0], mac), "to the port, unicast");
    let payload: Vec<u8> = (0..56u8).collect();
    let (us, them) = ((mac, NODE[0]), (far_mac, LINUX));
    exchange(h, &echo_request(us, them, 0x7e57, 1, &payload), "ICMP echo reply", |f| is_echo_reply(f, us, them, 0x7e57, 1, &payload).then_some(()));
}

// ---- what the veth saw ----

/// One UDP datagram of the underlay, as captured.
struct Udp {
    outgoing: bool,
    src: SocketAddrV4,
    dst: SocketAddrV4,
    payload: Vec<u8>,
}

fn udp_datagrams(frames: &[netns::Frame]) -> Vec<Udp> {
    let mut out = Vec::new();
    for f in frames {
        let d = &f.data;
        if d.len() < 42 || d[12..14] != [0x08, 0x00] || d[14] >> 4 != 4 || d[23] != 17 {
            continue;
        }
        let ihl = usize::from(d[14] & 0xf) * 4;
        let frag = u16::from_be_bytes([d[20], d[21]]) & 0x3fff;
        let udp = 14 + ihl;
        assert_eq!(frag, 0, "the underlay carried a fragment");
        let port = |at: usize| u16::from_be_bytes([d[at], d[at + 1]]);
        let len = usize::from(port(udp + 4));
        out.push(Udp {
            outgoing: f.outgoing,
            src: SocketAddrV4::new(ipv4(&d[26..30]), port(udp)),
            dst: SocketAddrV4::new(ipv4(&d[30..34]), port(udp + 2)),
            payload: d[udp + 8..udp + len].to_vec(),
        });
    }
    out
}

/// Whether an Ethernet frame is RoCEv2 (IPv4, UDP to 4791).
fn is_roce(f: &[u8]) -> bool {
    f.len() > 38 && f[12..14] == [0x08, 0x00] && f[23] == 17 && f[36..38] == 4791u16.to_be_bytes()
}

/// The frames of a pcap file the server wrote.
fn pcap_frames(path: &Path) -> Vec<Vec<u8>> {
    let b = std::fs::read(path).unwrap();
    let mut at = 24;
    let mut out = Vec::new();
    while at + 16 <= b.len() {
        let len = u32::from_le_bytes(b[at + 8..at + 12].try_into().unwrap()) as usize;
        out.push(b[at + 16..at + 16 + len].to_vec());
        at += 16 + len;
    }
    out
}

/// Sends `datagram` to node 0's VTEP from a socket of `ns` at `from`.
fn send_from(ns: &Netns, from: Ipv4Addr, datagram: Vec<u8>) {
    ns.run(move || {
        let s = UdpSocket::bind(SocketAddrV4::new(from, 0)).unwrap();
        s.send_to(&datagram, SocketAddrV4::new(UNDER_A, 4789)).unwrap();
    })
    .unwrap();
}

#[test]
fn rdma_write_between_two_hosts_over_vxlan() {
    if skipped() {
        return;
    }
    let ns = two_hosts("w");
    let dir = test_dir();
    let o = options(true);
    let topo = NodePair::write_topology(dir.path(), &o).unwrap();
    let segs = [format!("vxlan:{VNI}@{UNDER_A},remote={UNDER_B}"), format!("vxlan:{VNI}@{UNDER_B},remote={UNDER_A}")];
    let pcaps: Vec<PathBuf> = (0..2).map(|i| dir.path().join(format!("node{i}.pcap"))).collect();
    let servers = [0, 1].map(|i| serve_in(&ns[i], &topo, &format!("node{i}"), dir.path(), &segs[i], Some(&pcaps[i])).unwrap());
    let capture = Capture::start(&ns[0], "va").unwrap();
    let mut p = NodePair::connect(servers, &o, segs[0].clone(), None).unwrap();
    // WRITE 1 MiB + 5 bytes node 0 -> node 1: 1025 packets of the 1024-byte path MTU.
    let len = (1 << 20) + 5;
    let data = pattern(3, 0, len);
    p.h[0].ram.write(p.buf[0], &data).unwrap();
    p.write(0, 0, len as u64, 7, true).unwrap();
    let c = p.h[0].wait(1, WAIT).unwrap();
    assert_eq!((c.status, c.wr_id, c.byte_len), (rnic_emu_core::contract::abi::WC_SUCCESS, 7, len as u32));
    let mut got = vec![0u8; len];
    p.h[1].ram.read(p.buf[1], &mut got).unwrap();
    assert!(got == data, "node 1 holds what node 0 wrote");
    let frames = capture.stop().unwrap();
    // The counters: the RNICs', and the segments' (every datagram VXLAN, nothing refused).
    let s = [stats(&p.servers[0]), stats(&p.servers[1])];
    assert!(counter(&s[0], "node0-rnic0", "pkts_sent") >= 1025, "{}", s[0]);
    assert!(counter(&s[1], "node1-rnic0", "pkts_received") >= 1025, "{}", s[1]);
    assert!(counter(&s[0], "node0-segment", "tx_datagrams") >= 1025);
    assert!(counter(&s[1], "node1-segment", "rx_datagrams") >= 1025);
    for (i, all) in s.iter().enumerate() {
        let seg = format!("node{i}-segment");
        assert_eq!((counter(all, &seg, "rx_foreign"), counter(all, &seg, "rx_bad_header")), (0, 0), "{all}");
        assert_eq!(counter(all, &seg, "learned"), 1, "the other node's MAC");
        assert_eq!(counter(all, &format!("node{i}-rnic0"), "eth_rx_errors"), 0);
    }
    // On the veth: RoCE only inside VXLAN, from port 4789 to port 4789, VNI 42, and every
    // inner frame node 0 sent is one its capture holds.
    let udp = udp_datagrams(&frames);
    assert!(udp.iter().all(|u| u.dst.port() != 4791 && u.src.port() != 4791), "no bare RoCE on the underlay");
    let vx: Vec<&Udp> = udp.iter().filter(|u| u.dst.port() == 4789).collect();
    let (out, back): (Vec<&&Udp>, Vec<&&Udp>) = vx.iter().partition(|u| u.outgoing);
    assert!(out.iter().all(|u| u.src == SocketAddrV4::new(UNDER_A, 4789) && u.dst == SocketAddrV4::new(UNDER_B, 4789)));
    assert!(back.iter().all(|u| u.src == SocketAddrV4::new(UNDER_B, 4789) && u.dst == SocketAddrV4::new(UNDER_A, 4789)));
    let vni = VNI.to_be_bytes();
    assert!(vx.iter().all(|u| u.payload[..8] == [0x08, 0, 0, 0, vni[1], vni[2], vni[3], 0]), "RFC 7348 header, our VNI");
    let sent_roce: Vec<&[u8]> = out.iter().map(|u| &u.payload[8..]).filter(|f| is_roce(f)).collect();
    assert!(sent_roce.len() >= 1025, "{} RoCE frames out in VXLAN", sent_roce.len());
    assert!(back.iter().any(|u| is_roce(&u.payload[8..])), "acknowledgements came back in VXLAN");
    let captured: std::collections::HashSet<Vec<u8>> = pcap_frames(&pcaps[0]).into_iter().collect();
    assert!(sent_roce.iter().all(|f| captured.contains(*f)), "each inner frame byte for byte as node 0 sent it");
    // A stranger's datagram (claiming node 1's MAC) and one with another VNI from node 1's
    // address: dropped, counted, nothing learned; the WRITE path still works.
    let ns_b = &ns[1];
    ns_b.ip(&["addr", "add", &format!("{STRANGER}/24"), "dev", "vb"]).unwrap();
    let mut forged = [&[0xff; 6][..], &rnic_emu_core::rnic::fabric::frame::mac_of_ipv4(NODE[1]), &[0x08, 0x06]].concat();
    forged.resize(60, 0);
    let with_vni = |v: u32| [&[0x08, 0, 0, 0][..], &v.to_be_bytes()[1..], &[0], &forged].concat();
    send_from(ns_b, STRANGER, with_vni(VNI));
    send_from(ns_b, UNDER_B, with_vni(VNI + 1));
    let s0 = || stats(&p.servers[0]);
    assert!(wait_until(WAIT, || counter(&s0(), "node0-segment", "rx_foreign") == 1 && counter(&s0(), "node0-segment", "rx_bad_header") == 1), "{}", s0());
    assert_eq!(counter(&s0(), "node0-rnic0", "eth_rx_errors"), 2);
    assert_eq!(counter(&s0(), "node0-segment", "learned"), 1);
    p.write(0, 0, 4096, 8, true).unwrap();
    assert_eq!(p.h[0].wait(1, WAIT).unwrap().status, rnic_emu_core::contract::abi::WC_SUCCESS);
}

#[test]
fn linux_vxlan_device_answers_arp_and_ping() {
    if skipped() {
        return;
    }
    let ns = two_hosts("x");
    let [a, b] = &ns;
    let vx = ["link", "add", "vx0", "type", "vxlan", "id", &VNI.to_string(), "dstport", "4789"];
    if let Err(e) = b.ip(&[&vx[..], &["remote", &UNDER_A.to_string(), "local", &UNDER_B.to_string(), "dev", "vb"]].concat()) {
        eprintln!("skipped: no vxlan device here: {e}");
        return;
    }
    b.ip(&["addr", "add", &format!("{LINUX}/24"), "dev", "vx0"]).unwrap();
    b.ip(&["link", "set", "vx0", "up"]).unwrap();
    let far_mac = b.mac("vx0").unwrap();
    let dir = test_dir();
    let topo = NodePair::write_topology(dir.path(), &options(false)).unwrap();
    let server = serve_in(a, &topo, "node0", dir.path(), &format!("vxlan:{VNI}@{UNDER_A},remote={UNDER_B}"), None).unwrap();
    let mut h = HostDriver::connect(&server.socket("rnic0"), 16 << 20).unwrap();
    arp_and_ping(&mut h, far_mac);
    let s = stats(&server);
    assert_eq!((counter(&s, "node0-segment", "rx_foreign"), counter(&s, "node0-segment", "rx_bad_header")), (0, 0), "{s}");
    assert!(counter(&s, "node0-segment", "learned") >= 1, "vx0's MAC, behind B's VTEP");
    assert!(counter(&s, "node0-segment", "tx_flooded") >= 1, "the ARP request went to every VTEP");
    // Linux learned the port's MAC behind A's VTEP, as from any VTEP.
    let o = std::process::Command::new("bridge").args(["-n", &b.name, "fdb", "show", "dev", "vx0"]).output();
    if let Ok(o) = o {
        let mac = port_mac(&mut h).map(|x| format!("{x:02x}")).join(":");
        let fdb = String::from_utf8_lossy(&o.stdout);
        assert!(fdb.lines().any(|l| l.starts_with(&mac) && l.contains(&format!("dst {UNDER_A}"))), "{fdb}");
    }
}

#[test]
fn tap_device_in_a_linux_bridge_answers_arp_and_ping() {
    if skipped() {
        return;
    }
    let ns = Netns::create("t").unwrap();
    if let Err(e) = ns.ip(&["tuntap", "add", "dev", "rtap0", "mode", "tap"]) {
        eprintln!("skipped: no TAP device here: {e}");
        return;
    }
    ns.ip(&["link", "add", "br0", "type", "bridge"]).unwrap();
    ns.ip(&["link", "set", "rtap0", "master", "br0"]).unwrap();
    ns.ip(&["addr", "add", &format!("{LINUX}/24"), "dev", "br0"]).unwrap();
    ns.ip(&["link", "set", "br0", "up"]).unwrap();
    ns.ip(&["link", "set", "rtap0", "up"]).unwrap();
    let far_mac = ns.mac("br0").unwrap();
    let dir = test_dir();
    let topo = NodePair::write_topology(dir.path(), &options(false)).unwrap();
    let server = serve_in(&ns, &topo, "node0", dir.path(), "tap:rtap0", None).unwrap();
    let mut h = HostDriver::connect(&server.socket("rnic0"), 16 << 20).unwrap();
    arp_and_ping(&mut h, far_mac);
    let s = stats(&server);
    assert!(counter(&s, "node0-segment", "rx_datagrams") >= 2 && counter(&s, "node0-segment", "tx_datagrams") >= 2, "{s}");
    assert_eq!(counter(&s, "node0-rnic0", "eth_rx_errors"), 0);
}

#[test]
fn tap_without_cap_net_admin_is_a_clear_error() {
    if skipped() {
        return;
    }
    let ns = Netns::create("p").unwrap();
    let dir = test_dir();
    let topo = NodePair::write_topology(dir.path(), &options(false)).unwrap();
    let sock = dir.path().join("node0");
    std::fs::create_dir_all(&sock).unwrap();
    let serve = ServerProcess::node_command(Path::new(bin()), &topo, "node0", &sock, None, None, Some("tap:rtap1"));
    // Root without CAP_NET_ADMIN (dropped from the bounding set before the exec).
    let mut cmd = std::process::Command::new("setpriv");
    cmd.args(["--bounding-set", "-net_admin", "--inh-caps", "-net_admin", "--"]).arg(serve.get_program()).args(serve.get_args());
    cmd.envs(serve.get_envs().filter_map(|(k, v)| v.map(|v| (k.to_owned(), v.to_owned()))));
    match ServerProcess::spawn(ns.exec(&cmd), &topo, "node0", &sock) {
        Ok(_) => panic!("the server came up on a TAP device without CAP_NET_ADMIN"),
        Err(e) => {
            let e = format!("{e:#}");
            if e.contains("setpriv") && !e.contains("TAP") {
                eprintln!("skipped: setpriv cannot drop capabilities here: {e}");
                return;
            }
            assert!(e.contains("rtap1") && e.contains("CAP_NET_ADMIN"), "{e}");
        }
    }
}
