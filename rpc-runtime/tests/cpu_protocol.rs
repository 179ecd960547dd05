//! CPU-backend tests of the protocol core and the call frame.

use rpc_runtime::cpu::{self, CpuRegion, Launch};
use rpc_runtime::protocol::Layout;
use rpc_runtime::server::{Dispatcher, ServerConfig};
use std::sync::atomic::{AtomicU64, Ordering};

fn quiet() -> Dispatcher {
    Dispatcher::new(ServerConfig {
        log_errors: false,
        ..ServerConfig::default()
    })
}

/// The seeds' rpc_test: many threads each making many round-trip increment
/// calls on fewer ports than threads; every answer and the final count exact.
#[test]
fn contended_increments_are_exact() {
    for (threads, ports, servers) in [(8, 1, 1), (16, 3, 2), (12, 7, 3)] {
        let d = quiet();
        let total = AtomicU64::new(0);
        let region = CpuRegion::new(Layout::new(ports, 1).unwrap());
        let launch = Launch {
            threads,
            server_threads: servers,
            port_count: ports,
            lane_size: 1,
        };
        let iters = 500u64;
        let report = cpu::launch_with_region(&region, &launch, &d, |client, t| {
            let mut x = t.id as u64 * 1_000_000;
            for _ in 0..iters {
                let y = client.noop(x).unwrap();
                assert_eq!(y, x + 1);
                x = y;
            }
            // Relaxed: a tally; it is read after the threads that add to it are joined.
            total.fetch_add(x - t.id as u64 * 1_000_000, Ordering::Relaxed);
        })
        .unwrap();
        assert_eq!(total.load(Ordering::Relaxed), threads as u64 * iters);
        assert_eq!(report.calls, threads as u64 * iters);
        assert_eq!(report.errors, 0);
        assert!(region.is_quiescent(), "a port was left locked or pending");
    }
}

/// A GPU-shaped layout (32 lanes per packet) served to one-lane host warps.
#[test]
fn wide_layout_single_lane_clients() {
    let d = quiet();
    let report = cpu::launch(
        &Launch {
            threads: 4,
            server_threads: 1,
            port_count: 4,
            lane_size: 32,
        },
        &d,
        |client, t| {
            for i in 0..100 {
                assert_eq!(client.noop(i + t.id as u64).unwrap(), i + t.id as u64 + 1);
            }
        },
    )
    .unwrap();
    assert_eq!(report.calls, 400);
}

/// Raw ports: send_n / recv_n with lengths that straddle packet boundaries,
/// against a hand-written server.
#[test]
fn raw_send_n_recv_n_roundtrip() {
    let region = CpuRegion::new(Layout::new(2, 1).unwrap());
    let lens = [0usize, 1, 55, 56, 57, 64, 119, 120, 121, 1000, 4096];
    std::thread::scope(|s| {
        s.spawn(|| {
            let server = region.server();
            for _ in 0..lens.len() {
                let port = loop {
                    if let Some(p) = server.try_open(0..2) {
                        break p;
                    }
                    std::thread::yield_now();
                };
                assert_eq!(port.opcode(), 0x10_0000);
                let (port, mut got) = port.recv_n_vec(1 << 20).unwrap();
                // Echo the bytes reversed.
                let mut buf = got[0].take().unwrap();
                buf.reverse();
                let port = port.send_n(|_| &buf[..]).unwrap();
                port.close();
            }
        });
        let client = region.client();
        for &n in &lens {
            let data: Vec<u8> = (0..n).map(|i| (i * 7 + n) as u8).collect();
            let port = client.open(0x10_0000).send_n(&data);
            let mut back = vec![0u8; n];
            let (port, len) = port.recv_n(&mut back);
            port.close();
            assert_eq!(len as usize, n);
            back.reverse();
            assert_eq!(back, data, "length {n}");
        }
    });
    assert!(region.is_quiescent());
}

/// One pool of server threads serves several jobs (simulated devices) at
/// once; a job whose kernel fails reports its own error and the others finish
/// with exact counts (the CPU design of serving several GPUs).
#[test]
fn one_server_pool_serves_several_devices_and_keeps_errors_apart() {
    use rpc_runtime::cpu::{launch_many, Job};
    let regions: Vec<CpuRegion> = [(7u32, 1u32), (64, 32), (1, 1)]
        .iter()
        .map(|&(p, l)| CpuRegion::new(Layout::new(p, l).unwrap()))
        .collect();
    let dispatchers: Vec<Dispatcher> = regions.iter().map(|_| quiet()).collect();
    let jobs: Vec<Job> = regions
        .iter()
        .zip(&dispatchers)
        .map(|(region, dispatcher)| Job {
            region,
            threads: 4,
            dispatcher,
        })
        .collect();
    let iters = 200u64;
    let results = launch_many(&jobs, 2, |dev, client, t| {
        let mut x = (dev * 1000 + t.id) as u64;
        for i in 0..iters {
            if dev == 2 && t.id == 3 && i == 50 {
                panic!("device 2 faulted");
            }
            x = client.noop(x).unwrap();
        }
    });
    for dev in [0, 1] {
        let r = results[dev].as_ref().unwrap();
        assert_eq!(r.calls, 4 * iters, "device {dev}");
        assert_eq!(r.errors, 0);
        assert!(regions[dev].is_quiescent(), "device {dev}");
    }
    let err = results[2].as_ref().unwrap_err();
    assert_eq!(err.thread, 3);
    assert!(err.message.contains("device 2 faulted"), "{err}");
    // Device 2's other threads finished their calls.
    assert_eq!(dispatchers[2].calls(), 3 * iters + 50);
}

/// The server's public accessors that take a port number check it against
/// the layout: a number past the last port panics, naming it, instead of
/// reading past the shared arrays.
#[test]
fn server_port_accessors_refuse_a_port_outside_the_layout() {
    let region = CpuRegion::new(Layout::new(2, 1).unwrap());
    let server = region.server();
    assert!(!server.pending(1) && server.snapshot(1).is_idle());
    let message = |r: std::thread::Result<()>| {
        let payload = r.expect_err("a port past the layout is refused");
        payload.downcast_ref::<String>().cloned().unwrap_or_default()
    };
    let pending = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        server.pending(2);
    }));
    assert_eq!(message(pending), "port 2 is outside the layout's 2 ports");
    let snapshot = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        server.snapshot(u32::MAX);
    }));
    assert_eq!(
        message(snapshot),
        format!("port {} is outside the layout's 2 ports", u32::MAX)
    );
}
