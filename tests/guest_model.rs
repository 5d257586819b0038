//! Guest-level test of the modelled columns of `rnic-perf --json`: one boot of
//! single-switch. The RNIC publishes the timing model's summary in a vendor-specific
//! extended capability; `rnic-perf` reads it from sysfs and prints `model_lat_us` and
//! `model_gbps` beside what it measured. Checked: the columns exist on every result,
//! are positive, grow (latency) and do not shrink (bandwidth) with the size, follow the
//! memories (a READ from GPU memory is modelled as such), and equal what `rnic-emu
//! model` computes on the host for the same request.

mod common;
use common::*;
use serde_json::Value;
use std::process::Command;

fn results(out: &str) -> Vec<Value> {
    out.lines().filter(|l| l.starts_with('{')).map(|l| serde_json::from_str(l).expect("JSON line")).collect()
}

/// The host model's latency (doorbell to the local CPU seeing the CQE), us.
fn host_model_us(op: &str, size: u64, src: &str, dst: &str) -> f64 {
    let out = Command::new(bin())
        .args([
            "model",
            "--topology",
            topology("single-switch").to_str().unwrap(),
            "--op",
            op,
            "--size",
            &size.to_string(),
            "--src",
            src,
            "--dst",
            dst,
            "--json",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let cpu = v["timeline"]["stages"].as_array().unwrap().iter().find(|s| s["key"] == "cpu").unwrap();
    cpu["at_ns"].as_f64().unwrap() / 1000.0
}

#[test]
fn rnic_perf_prints_modelled_latency_and_bandwidth_beside_the_measured() {
    let sizes = [64u64, 4096, 65536, 1 << 20];
    let mut script = String::new();
    for s in sizes {
        script += &format!("rnic-perf write -s {s} -n 8 --src gpu --dst gpu --json || echo failed\n");
        script += &format!("rnic-perf write-lat -s {s} -n 4 --src gpu --dst gpu --json || echo failed\n");
    }
    script += "rnic-perf read -s 4096 -n 4 --src gpu --dst host --json || echo failed\n";
    script += "rnic-perf write -s 4096 -n 4 --json || echo failed\n";
    let run = run_guest(&topology("single-switch"), &[], &script);
    assert_eq!(run.code, Some(0), "{}", run.stdout);
    assert!(!run.stdout.contains("failed"), "a guest command failed: {}", run.stdout);
    let rs = results(&run.stdout);
    let get = |test: &str, src: &str, dst: &str, size: u64| -> &Value {
        rs.iter()
            .find(|r| r["test"] == test && r["src"] == src && r["dst"] == dst && r["size"] == size)
            .unwrap_or_else(|| panic!("no {test} {size}: {}", run.stdout))
    };
    let (mut last_lat, mut last_bw) = (0.0, 0.0);
    for s in sizes {
        for test in ["write", "write-lat"] {
            let r = get(test, "gpu", "gpu", s);
            let (lat, bw) = (r["model_lat_us"].as_f64().unwrap_or(-1.0), r["model_gbps"].as_f64().unwrap_or(-1.0));
            assert!(lat > 0.0 && bw > 0.0, "modelled columns: {r}");
            assert!(r["gbps"].as_f64().or(r["p50_us"].as_f64()).is_some(), "beside the measured: {r}");
            if test == "write" {
                assert!(lat > last_lat && bw >= last_bw, "monotone in size: {r}");
                (last_lat, last_bw) = (lat, bw);
            } else {
                assert_eq!(lat, get("write", "gpu", "gpu", s)["model_lat_us"].as_f64().unwrap(), "one latency per request");
                assert!(bw <= get("write", "gpu", "gpu", s)["model_gbps"].as_f64().unwrap(), "one outstanding: no faster than a window: {r}");
            }
        }
    }
    // The device's table is the host model's figure for the same request (to the 1/4 ns
    // of the table's unit).
    for (test, op, src, dst) in [("write", "write", "gpu", "gpu"), ("read", "read", "gpu", "host"), ("write", "write", "host", "host")] {
        let r = get(test, src, dst, 4096);
        let want = host_model_us(op, 4096, src, dst);
        assert!((r["model_lat_us"].as_f64().unwrap() - want).abs() < 0.0005, "{r} vs host model {want} us");
    }
    assert_ne!(get("read", "gpu", "host", 4096)["model_lat_us"], get("write", "gpu", "gpu", 4096)["model_lat_us"], "the op and memories matter");
}
