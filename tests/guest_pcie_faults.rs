//! Guest-level test of the driver's reaction to every PCIe-side fault (docs/faults.md):
//! ONE guest boot on one RNIC, the faults injected in turn from the host on the node's
//! control socket while the guest waits between setup and the operation (the rendezvous
//! store is the handshake: the guest tool `rnic-fault-check` publishes its buffers' bus
//! addresses as `ready.<step>` and waits for `go.<step>`). Each step checks what user space
//! saw (completion status and syndrome, errno, bytes, QP state, time), what the driver
//! logged (its dmesg lines) and counted (`driver_stats`, the driver's `fault_stats`), and,
//! for the faults that need one, that the driver recovered by itself (reset or FLR and
//! reload) so that a verified WRITE works again. At the end the module unloads cleanly.
//!
//! The server runs on its own (hostdrv::ServerProcess) and QEMU is started here with the
//! command line `rnic-emu run` uses, with a rendezvous store served by this test.

mod common;
use common::*;
use rnic_emu::kv::KvStore;
use rnic_emu_core::platform::topology::Topology;
use rnic_emu_testkit::hostdrv::ServerProcess;
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

const TOPOLOGY: &str = r#"name = "one-rnic"
description = "one RNIC on a root port (PCIe fault tests)"
[[node]]
name = "node0"
port = [ { id = "rp0", kind = "root-port" } ]
device = [ { id = "rnic0", kind = "rnic", port = "rp0" } ]
"#;

/// The guest's side: every step in order (the host injects between "ready" and "go").
const SCRIPT: &str = r#"
B=$(ls /sys/bus/pci/drivers/rnic_emu | grep '^0000:' | head -n1)
D=/sys/bus/pci/devices/$B
F=/sys/bus/pci/drivers/rnic_emu/fault_stats
fs() { sed -n "s/^$1 //p" $F; }
ds() { sed -n "s/^$1 //p" $D/driver_stats; }
kmsg() { dmesg -c | sed "s/^/kmsg.$1| /"; }
cfg32() { dd if=$D/config bs=4 skip=$(($1 / 4)) count=1 2>/dev/null | od -An -tx4 | tr -d ' '; }
recovered() {
  i=0
  while [ "$(fs recoveries)" -lt "$1" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
  while [ ! -e /dev/rnic_emu0 ] && [ $i -lt 400 ]; do sleep 0.1; i=$((i+1)); done
  echo "recoveries: $(fs recoveries)"
  rnic-fault-check write | sed 's/^scenario: write/scenario: after-'$2'/'
}
check() { n=$1; shift; rnic-fault-check --kv "$n" "$@"; }
dmesg -c >/dev/null
echo "device: $B"
check dma-read write; kmsg dma-read
check dma-write write; kmsg dma-write
check poison write; echo "aer_uncor_status: $(cfg32 0x104)"; kmsg poison
check delay write; kmsg delay
s=$(ds stale_cqes); check duplicate write; echo "stale_cqes_added: $(( $(ds stale_cqes) - s ))"; kmsg duplicate
check msi-lost write; echo "missed_irqs: $(fs missed_irqs)"; kmsg msi-lost
s=$(ds spurious_irqs); check spurious query
i=0; while [ "$(ds spurious_irqs)" -eq "$s" ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done
echo "spurious_added: $(( $(ds spurious_irqs) - s ))"; kmsg spurious
check async query; sleep 0.3; echo "injected: $(fs injected)"; kmsg async
check aer-cor query; sleep 0.5; echo "aer_correctable: $(fs aer_correctable)"; echo "aer_cor_status: $(cfg32 0x110)"
echo "aer_core_total_cor: $(sed -n 's/^TOTAL_ERR_COR //p' $D/aer_dev_correctable 2>/dev/null)"; kmsg aer-cor
check aer-fatal query; recovered 1 aer-fatal; echo "aer_fatal: $(fs aer_fatal)"; kmsg aer-fatal
check cmd-timeout query; recovered 2 cmd-timeout; echo "cmd_timeouts: $(fs cmd_timeouts)"; kmsg cmd-timeout
check fatal --timeout 20000 wait; recovered 3 fatal; kmsg fatal
check fatal-silent --timeout 20000 wait; recovered 4 fatal-silent; kmsg fatal-silent
check flr query; recovered 5 flr; kmsg flr
check link query; rnic-kv put linkseen 1 >/dev/null; recovered 6 link; echo "link_up: $(fs link_up)"; kmsg link
cat $F | sed 's/^/fault_stats./; s/ /: /'
rmmod rnic_emu && echo "rmmod: ok"
"#;

/// Steps whose fault is injected after the guest was told to go (a caller asleep in POLL_CQ
/// with work outstanding when it happens).
const AFTER_GO: &[&str] = &["fatal", "fatal-silent"];

/// What the host injects at each step (`{src}`, `{dst}`: the guest buffers' bus addresses).
const STEPS: &[(&str, &[&str])] = &[
    ("dma-read", &["dma-read-fail addr={src} len=4096"]),
    ("dma-write", &["dma-write-fail addr={dst} len=4096"]),
    ("poison", &["poison addr={src} len=4096"]),
    ("delay", &["cqe-delay ms=1500"]),
    ("duplicate", &["cqe-duplicate deliver"]),
    // The CQE comes late enough for the poller to be asleep, its interrupt is lost.
    ("msi-lost", &["cqe-delay ms=700", "msi-lost count=1"]),
    ("spurious", &["msi-spurious vector=0"]),
    ("async", &["async code=5 index=7"]),
    ("aer-cor", &["aer correctable"]),
    ("aer-fatal", &["aer uncorrectable bit=18"]),
    ("cmd-timeout", &["cmd-timeout"]),
    ("fatal", &["fatal"]),
    // The fatal error's interrupt (and the flushed RECV's) lost: the poller's liveness check
    // must find STATUS_FATAL by itself.
    ("fatal-silent", &["msi-lost count=always", "fatal", "clear"]),
    ("flr", &["flr-required"]),
    ("link", &["link down"]),
];

fn inject(server: &ServerProcess, fault: &str) {
    let reply = rnic_emu_server::serve::control_request(&server.socket_dir, "node0", &format!("pcie {fault}")).unwrap();
    assert!(reply["ok"].is_string(), "pcie {fault}: {reply}");
    eprintln!("host: {}", reply["ok"]);
}

/// The host's side: injects each step's faults when the guest is ready.
fn drive(server: &ServerProcess, store: &KvStore) {
    for (step, faults) in STEPS {
        let ready = store.request(&format!("GET ready.{step} 180000"));
        let addrs = ready.strip_prefix("VAL ").unwrap_or_else(|| panic!("step {step}: the guest never got ready ({ready})"));
        let (src, dst) = addrs.split_once(',').unwrap();
        // Nothing armed for an earlier step that did not fire may leak into this one.
        inject(server, "clear");
        let after = AFTER_GO.contains(step);
        if after {
            assert_eq!(store.request(&format!("PUT go.{step} 1")), "OK");
            std::thread::sleep(Duration::from_millis(700));
        }
        for f in *faults {
            inject(server, &f.replace("{src}", src).replace("{dst}", dst));
        }
        if !after {
            assert_eq!(store.request(&format!("PUT go.{step} 1")), "OK");
        }
        if *step == "link" {
            let seen = store.request("GET linkseen 60000");
            assert!(seen.starts_with("VAL"), "the guest did not report the link down: {seen}");
            std::thread::sleep(Duration::from_millis(500));
            inject(server, "link up");
        }
    }
}

/// The kernel lines the guest printed for `step`.
fn kmsg(out: &str, step: &str) -> String {
    let prefix = format!("kmsg.{step}| ");
    out.lines().filter_map(|l| l.strip_prefix(prefix.as_str())).collect::<Vec<_>>().join("\n")
}

fn get<'a>(s: &'a HashMap<String, HashMap<String, String>>, step: &str, key: &str) -> &'a str {
    s.get(step).and_then(|m| m.get(key)).map(String::as_str).unwrap_or_else(|| panic!("step {step}: no '{key}' in {:?}", s.get(step)))
}

#[test]
fn the_driver_reports_and_recovers_from_every_pcie_fault() {
    ensure_image();
    let work = tempfile::tempdir().unwrap();
    let topo_path = work.path().join("one-rnic.toml");
    std::fs::write(&topo_path, TOPOLOGY).unwrap();
    let topo = Topology::load(&topo_path).unwrap();
    let server = ServerProcess::start(Path::new(bin()), &topo_path, work.path(), None).unwrap();

    let store = Arc::new(KvStore::default());
    let kv_sock = work.path().join("kv.sock");
    let listener = std::os::unix::net::UnixListener::bind(&kv_sock).unwrap();
    let s = store.clone();
    std::thread::spawn(move || rnic_emu::kv::serve(listener, s, "node0".into()));

    let img = rnic_emu::image::ensure(false).unwrap();
    let initrd = work.path().join("initrd.img");
    rnic_emu::run::write_initrd(&img, &initrd, SCRIPT, true).unwrap();
    let (console, output) = (work.path().join("console.log"), work.path().join("output.log"));
    let files = rnic_emu::qemu::GuestFiles {
        kernel: &img.kernel,
        initrd: &initrd,
        console_log: &console,
        output_log: &output,
        kv_socket: Some(&kv_sock),
        segment: None,
    };
    let args = rnic_emu::qemu::command_line(&topo, 0, &server.socket_dir, &files);
    let mut qemu = spawn_qemu_until_init(&img.qemu, &args, &console, &work.path().join("qemu.log"));

    drive(&server, &store);
    let done = wait_until(Duration::from_secs(180), || std::fs::read_to_string(&output).unwrap_or_default().contains("@@RNIC-EMU-EXIT@@"));
    let out = std::fs::read_to_string(&output).unwrap_or_default();
    eprintln!("--- guest output ---\n{out}");
    if !done {
        eprintln!("--- console ---\n{}", std::fs::read_to_string(&console).unwrap_or_default());
    }
    assert!(done, "the guest did not finish");
    let _ = qemu.0.wait();
    let s = scenarios(&out);

    // DMA read and write failures: an error completion, nothing placed, the QP in ERROR.
    for step in ["dma-read", "dma-write"] {
        assert_eq!((get(&s, step, "status"), get(&s, step, "syndrome")), ("FATAL_ERR", "DMA"), "{step}");
        assert_eq!((get(&s, step, "bytes"), get(&s, step, "qp_state")), ("untouched", "ERR"), "{step}");
        assert!(kmsg(&out, step).contains("asynchronous error: QP entered ERROR"), "{step}: {}", kmsg(&out, step));
    }
    // Poison: the corrupted bytes arrive, the completion and AER say so.
    assert_eq!((get(&s, "poison", "status"), get(&s, "poison", "syndrome")), ("FATAL_ERR", "POISONED"));
    assert_eq!((get(&s, "poison", "bytes"), get(&s, "poison", "qp_state")), ("inverted", "ERR"));
    assert_eq!(value(&out, "aer_uncor_status"), "00001000", "AER: Poisoned TLP Received");
    // A delayed completion is late, not lost; a duplicate is dropped by the driver.
    assert_eq!((get(&s, "delay", "status"), get(&s, "delay", "bytes")), ("SUCCESS", "ok"));
    assert!(get(&s, "delay", "latency_ms").parse::<u64>().unwrap() >= 1500);
    assert_eq!((get(&s, "duplicate", "status"), get(&s, "duplicate", "extra")), ("SUCCESS", "0"));
    assert_eq!(value(&out, "stale_cqes_added"), "1");
    assert!(kmsg(&out, "duplicate").contains("which is not outstanding"), "{}", kmsg(&out, "duplicate"));
    // A lost interrupt costs at most a poll slice; the driver notices and says so.
    assert_eq!(get(&s, "msi-lost", "status"), "SUCCESS");
    assert!(get(&s, "msi-lost", "latency_ms").parse::<u64>().unwrap() < 3000);
    assert_eq!(value(&out, "missed_irqs"), "1");
    assert!(kmsg(&out, "msi-lost").contains("completion found without its interrupt"));
    assert_eq!(value(&out, "spurious_added"), "1", "a spurious interrupt is counted (IRQ_NONE)");
    // Async events and a correctable AER error: logged and counted, no reset.
    assert_eq!(value(&out, "injected"), "1");
    assert!(kmsg(&out, "async").contains("no device state behind it (code 5, object 7)"));
    assert_eq!(value(&out, "aer_correctable"), "1");
    assert_eq!(value(&out, "aer_cor_status"), "00000000", "the driver cleared the status it logged");
    assert!(kmsg(&out, "aer-cor").contains("AER: correctable error, status 0x00000040"), "{}", kmsg(&out, "aer-cor"));
    // QEMU's root port never sees the error message: Linux's own AER counters stay at 0.
    assert_eq!(value(&out, "aer_core_total_cor"), "0");
    // Recoveries: each leaves a working device behind (a verified WRITE after it).
    let expect = [
        ("aer-fatal", "uncorrectable fatal error"),
        ("cmd-timeout", "did not complete in 2000 ms"),
        ("fatal", "device fatal error"),
        ("fatal-silent", "device fatal error (STATUS 0xf) found by the liveness check"),
        ("flr", "FLR and reload"),
        ("link", "RNIC not responding"),
    ];
    for (step, line) in expect {
        let k = kmsg(&out, step);
        assert!(k.contains(line), "{step}: no '{line}' in\n{k}");
        assert!(k.contains("recovered: driver reloaded"), "{step}: not recovered\n{k}");
        let after = format!("after-{step}");
        assert_eq!((get(&s, &after, "status"), get(&s, &after, "bytes")), ("SUCCESS", "ok"), "{step}: no working device after recovery");
    }
    assert!(kmsg(&out, "aer-fatal").contains("after an FLR") && kmsg(&out, "flr").contains("after an FLR"));
    assert!(kmsg(&out, "aer-fatal").contains("(first error bit 18)"), "{}", kmsg(&out, "aer-fatal"));
    assert_eq!(get(&s, "cmd-timeout", "query_errno"), "Connection timed out", "ETIMEDOUT to user space");
    let fatal_poll = (get(&s, "fatal", "post_errno"), get(&s, "fatal", "poll_errno"), s["fatal"].get("status").map(String::as_str));
    assert!(
        matches!(fatal_poll, ("none", "none", Some("WR_FLUSH_ERR")) | ("none", "No such device", None)),
        "outstanding RECV at a fatal error: {fatal_poll:?}"
    );
    assert!(get(&s, "fatal", "latency_ms").parse::<u64>().unwrap() < 20000, "the poller did not hang");
    assert!(get(&s, "fatal-silent", "latency_ms").parse::<u64>().unwrap() < 5000, "found within a poll slice or two");
    let silent_poll = (get(&s, "fatal-silent", "poll_errno"), s["fatal-silent"].get("status").map(String::as_str));
    assert!(matches!(silent_poll, ("none", Some("WR_FLUSH_ERR")) | ("No such device", None)), "{silent_poll:?}");
    assert!(matches!(get(&s, "flr", "query_errno"), "Input/output error" | "No such device"));
    assert_eq!(get(&s, "link", "query_errno"), "No such device");
    assert!(kmsg(&out, "link").contains("answers again"));
    assert_eq!(value(&out, "fault_stats.recoveries"), "6");
    assert_eq!(value(&out, "fault_stats.fatal"), "2", "each fatal error counted once, whichever path saw it");
    assert_eq!(value(&out, "fault_stats.flr_required"), "1");
    assert_eq!(value(&out, "fault_stats.recovery_failures"), "0");
    assert_eq!(value(&out, "rmmod"), "ok", "the module unloads: nothing left holding it");
    assert!(out.contains("@@RNIC-EMU-EXIT@@ 0"));
}
