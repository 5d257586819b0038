//! The `rnic-emu` command's errors, as a newcomer meets them: each names the file, socket
//! directory, socket, node or QEMU binary it concerns, once (no repeated cause), exits
//! with the documented code (README.md, "Exit codes": 2 for a usage or configuration
//! error, 125 when rnic-emu failed once started), and comes before anything slow is
//! started (no image build for a topology that does not exist). Also what `qemu-args`
//! prints for a node with no functions of ours (a plain virtio-net guest).

use std::process::Command;

/// A usage or configuration error.
const USAGE: Option<i32> = Some(2);
/// rnic-emu failed once started.
const FAILED: Option<i32> = Some(125);

fn rnic_emu(args: &[&str]) -> (Option<i32>, String) {
    rnic_emu_env(args, &[])
}

fn rnic_emu_env(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_rnic-emu")).args(args).envs(env.iter().copied()).output().expect("running rnic-emu");
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn topology(name: &str) -> String {
    format!("{}/../qemu-configs/{name}.toml", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn a_missing_topology_is_named_once_and_nothing_is_built() {
    let (code, err) = rnic_emu(&["run", "--topology", "/nonexistent/nope.toml", "--", "true"]);
    assert_eq!(code, USAGE, "{err}");
    assert!(err.contains("reading /nonexistent/nope.toml"), "{err}");
    assert_eq!(err.matches("No such file or directory").count(), 1, "the cause once: {err}");
    assert!(!err.contains("[images"), "no image build before the topology was read: {err}");
}

#[test]
fn bad_toml_reports_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "name = \"x\"\n[[node]\nname = 1\n").unwrap();
    let (code, err) = rnic_emu(&["qemu-args", "--topology", bad.to_str().unwrap(), "--socket-dir", "/tmp"]);
    assert_eq!(code, USAGE, "{err}");
    assert!(err.contains(&format!("parsing {}", bad.display())), "{err}");
    assert!(err.contains("line 2, column 7"), "{err}");
    assert_eq!(err.matches("TOML parse error").count(), 1, "the cause once: {err}");
}

#[test]
fn an_unusable_socket_directory_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"").unwrap();
    let sockets = file.join("sockets");
    let (code, err) = rnic_emu(&["serve", "--topology", &topology("single-switch"), "--socket-dir", sockets.to_str().unwrap()]);
    assert_eq!(code, USAGE, "{err}");
    assert!(err.contains(&format!("creating the socket directory {}", sockets.display())), "{err}");
    assert_eq!(err.matches("Not a directory").count(), 1, "{err}");
}

#[test]
fn an_unknown_node_is_refused_before_anything_starts() {
    let (code, err) = rnic_emu(&["run", "--topology", &topology("two-node"), "--on", "node7", "true"]);
    assert_eq!(code, USAGE, "{err}");
    assert!(err.contains("has no node 'node7'"), "{err}");
    assert!(!err.contains("[images"), "{err}");
    let (code, err) = rnic_emu(&["serve", "--topology", &topology("single-switch"), "--node", "node3", "--socket-dir", "/tmp"]);
    assert_eq!(code, USAGE, "{err}");
    assert!(err.contains("has no node 'node3'"), "{err}");
}

#[test]
fn a_missing_qemu_is_named_before_anything_is_built() {
    let (code, err) = rnic_emu_env(&["run", "--", "true"], &[("RNIC_EMU_QEMU", "/nonexistent/qemu-system-x86_64")]);
    assert_eq!(code, USAGE, "{err}");
    assert_eq!(err.matches("QEMU /nonexistent/qemu-system-x86_64 (RNIC_EMU_QEMU) is not an executable file").count(), 1, "{err}");
    assert!(!err.contains("[images"), "no image build before QEMU was found: {err}");
    // An image without its QEMU wrapper (a partial build, or a copied image).
    let empty = tempfile::tempdir().unwrap();
    let (code, err) = rnic_emu_env(&["run", "--no-build", "--", "true"], &[("RNIC_EMU_IMAGE_DIR", empty.path().to_str().unwrap())]);
    assert_eq!(code, USAGE, "{err}");
    let qemu = empty.path().join("bin/qemu-system-x86_64");
    assert_eq!(err.matches(&format!("QEMU {} is missing", qemu.display())).count(), 1, "{err}");
    assert!(err.contains("RNIC_EMU_QEMU"), "says how to name another QEMU: {err}");
}

#[test]
fn an_unusable_output_file_is_named_before_anything_is_built() {
    for flag in ["--trace", "--stats", "--pcap"] {
        let (code, err) = rnic_emu(&["run", flag, "/nonexistent/dir/out", "--", "true"]);
        assert_eq!(code, USAGE, "{err}");
        assert_eq!(err.matches(&format!("{flag} /nonexistent/dir/out: its directory does not exist")).count(), 1, "{err}");
        assert!(!err.contains("[images"), "{err}");
    }
    let (code, err) = rnic_emu(&["trace", "--mmio", "--from", "/nonexistent/trace.jsonl"]);
    assert_eq!(code, USAGE, "{err}");
    assert_eq!(err.matches("opening /nonexistent/trace.jsonl: No such file or directory").count(), 1, "{err}");
}

#[test]
fn a_node_without_a_server_is_named_with_the_nodes_that_are_there() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let (code, err) = rnic_emu(&["stats", "--socket-dir", d, "--node", "node3"]);
    assert_eq!(code, USAGE, "{err}");
    assert!(err.contains(&format!("no node server for 'node3' in {d}")) && err.contains("no node server runs there"), "{err}");
    // A stale control socket left by a server that died: the node is there, the server is
    // not; that is a failure at run time, and the socket is named once.
    std::fs::write(dir.path().join("node0.ctl"), b"").unwrap();
    let (code, err) = rnic_emu(&["trace", "--mmio", "--dma", "--socket-dir", d, "--node", "node1"]);
    assert_eq!(code, USAGE, "{err}");
    assert!(err.contains("nodes served there: node0"), "{err}");
    let (code, err) = rnic_emu(&["trace", "--mmio", "--socket-dir", d, "--node", "0"]);
    assert_eq!(code, FAILED, "{err}");
    assert_eq!(err.matches(&format!("connecting to {d}/node0.ctl")).count(), 1, "node 0 by index is node0: {err}");
    assert_eq!(err.matches("Connection refused").count(), 1, "{err}");
}

#[test]
fn argument_errors_exit_2() {
    let (code, err) = rnic_emu(&["trace", "--mmio", "--function", "nic", "--socket-dir", "/tmp"]);
    assert_eq!(code, USAGE, "{err}");
    assert!(err.contains("'nic'") && err.contains("rnic, gpu"), "{err}");
    let (code, err) = rnic_emu(&["trace", "--reg", "WQE_DB_IDX", "--socket-dir", "/tmp"]);
    assert_eq!(code, USAGE, "{err}");
    assert_eq!(err.matches("add --mmio and/or --dma").count(), 1, "{err}");
    let (code, err) = rnic_emu(&["run", "--on", "0", "true", "--", "true"]);
    assert_eq!(code, USAGE, "{err}");
    assert!(err.contains("--on NODE COMMAND"), "{err}");
    let (code, err) = rnic_emu(&["run", "--on", "0", "true", "--on", "node0", "false"]);
    assert_eq!(code, USAGE, "{err}");
    assert!(err.contains("node 'node0' is given more than one command"), "{err}");
    assert!(!err.contains("[images"), "{err}");
}

#[test]
fn qemu_args_give_a_plain_node_its_nic_on_the_segment() {
    let topo = topology("softroce-interop");
    let out = |extra: &[&str]| {
        let mut args = vec!["qemu-args", "--topology", &topo, "--node", "node2", "--socket-dir", "/tmp/rnic"];
        args.extend_from_slice(extra);
        let o = Command::new(env!("CARGO_BIN_EXE_rnic-emu")).args(&args).output().unwrap();
        (o.status.code(), String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
    };
    // The plain node has no PCIe functions of ours: just its virtio-net NIC, on the
    // topology's multicast segment (the one its rnic-emu nodes' servers join).
    let (code, stdout, err) = out(&[]);
    assert_eq!(code, Some(0), "{err}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{stdout}");
    assert_eq!((lines[0], lines[2]), ("-netdev", "-device"));
    assert!(lines[1].starts_with("dgram,id=fabric,remote.type=inet,remote.host=239."), "{stdout}");
    assert_eq!(lines[3], "virtio-net-pci,netdev=fabric,romfile=,mac=52:54:00:00:00:0d");
    // A TAP segment: QEMU's tap backend, the guest finishing its own checksums.
    let (code, stdout, err) = out(&["--segment", "tap:rnictap0"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(stdout.contains("tap,id=fabric,ifname=rnictap0,script=no,downscript=no\n"), "{stdout}");
    assert!(stdout.contains(",csum=off"), "{stdout}");
    // VXLAN: QEMU cannot speak it; a usage error that says what to do instead.
    let (code, _, err) = out(&["--segment", "vxlan:42@192.0.2.1,remote=192.0.2.2"]);
    assert_eq!(code, USAGE, "{err}");
    assert!(err.contains("no VXLAN backend") && err.contains("TAP"), "{err}");
}
