//! `cargo bench --bench idle`: the CPU a node server uses while its guest is idle. Starts a
//! two-node pair of `rnic-emu serve` processes joined by the fabric, each RNIC brought up
//! by a host driver with a connected QP and a registered MR, moves some traffic (so the
//! event loop has been busy and its busy-poll window has been entered), then leaves both
//! idle for 10 s and reads each server's CPU time (utime + stime) from /proc/<pid>/stat.
//! The target is under 2% of one core per node.

use rnic_emu_testkit::hostdrv::{NodePair, PairOptions};
use std::net::Ipv4Addr;
use std::path::Path;
use std::time::{Duration, Instant};

const IDLE: Duration = Duration::from_secs(10);

/// Pids of the `rnic-emu serve` processes whose command line mentions `dir`.
fn servers_under(dir: &Path) -> Vec<u32> {
    let needle = dir.to_string_lossy().into_owned();
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(cmd) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        if cmd.contains(" serve ") && cmd.contains(&needle) {
            pids.push(pid);
        }
    }
    pids.sort_unstable();
    pids
}

/// utime + stime of a process, in clock ticks.
fn cpu_ticks(pid: u32) -> anyhow::Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).ok_or_else(|| anyhow::anyhow!("odd /proc/{pid}/stat"))?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    Ok(f[11].parse::<u64>()? + f[12].parse::<u64>()?)
}

fn main() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let ips = [Ipv4Addr::new(127, 99, 1, 1), Ipv4Addr::new(127, 99, 1, 2)];
    let o = PairOptions { ips, node_toml: "", retry_cnt: 7, timeout: 14, capture: false, rnr_retry: 7, eth_mtu: 0 };
    let mut p = NodePair::start(Path::new(env!("CARGO_BIN_EXE_rnic-emu")), dir.path(), &o)?;
    for i in 0..64 {
        p.write(0, 0, 64 << 10, i, true)?;
        p.h[0].wait(1, Duration::from_secs(10))?;
    }
    let pids = servers_under(dir.path());
    anyhow::ensure!(pids.len() == 2, "expected two node servers, found {pids:?}");
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let before: Vec<u64> = pids.iter().map(|&p| cpu_ticks(p)).collect::<anyhow::Result<_>>()?;
    let t = Instant::now();
    std::thread::sleep(IDLE);
    let secs = t.elapsed().as_secs_f64();
    println!("idle node servers over {secs:.1} s (target < 2% of one core each)");
    println!("{:>8} {:>10} {:>8}", "pid", "CPU s", "% core");
    for (pid, b) in pids.iter().zip(before) {
        let used = (cpu_ticks(*pid)? - b) as f64 / hz;
        println!("{pid:>8} {used:>10.3} {:>7.2}%", used / secs * 100.0);
    }
    Ok(())
}
