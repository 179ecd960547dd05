//! CPU-backend benchmarks (workload 5 of BENCHMARKS.md): the null round trip
//! and calls under contention with host threads as client lanes, each against
//! a `std::sync::mpsc` request/reply round trip measured in the same run.
//!
//! `cargo bench -p rpc-runtime --bench cpu` (a plain bench binary: it prints
//! Markdown tables; `-- --quick` runs fewer calls). The second table is the
//! cost of the server's per-method metrics: the same runs with them off and
//! on, alternated, 5 of each.

use std::sync::mpsc;
use std::time::Instant;

use rpc_runtime::cpu::{self, Launch};
use rpc_runtime::server::{Dispatcher, ServerConfig};

/// Seconds per call for `threads` client threads each making `iters` no-op
/// calls, served by `servers` threads over `ports` ports.
fn rpc(threads: usize, servers: usize, ports: u32, iters: u64) -> f64 {
    rpc_with(threads, servers, ports, iters, true)
}

/// [`rpc`] with the server's per-method metrics on or off.
fn rpc_with(threads: usize, servers: usize, ports: u32, iters: u64, metrics: bool) -> f64 {
    let d = Dispatcher::new(ServerConfig {
        metrics,
        ..ServerConfig::default()
    });
    let t0 = Instant::now();
    let report = cpu::launch(
        &Launch {
            threads,
            server_threads: servers,
            port_count: ports,
            lane_size: 1,
        },
        &d,
        |c, t| {
            let mut x = t.id as u64;
            for _ in 0..iters {
                x = c.noop(x).expect("noop");
            }
            assert_eq!(x, t.id as u64 + iters);
        },
    )
    .expect("run");
    assert_eq!(report.calls, threads as u64 * iters);
    t0.elapsed().as_secs_f64() / (threads as u64 * iters) as f64
}

/// The same workload over channels: each client sends (x, its reply sender)
/// to one server thread and waits for x + 1.
fn channels(threads: usize, iters: u64) -> f64 {
    let (req_tx, req_rx) = mpsc::channel::<(u64, mpsc::Sender<u64>)>();
    let t0 = Instant::now();
    std::thread::scope(|s| {
        s.spawn(move || {
            for (x, reply) in req_rx {
                let _ = reply.send(x + 1);
            }
        });
        for t in 0..threads {
            let req_tx = req_tx.clone();
            s.spawn(move || {
                let (tx, rx) = mpsc::channel();
                let mut x = t as u64;
                for _ in 0..iters {
                    req_tx.send((x, tx.clone())).unwrap();
                    x = rx.recv().unwrap();
                }
                assert_eq!(x, t as u64 + iters);
            });
        }
        drop(req_tx);
    });
    t0.elapsed().as_secs_f64() / (threads as u64 * iters) as f64
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let iters = if quick { 2_000 } else { 50_000 };
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    println!("CPU backend, {cores} cores, {iters} calls per client thread\n");
    println!("| clients | ports | server threads | gpu_rpc µs/call | mpsc µs/call | ratio | gpu_rpc M calls/s |");
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    for (threads, ports, servers) in [(1, 1, 1), (2, 64, 1), (4, 64, 1), (8, 64, 1), (8, 64, 2), (8, 7, 2)] {
        let r = rpc(threads, servers, ports, iters);
        let c = channels(threads, iters);
        println!(
            "| {threads} | {ports} | {servers} | {:.2} | {:.2} | {:.2} | {:.2} |",
            r * 1e6,
            c * 1e6,
            r / c,
            1.0 / r / 1e6
        );
    }

    println!("\nPer-method metrics (ServerConfig::metrics), 5 runs each, alternated: median µs/call [min, max]\n");
    println!("| clients | ports | server threads | metrics off | metrics on | on / off |");
    println!("|---:|---:|---:|---:|---:|---:|");
    for (threads, ports, servers) in [(1, 1, 1), (8, 64, 2)] {
        let (mut off, mut on) = (Vec::new(), Vec::new());
        for _ in 0..5 {
            off.push(rpc_with(threads, servers, ports, iters, false) * 1e6);
            on.push(rpc_with(threads, servers, ports, iters, true) * 1e6);
        }
        let stats = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            (v[v.len() / 2], v[0], v[v.len() - 1])
        };
        let ((m_off, lo_off, hi_off), (m_on, lo_on, hi_on)) = (stats(&mut off), stats(&mut on));
        println!(
            "| {threads} | {ports} | {servers} | {m_off:.2} [{lo_off:.2}, {hi_off:.2}] | {m_on:.2} [{lo_on:.2}, {hi_on:.2}] | {:.3} |",
            m_on / m_off
        );
    }
}
