//! Guest-level test of the RNIC's Ethernet port (docs/fabric.md, docs/programming.md "The
//! Ethernet port"): two guests of the two-node topology use `reth0` as a NIC. ARP resolves
//! the peer, IPv4 and IPv6 ping it (1500-byte, then 9000-byte MTU: 9014-byte frames both
//! ways), a TCP stream of 16 MiB of random bytes crosses it with the same SHA-256 at both
//! ends, and iperf3 runs over it and, for comparison in the same guests, over their
//! virtio-net link; `ethtool -i`, `-S` and the link state answer from the device, `-k`
//! shows the transmit offloads on (scatter/gather, checksum, TSO) and the sender's TSO
//! counters show the device cut its frames into segments. The host reads the port's
//! counters back.

mod common;
use common::*;
use serde_json::Value;

/// The script of node `node`.
fn script(node: usize) -> String {
    let (me, peer) = if node == 0 { (11, 12) } else { (12, 11) };
    let s = format!(
        "ip link set reth0 up; echo 0 > /proc/sys/net/ipv6/conf/reth0/accept_dad
         ip -6 addr add fd00::{me}/64 dev reth0 || echo failed: ipv6 address
         ethtool -i reth0 | sed 's/^/ethtool-i: /'
         ethtool -k reth0 | grep -E '^(tx-checksumming|scatter-gather|tcp-segmentation-offload):' | sed 's/^/offload: /'
         ethtool reth0 | grep -E 'Speed|Link detected' | sed 's/^[[:space:]]*/ethtool: /'
         echo \"pci-rnic: $(rnic-bar find rnic)\"
         rnic-kv put up{node} 1; rnic-kv get up{} 120000 >/dev/null
         ping -c 5 -W 5 10.0.0.{peer} | sed 's/^/ping4: /'
         ping -6 -c 3 -W 5 fd00::{peer} | sed 's/^/ping6: /'
         ip neigh show dev reth0 | sed 's/^/neigh: /'
         rnic-kv put pinged{node} 1; rnic-kv get pinged{} 120000 >/dev/null
         ip link set reth0 mtu 9000 || echo failed: mtu 9000
         rnic-kv put mtu{node} 1; rnic-kv get mtu{} 120000 >/dev/null
         ping -s 8972 -c 3 -W 5 10.0.0.{peer} | sed 's/^/jumbo: /'
         ip link show reth0 | grep -o 'mtu [0-9]*' | sed 's/^/link: /'
",
        1 - node,
        1 - node,
        1 - node
    );
    let s = s + &format!("modprobe virtio_net && ip link set eth0 up && ip addr add 10.9.0.{}/24 dev eth0 || echo failed: eth0\n", node + 1);
    // Python's socket module without the idna codec in the image: addresses as bytes.
    let s = if node == 0 {
        s + "python3 -c 'import socket,hashlib
s=socket.socket();s.settimeout(120);s.bind((b\"0.0.0.0\",5001));s.listen();c,_=s.accept();c.settimeout(60);h=hashlib.sha256();n=0
while True:
    b=c.recv(1<<16)
    if not b: break
    h.update(b);n+=len(b)
print(\"got-sha:\",h.hexdigest(),n)' & pid=$!; rnic-kv put tcp up; wait $pid || echo failed: tcp receive
              for dev in reth0 eth0; do
                  echo \"cpu-before-$dev: $(head -1 /proc/stat)\"; iperf3 -s -1 -p 5201 >/dev/null 2>&1 & pid=$!; rnic-kv put iperf-$dev up; wait $pid; echo \"cpu-after-$dev: $(head -1 /proc/stat)\"
              done
              rnic-kv put done 1\n"
    } else {
        s + "head -c 16777216 /dev/urandom > /tmp/blob; echo \"sent-sha: $(sha256sum < /tmp/blob | cut -d' ' -f1) $(wc -c < /tmp/blob)\"
              rnic-kv get tcp 120000 >/dev/null
              python3 -c 'import socket,time
for i in range(60):
    c=socket.socket();c.settimeout(60)
    try: c.connect((b\"10.0.0.11\",5001)); break
    except ConnectionRefusedError: c.close(); time.sleep(1)
c.sendall(open(\"/tmp/blob\",\"rb\").read());c.close()' || echo failed: tcp send
              for dev in reth0 eth0; do
                  peer=10.0.0.11; [ $dev = eth0 ] && peer=10.9.0.1
                  rnic-kv get iperf-$dev 120000 >/dev/null
                  echo \"cpu-before-$dev: $(head -1 /proc/stat)\"; n=0; until iperf3 -c $peer -p 5201 -t 3 -J > /tmp/iperf-$dev; do
                      grep -q 'unable to connect' /tmp/iperf-$dev && [ $n -lt 60 ] || { echo failed: iperf3 $dev; break; }
                      n=$((n + 1)); sleep 1
                  done
                  echo \"cpu-after-$dev: $(head -1 /proc/stat)\"; echo \"iperf-$dev: $(tr -d '\\n\\t ' < /tmp/iperf-$dev | grep -o '\"sum_received\":{[^}]*' | grep -o '\"bits_per_second\":[0-9.e+]*' | cut -d: -f2)\"
                  echo \"iperf-sender-$dev: $(tr -d '\\n\\t ' < /tmp/iperf-$dev | grep -o '\"\\(max_snd_cwnd\\|max_rtt\\|min_rtt\\|mean_rtt\\|max_snd_wnd\\)\":[0-9]*' | tr '\\n' ' ')\"
                  echo \"iperf-retransmits-$dev: $(tr -d '\\n\\t ' < /tmp/iperf-$dev | grep -o '\"sum_sent\":{[^}]*' | grep -o '\"retransmits\":[0-9]*' | cut -d: -f2)\"
              done
              rnic-kv get done 120000 >/dev/null\n"
    };
    s + "ethtool -S reth0 | sed 's/^[[:space:]]*/stat: /'
         dmesg | grep -cE 'WARNING|BUG:|Oops' | sed 's/^/kernel-warnings: /'\n"
}

/// The share of the guest's CPU time that was not idle between its `cpu-before-DEV` and
/// `cpu-after-DEV` lines (the `cpu` line of /proc/stat: user nice system idle iowait ...).
fn cpu_busy(lines: &[String], dev: &str) -> Option<f64> {
    let ticks = |tag: &str| -> Option<Vec<u64>> {
        let rest = line_after(lines, &format!("cpu-{tag}-{dev}: cpu "))?;
        rest.split_whitespace().map(|v| v.parse().ok()).collect()
    };
    let (a, b) = (ticks("before")?, ticks("after")?);
    let d: Vec<u64> = b.iter().zip(&a).map(|(x, y)| x.saturating_sub(*y)).collect();
    let total: u64 = d.iter().sum();
    let idle = d.get(3)? + d.get(4).copied().unwrap_or(0);
    (total > 0).then(|| 1.0 - idle as f64 / total as f64)
}

/// Whether ping (busybox's or iputils') printed under `tag` that all `n` echoes came back.
fn echoed(lines: &[String], tag: &str, n: u32) -> bool {
    let sent = format!("{tag}: {n} packets transmitted, {n} ");
    lines.iter().any(|l| l.starts_with(&sent) && l.contains("received") && l.contains(" 0% packet loss"))
}

/// The value of `ethtool -S` statistic `name`.
fn stat(lines: &[String], name: &str) -> u64 {
    let want = format!("stat: {name}: ");
    lines.iter().find_map(|l| l.strip_prefix(want.as_str())).and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("no ethtool statistic {name}"))
}

#[test]
fn reth0_carries_arp_ipv4_ipv6_tcp_and_jumbo_frames_between_two_guests() {
    ensure_image();
    let stats = tempfile::NamedTempFile::new().unwrap();
    let out = std::process::Command::new(bin())
        .args(["run", "--no-build", "--timeout", "900", "--topology"])
        .arg(topology("two-node"))
        .arg("--stats")
        .arg(stats.path())
        .args(["--on", "0", &script(0), "--on", "1", &script(1)])
        .output()
        .expect("running rnic-emu run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "both guests ran their script");
    assert!(!stdout.contains("failed:"), "a guest command failed");
    let peer_mac = |node: usize| format!("02:e1:0a:00:00:{:02x}", 11 + (1 - node));
    for node in 0..2 {
        let l = node_lines(&stdout, node);
        let pci = line_after(&l, "pci-rnic: ").expect("rnic-bar find rnic");
        assert_eq!(line_after(&l, "ethtool-i: driver: "), Some("rnic_emu"), "node{node}: ethtool -i");
        assert_eq!(line_after(&l, "ethtool-i: bus-info: "), Some(pci), "node{node}: bus-info is the RNIC's function");
        assert_eq!(line_after(&l, "ethtool: Link detected: "), Some("yes"), "node{node}: carrier");
        assert_eq!(line_after(&l, "ethtool: Speed: "), Some("100000Mb/s"), "node{node}: speed from ETH_SPEED");
        // ARP resolved the peer's MAC on reth0; every echo came back, IPv4 and IPv6.
        assert!(l.iter().any(|x| x.starts_with("neigh: 10.0.0.") && x.contains(&peer_mac(node))), "node{node}: ARP entry for the peer");
        assert!(echoed(&l, "ping4", 5), "node{node}: IPv4 ping");
        assert!(echoed(&l, "ping6", 3), "node{node}: IPv6 ping (neighbour discovery over multicast)");
        assert_eq!(line_after(&l, "link: "), Some("mtu 9000"));
        assert!(echoed(&l, "jumbo", 3), "node{node}: 9000-byte packets (9014-byte frames) both ways");
        assert_eq!(line_after(&l, "kernel-warnings: "), Some("0"), "node{node}: no kernel warnings");
        assert!(stat(&l, "eth_rx_frames") > 0 && stat(&l, "eth_tx_frames") > 0 && stat(&l, "eth_rx_errors") == 0, "node{node}: the device's port counters");
        // The transmit offloads of minor 9 are on (the driver found CAP_ETH_OFFLOAD).
        for feature in ["tx-checksumming", "scatter-gather", "tcp-segmentation-offload"] {
            assert_eq!(line_after(&l, &format!("offload: {feature}: ")), Some("on"), "node{node}: ethtool -k {feature}");
        }
        assert_eq!(stat(&l, "eth_tx_errors"), 0, "node{node}: no transmitted frame refused");
        // Minor 10's RoCE drops are listed (a missing one panics) and nothing was dropped.
        assert_eq!((stat(&l, "pkey_violations"), stat(&l, "roce_bad_source")), (0, 0), "node{node}: no P_Key or source drops");
    }
    // The sender's TCP streams went out as TSO frames the device cut into segments.
    let l = node_lines(&stdout, 1);
    let (tso, segs) = (stat(&l, "eth_tso_frames"), stat(&l, "eth_tso_segments"));
    eprintln!("node1: {tso} TSO frames in {segs} segments, {} frames checksummed by the device", stat(&l, "eth_tx_csum"));
    assert!(tso > 0 && segs > tso, "node1: TSO frames segmented by the device ({tso} frames, {segs} segments)");
    // The TCP stream: the receiver got exactly the sender's 16 MiB.
    let sent = line_after(&node_lines(&stdout, 1), "sent-sha: ").expect("sender's hash").to_string();
    assert!(sent.ends_with(" 16777216"), "{sent}");
    assert_eq!(line_after(&node_lines(&stdout, 0), "got-sha: "), Some(sent.as_str()), "16 MiB across reth0 over TCP, byte for byte");
    // iperf3 over reth0 beside virtio-net in the same guests (a figure, not a bound).
    let bps = |dev: &str| line_after(&node_lines(&stdout, 1), &format!("iperf-{dev}: ")).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    let (reth, virtio) = (bps("reth0"), bps("eth0"));
    assert!(reth > 0.0 && virtio > 0.0, "iperf3 ran over both: {reth} {virtio}");
    eprintln!("iperf3: reth0 {:.1} Mbit/s, virtio-net {:.1} Mbit/s: {:.2}x", reth / 1e6, virtio / 1e6, reth / virtio);
    let rtx = |dev: &str| line_after(&node_lines(&stdout, 1), &format!("iperf-retransmits-{dev}: ")).unwrap_or("?").to_string();
    eprintln!("iperf3 retransmits: reth0 {}, virtio-net {}", rtx("reth0"), rtx("eth0"));
    // The sender's view (largest congestion window, RTT in us): where a link's time goes.
    for dev in ["reth0", "eth0"] {
        eprintln!("iperf3 sender over {dev}: {}", line_after(&node_lines(&stdout, 1), &format!("iperf-sender-{dev}: ")).unwrap_or("?"));
    }
    // Each guest's vCPU time during each stream (from /proc/stat): which end was busy.
    for dev in ["reth0", "eth0"] {
        let busy = |node: usize| cpu_busy(&node_lines(&stdout, node), dev).map_or("?".to_string(), |b| format!("{:.0}%", b * 100.0));
        eprintln!("guest vCPU busy during iperf3 over {dev}: receiver {}, sender {}", busy(0), busy(1));
    }
    // The host's view of the same port: frames both ways on both nodes.
    let json: Value = serde_json::from_str(&std::fs::read_to_string(stats.path()).unwrap()).unwrap();
    let text = json.to_string();
    assert!(text.contains("eth_rx_frames") && text.contains("eth_tx_frames"), "{text}");
}
