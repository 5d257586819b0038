//! The `rnic-emu` command's errors, as a newcomer meets them: each names the file, socket
//! directory or node it concerns, once (no repeated cause), exits 125, and comes before
//! anything slow is started (no image build for a topology that does not exist).

use std::process::Command;

fn rnic_emu(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_rnic-emu")).args(args).output().expect("running rnic-emu");
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn topology(name: &str) -> String {
    format!("{}/../qemu-configs/{name}.toml", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn a_missing_topology_is_named_once_and_nothing_is_built() {
    let (code, err) = rnic_emu(&["run", "--topology", "/nonexistent/nope.toml", "--", "true"]);
    assert_eq!(code, Some(125), "{err}");
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
    assert_eq!(code, Some(125), "{err}");
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
    assert_eq!(code, Some(125), "{err}");
    assert!(err.contains(&format!("creating the socket directory {}", sockets.display())), "{err}");
    assert_eq!(err.matches("Not a directory").count(), 1, "{err}");
}

#[test]
fn an_unknown_node_is_refused_before_anything_starts() {
    let (code, err) = rnic_emu(&["run", "--topology", &topology("two-node"), "--on", "node7", "true"]);
    assert_eq!(code, Some(125), "{err}");
    assert!(err.contains("has no node 'node7'"), "{err}");
    assert!(!err.contains("[images"), "{err}");
    let (code, err) = rnic_emu(&["serve", "--topology", &topology("single-switch"), "--node", "node3", "--socket-dir", "/tmp"]);
    assert_eq!(code, Some(125), "{err}");
    assert!(err.contains("has no node 'node3'"), "{err}");
}
