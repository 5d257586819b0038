//! Guest-level robustness tests of the rnic_emu driver (guest-driver/): what happens when
//! devices go away under it, at its resource bounds, and under random ioctls.
//!
//! - `removal_revocation_bounds_teardown` (one boot): a QP far over the ring bound fails
//!   cleanly and without a kernel warning; the RNIC and the GPU unbind while calls sleep on
//!   user memory that never arrives (userfaultfd); the GPU is removed from the PCI bus while
//!   an MR over its memory exists (the MR is revoked, its QPs go to ERROR) and comes back
//!   on rescan; every QP is destroyed at the device whatever state the driver believed; the
//!   RNIC unbinds while WRITEs stream; an MR over a read-only file mapping cannot be written
//!   through. Each ends with a verified transfer and a clean kernel log.
//! - `ioctl_stress` (one boot): `rnic-ioctl-stress` for RNIC_STRESS_SECONDS (default 120)
//!   with seed RNIC_STRESS_SEED (default 1), GPU remove/rescan and RNIC unbind/bind cycles.
//! - `surprise_removal` (its own server and QEMU): the node server is killed by pid while
//!   the guest has QPs and MRs; the guest must not hang: calls fail with -ENODEV, the driver
//!   logs it once, `rmmod` completes. If QEMU itself ends before the guest reports (seen
//!   once in CI, cause unknown: QEMU's log is printed), the scenario runs once more.

mod common;
use common::*;
use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Asserts `key: value` lines of one scenario of [`scenarios`] output.
fn expect(sc: &HashMap<String, HashMap<String, String>>, scenario: &str, pairs: &[(&str, &str)]) {
    let m = sc.get(scenario).unwrap_or_else(|| panic!("scenario {scenario} did not run"));
    for (k, v) in pairs {
        assert_eq!(m.get(*k).map(String::as_str), Some(*v), "{scenario}: {k}");
    }
}

#[test]
fn removal_revocation_bounds_teardown() {
    let script = "for s in ring-bounds remove-blocked gpu-revoke teardown read-only-mr; do rnic-driver-check $s || echo check_failed: $s; done
         rnic-perf write -s 1M -n 4 --src host --dst gpu --verify --json || echo check_failed: perf
         rnic-driver-check kmsg";
    let run = run_guest(&topology("single-switch"), &[], script);
    assert_eq!(run.code, Some(0));
    assert!(!run.stdout.contains("check_failed"), "a scenario could not run");
    let sc = scenarios(&run.stdout);

    // Finding 3: ring sizes are bounded before allocating; the 8 MiB ring that used to hit
    // the page allocator's warning is refused with EINVAL; the bound itself works.
    expect(
        &sc,
        "ring-bounds",
        &[
            ("max_ring_bytes", "4194304"),
            ("qp_at_bound", "OK"),
            ("qp_over_bound", "EINVAL"),
            ("qp_32768x14", "EINVAL"),
            ("qp_32768x1", "OK"),
            ("cq_max", "OK"),
            ("after_status", "SUCCESS"),
        ],
    );

    // Finding 2: four calls asleep on user memory (REG_MR pinning, POST_SEND copying inline
    // data, POLL_CQ copying completions out, GPU_VA_TO_OFFSET pinning) do not hold up the
    // unbind of either device; once the memory arrives they fail with ENODEV (or, for the
    // completions already taken, succeed); the devices bind again and work.
    expect(
        &sc,
        "remove-blocked",
        &[
            ("reg_mr_blocked", "1"),
            ("post_send_blocked", "1"),
            ("poll_cq_blocked", "1"),
            ("gpu_va_to_offset_blocked", "1"),
            ("rnic_unbind", "done"),
            ("gpu_unbind", "done"),
            ("reg_mr_errno", "ENODEV"),
            ("post_send_errno", "ENODEV"),
            ("poll_cq_errno", "OK"),
            ("gpu_va_to_offset_errno", "EINVAL"),
            ("after_unbind_query", "ENODEV"),
            ("rnic_bind", "done"),
            ("gpu_bind", "done"),
            ("rebound_status", "SUCCESS"),
            ("rebound_data_ok", "1"),
        ],
    );

    // Finding 1: the GPU's removal with a GPU-memory MR registered completes (the MR is
    // revoked: its QPs in ERROR, its rkey refused by the device, MR_SYNC ENODEV), and the
    // rescanned GPU takes a verified WRITE peer-to-peer.
    expect(
        &sc,
        "gpu-revoke",
        &[
            ("before_path", "p2p-switch"),
            ("before_status", "SUCCESS"),
            ("before_data_ok", "1"),
            ("gpu_remove", "done"),
            ("revoked_mrs", "1"),
            ("qp_state_after", "ERR"),
            ("mr_sync_revoked", "ENODEV"),
            ("revoked_rkey_status", "REM_ACCESS_ERR"),
            ("dereg_revoked", "OK"),
            ("gpu_back", "1"),
            ("after_rescan_path", "p2p-switch"),
            ("after_rescan_status", "SUCCESS"),
            ("after_rescan_data_ok", "1"),
        ],
    );

    // Finding 5: a QP in each state (RESET included) costs exactly one DESTROY_QP at the
    // device; unbinding under streaming WRITEs completes, the writer gets ENODEV, and the
    // rebound RNIC moves 1 MiB verified.
    expect(
        &sc,
        "teardown",
        &[
            ("destroyed_qps", "4"),
            ("destroy_commands", "4"),
            ("streamed_writes_before", "1"),
            ("unbind_under_traffic", "done"),
            ("traffic_errno", "ENODEV"),
            ("rebind", "done"),
            ("rebound_status", "SUCCESS"),
            ("rebound_data_ok", "1"),
        ],
    );

    // Finding 4: an MR over a read-only file mapping registers only without write access;
    // READ from it works; a WRITE into it and MR_SYNC FROM_BOUNCE are refused; the file
    // keeps its bytes.
    expect(
        &sc,
        "read-only-mr",
        &[
            ("rw_reg_on_ro_mapping", "EFAULT"),
            ("ro_reg", "OK"),
            ("read_from_ro_status", "SUCCESS"),
            ("read_data_ok", "1"),
            ("sync_to_bounce_ro", "OK"),
            ("sync_from_bounce_ro", "EPERM"),
            ("write_into_ro_status", "REM_ACCESS_ERR"),
            ("file_untouched", "1"),
        ],
    );

    // After all of that, GPUDirect still works and the kernel reported no bug.
    let r: serde_json::Value = serde_json::from_str(run.stdout.lines().find(|l| l.starts_with('{')).expect("a rnic-perf JSON line")).unwrap();
    assert_eq!(r["bytes_verified"], 4 << 20);
    assert_eq!(r["dst_path"], "p2p-switch");
    expect(&sc, "kmsg", &[("kmsg_bad_lines", "0")]);
}

#[test]
fn ioctl_stress() {
    let seconds: u64 = std::env::var("RNIC_STRESS_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(120);
    let seed: u64 = std::env::var("RNIC_STRESS_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(1);
    let script = format!("rnic-ioctl-stress -s {seed} -t {seconds}; echo stress_rc: $?");
    let run = run_guest(&topology("single-switch"), &[], &script);
    assert_eq!(run.code, Some(0), "the guest kept answering");
    let out = &run.stdout;
    assert_eq!(value(out, "seed"), seed.to_string());
    for line in out.lines().filter(|l| l.starts_with("kmsg_bad: ")) {
        eprintln!("kernel: {line}");
    }
    assert_eq!(value(out, "kmsg_bad_lines"), "0", "no WARN/BUG/lockdep/hung task in the kernel log");
    assert_eq!(value(out, "workers_stuck"), "0");
    assert_eq!(value(out, "cycle_blocked_any"), "0", "every unbind/remove/bind finished");
    assert_eq!(value(out, "result"), "PASS");
    assert_eq!(value(out, "stress_rc"), "0");
    // It really did what it claims: every ioctl of both devices, successes among them,
    // valid transfers, files closed, and removal cycles of both devices.
    let ops: u64 = value(out, "ops").parse().unwrap();
    assert!(ops > 10_000, "only {ops} ioctls");
    for line in out.lines().filter(|l| l.starts_with("ioctl_")) {
        let w: Vec<&str> = line.split_whitespace().collect();
        let (calls, ok): (u64, u64) = (w[1].parse().unwrap(), w[3].parse().unwrap());
        assert!(calls > 0, "{line}");
        if w[0] != "ioctl_bad_cmd:" {
            assert!(ok > 0, "no call succeeded: {line}");
        } else {
            assert_eq!(ok, 0, "an unknown or mis-sized command succeeded");
        }
    }
    assert!(value(out, "valid_flows_ok").parse::<u64>().unwrap() > 0);
    assert!(value(out, "closes").parse::<u64>().unwrap() > 0);
    assert!(value(out, "cycles_rnic").parse::<u64>().unwrap() >= 1);
    assert!(value(out, "cycles_gpu").parse::<u64>().unwrap() >= 1);
}

/// Builds an initrd: the image's initramfs plus the command archive (images/init.sh).
fn write_initrd(initramfs: &Path, dest: &Path, command: &str) {
    let mut out = std::fs::File::create(dest).unwrap();
    let len = std::io::copy(&mut std::fs::File::open(initramfs).unwrap(), &mut out).unwrap();
    out.write_all(&[0u8; 4][..((4 - len % 4) % 4) as usize]).unwrap();
    let entries = vec![
        (cpio::NewcBuilder::new("rnic-emu").mode(0o040755), std::io::Cursor::new(Vec::new())),
        (cpio::NewcBuilder::new("rnic-emu/env").mode(0o100644), std::io::Cursor::new(b"RNIC_EMU_LOAD_DRIVER=1\n".to_vec())),
        (cpio::NewcBuilder::new("rnic-emu/cmd.sh").mode(0o100755), std::io::Cursor::new(format!("{command}\n").into_bytes())),
    ];
    cpio::write_cpio(entries.into_iter(), &mut out).unwrap();
}

/// One run of the surprise-removal scenario: the guest's output once QEMU has ended
/// (None: the guest hung after the server was killed).
fn surprise_removal_run() -> Option<String> {
    ensure_image();
    let img = rnic_emu::image::ensure(false).expect("guest image");
    let topo_path = topology("single-switch");
    let topo = rnic_emu_core::platform::topology::Topology::load(&topo_path).unwrap();
    let node = &topo.nodes[0];
    let wd = tempfile::Builder::new().prefix("rnic-emu-surprise-").tempdir().unwrap();
    let sockets = wd.path().join("sockets");
    std::fs::create_dir_all(&sockets).unwrap();

    let server_log = wd.path().join("server.log");
    let log = std::fs::File::create(&server_log).unwrap();
    let mut server = Proc(
        Command::new(bin())
            .args(["serve", "--topology"])
            .arg(&topo_path)
            .args(["--node", &node.name, "--socket-dir"])
            .arg(&sockets)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("starting rnic-emu serve"),
    );
    let ctl = rnic_emu_server::serve::control_path(&sockets, &node.name);
    assert!(wait_until(Duration::from_secs(30), || ctl.exists()), "the server did not come up");

    let script = "rnic-driver-check hold; echo hold_rc: $?
         t0=$(date +%s); rmmod rnic_emu; echo rmmod_rc: $?; echo rmmod_s: $(( $(date +%s) - t0 ))
         echo not_responding_lines: $(dmesg | grep -c 'RNIC not responding')
         lsmod | grep -q '^rnic_emu ' && echo module_still_loaded: 1
         rnic-driver-check kmsg";
    let initrd = wd.path().join("initrd.img");
    write_initrd(&img.initramfs, &initrd, script);
    let (console, output) = (wd.path().join("console.log"), wd.path().join("output.log"));
    let files = rnic_emu::qemu::GuestFiles { kernel: &img.kernel, initrd: &initrd, console_log: &console, output_log: &output, kv_socket: None, segment: None };
    let args = rnic_emu::qemu::command_line(&topo, 0, &sockets, &files);
    let mut qemu = spawn_qemu_until_init(&img.qemu, &args, &console, &wd.path().join("qemu.log"));
    let read_out = || std::fs::read_to_string(&output).unwrap_or_default();

    // The guest has a connected QP pair, MRs and a completed WRITE: now the server dies.
    let up = wait_until(Duration::from_secs(300), || read_out().contains("ready: 1") || matches!(qemu.0.try_wait(), Ok(Some(_))));
    assert!(up && read_out().contains("ready: 1"), "the guest never got ready:\n{}", read_out());
    // SAFETY: signalling our own child by pid; it is not reaped yet, so the pid names it.
    unsafe { libc::kill(server.0.id() as libc::pid_t, libc::SIGKILL) };
    let _ = server.0.wait();
    let killed = Instant::now();

    // The guest must go on: every call fails, rmmod completes, the guest powers off.
    let done = wait_until(Duration::from_secs(300), || matches!(qemu.0.try_wait(), Ok(Some(_))));
    let out = read_out();
    let tail = |p: &Path, n: usize| {
        let c = std::fs::read_to_string(p).unwrap_or_default();
        c.lines().rev().take(n).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n")
    };
    eprintln!("--- guest output ---\n{out}\n--- console (tail) ---\n{}\n--- QEMU (tail) ---\n{}", tail(&console, 40), tail(&wd.path().join("qemu.log"), 20));
    if !done {
        return None;
    }
    eprintln!("QEMU ended {:?} after the server was killed ({:?})", killed.elapsed(), qemu.0.try_wait());
    Some(out)
}

#[test]
fn surprise_removal() {
    let reported = |out: &Option<String>| out.as_ref().is_some_and(|o| o.contains("@@RNIC-EMU-EXIT@@"));
    let mut out = surprise_removal_run();
    if out.is_some() && !reported(&out) {
        // Seen once in CI: QEMU ended 80 ms after the server was killed, before the guest
        // had printed anything more (no oops on the console). The lines above show QEMU's
        // own last words; the scenario runs once more, and must pass then.
        eprintln!("QEMU ended without the guest reporting: running the scenario once more");
        out = surprise_removal_run();
    }
    let out = out.expect("the guest hung after the server was killed");
    assert!(out.contains("@@RNIC-EMU-EXIT@@ 0"), "the guest command did not finish cleanly");
    let sc = scenarios(&out);
    let first = sc["hold"].get("first_error").map(String::as_str);
    assert!(matches!(first, Some("ENODEV") | Some("EIO")), "first error after the server died: {first:?}");
    expect(
        &sc,
        "hold",
        &[
            ("first_status", "SUCCESS"),
            ("query_device_after", "ENODEV"),
            ("create_cq_after", "ENODEV"),
            ("poll_after", "ENODEV"),
            ("close", "OK"),
            ("ran", "1"),
        ],
    );
    assert_eq!(value(&out, "rmmod_rc"), "0");
    assert!(!out.contains("module_still_loaded"));
    assert_eq!(value(&out, "not_responding_lines"), "1", "the driver logs the dead device once");
    expect(&sc, "kmsg", &[("kmsg_bad_lines", "0")]);
}
